"""Round 8, encoders: contextual sentence vectors against a brute-force re-implementation (windows, title,
control codes, batch order), the text-pair path's token types, one tokenisation for `encode_independent`, and
one read of a model's settings file a load."""

from __future__ import annotations

import random

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder, load_encoder
from aspire.encoders import pretrained as pretrained_module

WORDS = ("the a of and to in is we for model method result paper task data learning neural network language text "
         "sentence show propose new approach document similarity scientific citation aspect café naïve").split()


def random_papers(seed: int, n: int, max_sentences: int, max_words: int) -> list[Paper]:
    rng = random.Random(seed)

    def sentence(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k)) + "."

    return [Paper(f"p{i}", sentence(rng.randint(1, 6))[:-1],
                  [sentence(rng.randint(1, max_words)) for _ in range(rng.randint(1, max_sentences))]) for i in range(n)]


def brute_force(encoder: ContextualSentenceEncoder, paper: Paper, code: str | None = None):
    """(sentence vectors (S, D) or None for a sentence left out, whole vector (D,)) built by hand: the BERT layout
    `[CLS] [CODE] title [SEP] pieces [SEP]`, window after window of the abstract's pieces (stride 0), each sentence the
    mean of its pieces over every window, the title sentence 0 with include_title."""
    tok = encoder.tokenizer
    titled = int(encoder.include_title)
    window = encoder.max_length - (code is not None)
    title = tok(paper.title, add_special_tokens=False)["input_ids"][: min(encoder.max_title_tokens, window - 4)]
    pieces = [(i, k + titled) for k, s in enumerate(paper.sentences) for i in tok(s, add_special_tokens=False)["input_ids"]]
    room = window - 3 - len(title)
    head = [tok.cls_token_id] + ([tok.convert_tokens_to_ids(code)] if code else [])
    per_sentence, rows = {}, []
    for lo in range(0, len(pieces), room):
        part = pieces[lo : lo + room]
        ids = head + title + [tok.sep_token_id] + [i for i, _ in part] + [tok.sep_token_id]
        owner = [-1] * len(head) + [0 if titled else -1] * len(title) + [-1] + [k for _, k in part] + [-1]
        first = len(head) + len(title) + 1
        types = [0] * first + [1] * (len(ids) - first)
        with torch.no_grad():
            hidden = encoder.model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])).last_hidden_state[0]
        for pos, k in enumerate(owner):
            if k >= 0:
                per_sentence.setdefault(k, []).append(hidden[pos])
        rows.append(hidden)
        if encoder.overflow == "truncate":
            break
    n = len(paper.sentences) + titled
    vectors = [torch.stack(per_sentence[k]).mean(0) if k in per_sentence else None for k in range(n)]
    return vectors, torch.cat(rows).mean(0)


