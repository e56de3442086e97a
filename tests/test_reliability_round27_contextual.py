"""Round 27 sweep of the contextual sentence encoder's edge cases: no paper at all (`tokenize`, `forward`, and the
per-paper reports), papers of one sentence, of a title alone, of sentences that all tokenise to nothing, sentences
longer than a window, batch order and batch invariance against a brute-force reference (each sentence tokenised
alone, each window built by hand and run alone, unpadded, pooled in float64), dtype from the model, and errors raised
on the tokenising worker thread or in the model while the worker runs."""

from __future__ import annotations

import random
import threading
import time

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.inputs import EncoderInputs
from tests.conftest import TINY_WORDS


def brute_force(enc: ContextualSentenceEncoder, paper: Paper) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sentence vectors (S, D), mask (S,), whole vector (D,)) of one paper, from windows built by hand:
    `[CLS] title [SEP] pieces [SEP]`, the title cut to `max_title_tokens`, as many abstract pieces (each sentence
    tokenised alone) as fit, the next window going on where this one stopped; each window runs alone."""
    tok, model = enc.tokenizer, enc.model
    titled = bool(enc.include_title and paper.title.strip()) or not paper.sentences
    sents = ([paper.title] if titled else []) + list(paper.sentences)
    title = tok(paper.title, add_special_tokens=False)["input_ids"][: enc.max_title_tokens]
    pieces = [(i, k + titled) for k, s in enumerate(paper.sentences) for i in tok(s, add_special_tokens=False)["input_ids"]]
    room = enc.max_length - 3 - len(title)
    windows = [pieces[i : i + room] for i in range(0, max(len(pieces), 1), room)]
    if enc.overflow == "truncate":
        windows = windows[:1]
    sums, counts = torch.zeros(len(sents), enc.dim, dtype=torch.float64), torch.zeros(len(sents), dtype=torch.float64)
    whole, n_whole = torch.zeros(enc.dim, dtype=torch.float64), 0
    for window in windows:
        ids = [tok.cls_token_id, *title, tok.sep_token_id, *(i for i, _ in window), tok.sep_token_id]
        types = [0] * (len(title) + 2) + [1] * (len(window) + 1)
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])).last_hidden_state[0]
        hidden = hidden.double()
        for j, (_, k) in enumerate(window):
            sums[k] += hidden[len(title) + 2 + j]
            counts[k] += 1
        if titled:
            sums[0] += hidden[1 : 1 + len(title)].sum(0)
            counts[0] += len(title)
        whole += hidden.sum(0)
        n_whole += len(ids)
    return (sums / counts.clamp_min(1)[:, None]).float(), counts > 0, (whole / n_whole).float()


def random_papers(n: int, seed: int = 0) -> list[Paper]:
    rng = random.Random(seed)

    def sentence(words: int) -> str:
        return " ".join(rng.choice(TINY_WORDS) for _ in range(words)) + "."

    papers = [Paper(f"p{i}", sentence(rng.randint(1, 6)),
                    [sentence(rng.randint(1, 20 if i % 3 else 50)) for _ in range(rng.randint(1, 4))]) for i in range(n)]
    return papers + [Paper("one", "a title", ["the model."]), Paper("titleonly", "the title of a paper", [])]


# ---- no paper at all -------------------------------------------------------------------------------------------
def test_tokenize_of_no_paper_is_refused_as_encode_refuses_it(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="encode: no papers given"):
        enc.encode([])
    with pytest.raises(ValueError, match="tokenize: no papers given"):  # was IndexError from transformers
        enc.tokenize([])
    with pytest.raises(ValueError, match="tokenize: no papers given"):
        enc.tokenize([], codes=[])
    assert enc.unseen_sentences([]) == [] and enc.truncation_report([]) == []  # per-paper answers: none


def test_forward_of_inputs_with_no_paper_says_so(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    empty = torch.zeros(0, 0, dtype=torch.long)
    inputs = EncoderInputs(empty, empty, empty, torch.zeros(0, dtype=torch.long), [], [], [])
    with pytest.raises(ValueError, match="forward: the inputs hold no paper"):  # was "max() arg is an empty sequence"
        enc.forward(inputs)


# ---- against the brute-force reference -------------------------------------------------------------------------
@pytest.mark.parametrize("settings", [
    {},
    {"include_title": True},
    {"max_length": 24},
    {"max_length": 20, "include_title": True, "max_title_tokens": 3},
    {"max_length": 24, "overflow": "truncate"},
])
def test_encode_matches_brute_force_windows_in_any_batching(tiny_model_dir, settings):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, **settings)
    papers = random_papers(5)
    want = [brute_force(enc, p) for p in papers]
    for batch_size, max_batch_chars in [(32, 1 << 20), (1, 1 << 20), (4, 150)]:
        got = enc.encode(papers, batch_size=batch_size, max_batch_chars=max_batch_chars)
        assert got.paper_ids == [p.paper_id for p in papers]  # input order, whatever the length buckets
        assert got.emb.dtype == torch.float32 and got.emb.device.type == "cpu"
        for i, (emb, mask, whole) in enumerate(want):
            n = len(emb)
            assert got.mask[i, :n].tolist() == mask.tolist(), (papers[i].paper_id, batch_size)
            assert not got.mask[i, n:].any()
            torch.testing.assert_close(got.emb[i, :n][mask], emb[mask], atol=2e-6, rtol=1e-5)
            torch.testing.assert_close(got.whole[i], whole, atol=2e-6, rtol=1e-5)


def test_a_sentence_longer_than_several_windows_is_pooled_over_all_of_them(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=16)
    paper = Paper("long", "a title", ["the model.", " ".join(TINY_WORDS[:60]) + ".", "the data."])
    inputs = enc.tokenize([paper])
    rows_with_1 = (inputs.sent_index == 1).any(1).sum().item()
    assert rows_with_1 >= 4  # sentence 1 spans at least four windows
    emb, mask, whole = brute_force(enc, paper)
    got = enc.encode([paper])
    assert mask.all() and got.mask.all()
    torch.testing.assert_close(got.emb[0], emb, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got.whole[0], whole, atol=2e-6, rtol=1e-5)
    assert [r.paper_id for r in enc.truncation_report([paper])] == ["long"]


# ---- edge papers -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("include_title", [False, True])
def test_a_title_without_abstract_is_its_one_sentence(tiny_model_dir, include_title):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, include_title=include_title)
    paper = Paper("t", "the title of a paper", [])
    got = enc.encode([paper, Paper("x", "data", ["the data.", "the text."])])
    assert got.sentences[0] == ["the title of a paper"] and got.mask[0].tolist() == [True] + [False] * (1 + include_title)
    emb, _, whole = brute_force(enc, paper)
    torch.testing.assert_close(got.emb[0, :1], emb, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got.whole[0], whole, atol=2e-6, rtol=1e-5)


def test_a_paper_whose_sentences_all_tokenise_to_nothing_is_refused_by_name(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    bad = Paper("blank", "a title", ["\u200b", " \u200b "])
    assert enc.unseen_sentences([Paper("ok", "t", ["the model."]), bad]) == [[], [0, 1]]
    with pytest.raises(ValueError, match=r"paper blank: sentence\(s\) \[0, 1\] produced no word pieces"):
        enc.encode([Paper("ok", "t", ["the model."]), bad])
    with pytest.raises(ValueError, match=r"paper blank: sentence\(s\) \[0, 1\]"):
        enc.tokenize([bad])


# ---- dtype and device from the model -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_forward_gives_the_models_dtype_and_encode_float32_on_the_cpu(tiny_model_dir, dtype):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    papers = [Paper("a", "title", ["the model is new.", "we show results."]), Paper("b", "data", ["the data."])]
    want = enc.encode(papers)
    enc.model.to(dtype)
    out = enc.forward(enc.tokenize(papers))
    assert out.emb.dtype == dtype and out.whole.dtype == dtype and out.emb.device == enc.device
    got = enc.encode(papers)
    assert got.emb.dtype == torch.float32 and got.whole.dtype == torch.float32
    tol = 1e-5 if dtype == torch.float64 else 0.1
    torch.testing.assert_close(got.emb[got.mask], want.emb[want.mask], atol=tol, rtol=tol)


# ---- the tokenising worker thread ----------------------------------------------------------------------------
def _workers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("aspire-tokenize")]


def test_an_error_on_the_tokenising_worker_surfaces_and_leaves_no_thread(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    inner, calls = enc.tokenize, []

    def failing(papers, codes=None):
        calls.append(threading.current_thread().name)
        if len(calls) == 2:
            raise RuntimeError("worker failed")
        return inner(papers, codes)

    enc.tokenize = failing
    with pytest.raises(RuntimeError, match="worker failed"):
        enc.encode(random_papers(4), batch_size=1)
    assert calls[1].startswith("aspire-tokenize") and len(calls) == 2  # raised on the worker, nothing after it
    assert _workers() == []


def test_an_error_in_the_model_while_the_worker_tokenises_surfaces_and_leaves_no_thread(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    inner = enc.tokenize

    def slow(papers, codes=None):
        time.sleep(0.05)
        return inner(papers, codes)

    def failing_forward(*args, **kwargs):
        raise RuntimeError("model failed")

    enc.tokenize, enc.forward = slow, failing_forward
    with pytest.raises(RuntimeError, match="model failed"):
        enc.encode(random_papers(4), batch_size=1)
    assert _workers() == []
    assert not enc.training  # it was in eval mode before, and is after


@pytest.mark.parametrize("budget", [0, -5, 2.5, True])
def test_encode_refuses_a_character_budget_below_one_naming_it(tiny_model_dir, budget):
    # 0 or a negative budget put each paper in a batch of its own unsaid (budget_batches now refuses it, naming its
    # own argument); encode names the option the caller gave
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match=r"encode: max_batch_chars must be a whole number >= 1"):
        enc.encode(random_papers(2), max_batch_chars=budget)
