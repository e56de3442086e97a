"""Round 48 sweep of the contextual sentence encoder: sentence and whole vectors against a brute-force pooling of
one unbatched pass (word pieces assigned to sentences by hand from the tokenizer's offsets), batch-size and
paper-order invariance, and lengths that are no whole number refused at construction, naming them."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder
from tests.conftest import TINY_WORDS


def brute_force(enc: ContextualSentenceEncoder, paper: Paper) -> tuple[torch.Tensor, torch.Tensor]:
    """(sentence vectors (S, D), whole vector (D,)) of a paper that fits one window: the pair run alone, unpadded;
    each abstract piece goes to the sentence whose first character is the last at or before the piece's start; the
    title's pieces to sentence 0 where the title is one; the whole vector the mean over every piece, specials too."""
    tok = enc.tokenizer
    titled = bool(enc.include_title and paper.title.strip()) or not paper.sentences
    body = list(paper.sentences)
    e = tok(paper.title, " ".join(body), return_offsets_mapping=True, return_tensors="pt")
    assert e["input_ids"].shape[1] <= enc.max_length
    with torch.no_grad():
        h = enc.model(**{k: v for k, v in e.items() if k != "offset_mapping"}).last_hidden_state[0].double()
    starts = np.cumsum([0] + [len(s) + 1 for s in body[:-1]])
    vec, cnt = torch.zeros(len(body) + titled, h.shape[1], dtype=torch.float64), torch.zeros(len(body) + titled)
    for t, (seq, (a, _)) in enumerate(zip(e.sequence_ids(0), e["offset_mapping"][0].tolist())):
        if seq == 1:
            k = max(i for i, st in enumerate(starts) if st <= a) + titled
        elif seq == 0 and titled:
            k = 0
        else:
            continue
        vec[k] += h[t]
        cnt[k] += 1
    assert (cnt > 0).all()
    return vec / cnt[:, None], h.mean(0)


def random_papers(n: int, seed: int = 1) -> list[Paper]:
    rng = random.Random(seed)
    words = lambda k: " ".join(rng.choice(TINY_WORDS) for _ in range(k))  # noqa: E731
    return [Paper(f"p{i}", words(rng.randint(0, 4)), [words(rng.randint(1, 8)) + "." for _ in range(rng.randint(1, 4))])
            for i in range(n)]


@pytest.mark.parametrize("include_title", [False, True])
def test_sentence_and_whole_vectors_match_brute_force_in_any_order_and_batch_size(tiny_model_dir, include_title):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, include_title=include_title)
    papers = random_papers(10)
    assert any(not p.title for p in papers) and any(len(p.sentences) == 1 for p in papers)
    ref = enc.encode(papers, batch_size=4)
    for i, p in enumerate(papers):
        vec, whole = brute_force(enc, p)
        n = len(vec)
        assert ref.mask[i, :n].all() and not ref.mask[i, n:].any()
        assert torch.allclose(ref.emb[i, :n].double(), vec, atol=1e-5), p.paper_id
        assert torch.allclose(ref.whole[i].double(), whole, atol=1e-5), p.paper_id
    perm = list(range(len(papers)))
    random.Random(3).shuffle(perm)
    for bs in (1, 3, 64):
        out = enc.encode([papers[i] for i in perm], batch_size=bs)
        assert out.paper_ids == [papers[i].paper_id for i in perm]
        for j, i in enumerate(perm):
            n = int(ref.mask[i].sum())
            assert torch.allclose(out.emb[j, :n], ref.emb[i, :n], atol=1e-5)
            assert torch.allclose(out.whole[j], ref.whole[i], atol=1e-5)


@pytest.mark.parametrize("settings, named", [
    ({"max_length": 20.5}, "20.5"), ({"max_length": "64"}, "'64'"), ({"max_length": True}, "True"),
    ({"max_title_tokens": 2.5}, "2.5"), ({"max_title_tokens": True}, "True"), ({"max_title_tokens": "3"}, "'3'"),
])
def test_lengths_that_are_no_whole_number_are_refused_naming_them(tiny_model_dir, settings, named):
    # before: max_length=20.5 was kept and every encode failed later with "'float' object cannot be interpreted as
    # an integer" (naming nothing); max_title_tokens=2.5 was kept, saved in the settings, and crashed a long title's
    # cut (a list index of 1.5); "64" raised a bare TypeError from a comparison
    with pytest.raises(ValueError, match=f"whole numbers, got .*{named}"):
        ContextualSentenceEncoder.from_pretrained(tiny_model_dir, **settings)


@pytest.mark.parametrize("max_length", [10.5, True, "5"])
def test_embed_texts_refuses_a_max_length_that_is_no_whole_number(tiny_model_dir, max_length):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match=f"max_length must be >= 0.*a whole number, got {max_length!r}"):
        enc.embed_texts(["the model is new"], max_length=max_length)


def test_a_whole_numpy_max_length_is_kept_as_an_int(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=np.int64(40),
                                                    max_title_tokens=np.int64(4))
    assert enc.settings()["max_length"] == 40 and type(enc.settings()["max_length"]) is int
    assert type(enc.settings()["max_title_tokens"]) is int