def assert_brute_force(encoder, papers, batch, codes=None):
    for i, paper in enumerate(papers):
        want, whole = brute_force(encoder, paper, codes[i] if codes else encoder.code)
        for k, vector in enumerate(want):
            assert bool(batch.mask[i, k]) == (vector is not None), (paper.paper_id, k)
            if vector is not None:
                torch.testing.assert_close(batch.emb[i, k], vector, atol=1e-5, rtol=1e-5)
        assert not batch.mask[i, len(want):].any()
        torch.testing.assert_close(batch.whole[i], whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("include_title", [False, True])
@pytest.mark.parametrize("overflow", ["window", "truncate"])
def test_sentence_vectors_equal_a_brute_force_pooling_over_windows(tiny_model_dir, include_title, overflow, caplog):
    encoder = load_encoder(tiny_model_dir, include_title=include_title, overflow=overflow, max_length=24,
                           max_title_tokens=4)
    papers = random_papers(1, 7, max_sentences=10, max_words=12)
    batch = encoder.encode(papers, batch_size=3)
    assert batch.paper_ids == [p.paper_id for p in papers]
    assert len(encoder.truncation_report(papers)) >= 5  # most papers run past one window of 24 pieces
    assert_brute_force(encoder, papers, batch)


def test_vectors_do_not_depend_on_batch_size_order_or_padding(tiny_model_dir):
    encoder = load_encoder(tiny_model_dir)
    papers = random_papers(2, 9, max_sentences=9, max_words=10) + [Paper("short", "", ["model."])]
    together = encoder.encode(papers, batch_size=10)
    reverse = encoder.encode(papers[::-1], batch_size=4)
    assert reverse.paper_ids == [p.paper_id for p in papers[::-1]]
    assert_brute_force(encoder, papers, together)
    for i, paper in enumerate(papers):
        alone = encoder.encode([paper])
        n = len(paper.sentences)
        j = len(papers) - 1 - i
        torch.testing.assert_close(alone.emb[0, :n], together.emb[i, :n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(reverse.emb[j, :n], together.emb[i, :n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(alone.whole[0], together.whole[i], atol=1e-5, rtol=1e-5)


def test_control_codes_sit_after_cls_for_every_window_and_paper(tiny_model_dir):
    encoder = load_encoder(tiny_model_dir, max_length=24, max_title_tokens=4)
    encoder.add_codes(["[METHOD]", "[DOC]"], "[DOC]")
    papers = random_papers(3, 5, max_sentences=8, max_words=10)
    assert_brute_force(encoder, papers, encoder.encode(papers, batch_size=2))
    codes = ["[METHOD]", "[DOC]", "[DOC]", "[METHOD]", "[METHOD]"]
    with torch.no_grad():
        batch = encoder.forward(encoder.tokenize(papers, codes))
    assert_brute_force(encoder, papers, batch, codes)


@pytest.mark.parametrize("segment_ids", [True, False])
def test_text_pairs_take_the_encoders_segments_as_its_papers_do(tiny_model_dir, segment_ids):
    # the whole-abstract vector of `encode` and `encode_abstract` read one text pair `[CLS] title [SEP] abstract
    # [SEP]`; with segment_ids=False the pair path gave the abstract segment 1 all the same (max difference 2.2)
    encoder = load_encoder(tiny_model_dir, segment_ids=segment_ids)
    papers = random_papers(4, 4, max_sentences=4, max_words=8)
    whole = encoder.encode(papers).whole
    torch.testing.assert_close(encoder.encode_abstract(papers, batch_size=3), whole, atol=1e-5, rtol=1e-5)
    pairs = encoder.embed_texts([p.title for p in papers], [" ".join(p.sentences) for p in papers])
    torch.testing.assert_close(pairs, whole, atol=1e-5, rtol=1e-5)


class CountingTokenizer:
    """A tokenizer that counts the texts it is asked to tokenize (everything else passed through)."""

    def __init__(self, tokenizer) -> None:
        self.inner, self.texts = tokenizer, 0

    def __call__(self, text, *args, **kwargs):
        self.texts += len(text)
        return self.inner(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_independent_sentences_are_tokenized_once_with_the_same_vectors(tiny_model_dir):
    encoder = load_encoder(tiny_model_dir)
    papers = random_papers(5, 6, max_sentences=5, max_words=9)
    want = [encoder.embed_texts(p.sentences) for p in papers]  # each sentence alone, one paper at a time
    encoder.tokenizer = CountingTokenizer(encoder.tokenizer)
    batch = encoder.encode_independent(papers, batch_size=4)
    assert encoder.tokenizer.texts == sum(len(p.sentences) for p in papers)  # twice as many before
    for i, paper in enumerate(papers):
        torch.testing.assert_close(batch.emb[i, : len(paper.sentences)], want[i], atol=1e-6, rtol=1e-6)
    assert batch.mask.sum(1).tolist() == [len(p.sentences) for p in papers]


@pytest.mark.parametrize("code", [None, "[DOC]"])
def test_independent_sentence_without_pieces_is_still_refused(tiny_model_dir, code):
    encoder = load_encoder(tiny_model_dir)
    if code:
        encoder.add_codes([code], code)  # the code is one more piece, never one of the sentence's
    papers = [Paper("ok", "A model", ["We propose a model."]), Paper("bad", "Data", ["The data.", "  \u200b ", "x"])]
    with pytest.raises(ValueError, match=r"paper bad: sentence\(s\) \[1\] produced no word pieces"):
        encoder.encode_independent(papers)
    titled = ContextualSentenceEncoder(encoder.model, encoder.tokenizer, include_title=True)
    with pytest.raises(ValueError, match=r"paper t: sentence\(s\) \[0\].*sentence 0 is the paper's title"):
        titled.encode_independent([Paper("t", "\u200b", ["A model."])])  # a title the tokenizer cannot see
    assert titled.encode_independent([Paper("t", " ", ["A model."])]).sentences == [["A model."]]  # blank: none


def test_load_encoder_reads_the_settings_file_once(tiny_model_dir, tmp_path, monkeypatch):
    saved = tmp_path / "saved"
    load_encoder(tiny_model_dir, include_title=True, max_length=40).save_pretrained(saved)
    reads = []
    read_json = pretrained_module.read_json
    monkeypatch.setattr(pretrained_module, "read_json", lambda path, *a, **k: reads.append(path) or read_json(path, *a, **k))
    encoder = load_encoder(saved)
    assert len(reads) == 1  # twice before: load_encoder's check and from_pretrained
    assert encoder.include_title and encoder.max_length == 40
    with pytest.raises(ValueError, match="load_encoder's keywords: unknown encoder setting"):
        load_encoder(saved, overflw="window")
