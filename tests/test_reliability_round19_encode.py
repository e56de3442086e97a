"""Round 19: the one-vector encodings (`embed_texts`, `encode_abstract`, `encode_independent`) cut each text at
`max_length` word pieces; they did so without a word, while `encode` reports its long papers. Each cut text is now
counted and named in one warning a call, its length checked against the tokenizer's own uncut count, and the vectors
are those of the text cut at the limit (a model pass over the tokenizer's truncation, by hand), as before."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder, load_encoder

LIMIT = 128  # the tiny model's `max_position_embeddings` and tokenizer limit (tests/conftest.py)


@pytest.fixture(scope="module")
def encoder(tiny_model_dir) -> ContextualSentenceEncoder:
    return ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir))


def cut_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cut at the limit" in r.getMessage()]


def words(n: int) -> str:
    """A text of `n` one-piece words of the tiny vocabulary."""
    return " ".join(["model"] * n)


def uncut(tok, text: str, pair: str | None = None) -> int:
    """Word pieces of a text (pair), special ones included, by the tokenizer without truncation."""
    return len(tok(text, pair)["input_ids"])


def by_hand(encoder, texts: list[str], max_length: int) -> torch.Tensor:
    """Mean-pooled vectors of each text cut at `max_length` by the tokenizer alone, one text a model pass."""
    out = []
    for text in texts:
        enc = encoder.tokenizer([text], truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            out.append(encoder.model(**enc).last_hidden_state[0].mean(0))
    return torch.stack(out)


def test_embed_texts_names_every_text_it_cuts_and_keeps_its_vectors(encoder, caplog):
    tok = encoder.tokenizer
    texts = ["a short text.", words(LIMIT - 2), words(LIMIT - 1), words(300), "the data."]  # fits, fits exactly, 1 over
    with caplog.at_level(logging.WARNING, logger="aspire"):
        vecs = encoder.embed_texts(texts, batch_size=2)
    (warning,) = cut_warnings(caplog)
    assert uncut(tok, texts[1]) == LIMIT and uncut(tok, texts[2]) == LIMIT + 1 and uncut(tok, texts[3]) == 302
    assert warning.startswith(f"2 text(s) longer than {LIMIT} word pieces (text 2 ({LIMIT + 1} pieces), "
                              "text 3 (302 pieces))")
    torch.testing.assert_close(vecs, by_hand(encoder, texts, LIMIT), atol=1e-5, rtol=1e-5)  # the cut as before


def test_nothing_cut_no_warning(encoder, caplog):
    with caplog.at_level(logging.WARNING, logger="aspire"):
        encoder.embed_texts(["a short text.", words(LIMIT - 2)])
        encoder.encode_abstract([Paper("p", "the title", ["one sentence."])])
    assert cut_warnings(caplog) == []


def test_a_given_max_length_is_the_limit_reported(encoder, caplog):
    texts = [words(20), words(10), words(15)]
    with caplog.at_level(logging.WARNING, logger="aspire"):
        vecs = encoder.embed_texts(texts, max_length=12)
    (warning,) = cut_warnings(caplog)
    assert warning.startswith("2 text(s) longer than 12 word pieces (text 0 (22 pieces), text 2 (17 pieces))")
    torch.testing.assert_close(vecs, by_hand(encoder, texts, 12), atol=1e-5, rtol=1e-5)


def test_the_warning_names_twenty_and_counts_the_rest(encoder, caplog):
    texts = [words(LIMIT + k) for k in range(25)]
    with caplog.at_level(logging.WARNING, logger="aspire"):
        encoder.embed_texts(texts)
    (warning,) = cut_warnings(caplog)
    assert warning.startswith(f"25 text(s) longer than {LIMIT} word pieces (text 0 ({LIMIT + 2} pieces)")
    assert f"text 19 ({LIMIT + 21} pieces) and 5 more)" in warning and "text 20 " not in warning


def test_encode_abstract_names_the_papers_it_cuts(encoder, caplog):
    """The `abstract` baseline and `title+facet` queries: CSFCube title + abstract passes 512 MiniLM pieces in 41 of
    4,205 papers, and those were cut unsaid."""
    tok = encoder.tokenizer
    papers = [Paper("short", "a title", ["we propose a model."]),
              Paper("long-1", "the title", [f"the model {k} improves the results of the task." for k in range(20)]),
              Paper("long-2", "", [words(200) + "."])]
    with caplog.at_level(logging.WARNING, logger="aspire"):
        pair = encoder.encode_abstract(papers)
        joined = encoder.encode_abstract(papers, joiner=" ")
    pair_warning, joined_warning = cut_warnings(caplog)
    n1, n2 = (uncut(tok, p.title, " ".join(p.sentences)) for p in papers[1:])
    assert n1 > LIMIT and n2 > LIMIT
    assert pair_warning.startswith(f"2 text(s) (pairs) longer than {LIMIT} word pieces (paper long-1 ({n1} pieces), "
                                   f"paper long-2 ({n2} pieces))")
    j1, j2 = (uncut(tok, (p.title + " " + " ".join(p.sentences)).strip()) for p in papers[1:])
    assert joined_warning.startswith(f"2 text(s) longer than {LIMIT} word pieces (paper long-1 ({j1} pieces), "
                                     f"paper long-2 ({j2} pieces))")
    assert pair.shape == joined.shape == (3, encoder.dim)
    torch.testing.assert_close(joined, encoder.embed_texts([(p.title + " " + " ".join(p.sentences)).strip()
                                                            for p in papers]))


def test_encode_independent_names_paper_and_sentence(tiny_model_dir, caplog):
    encoder = ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir), include_title=True)
    papers = [Paper("a", "the title", ["one sentence.", words(150) + ".", "two."]), Paper("b", "", [words(140)])]
    with caplog.at_level(logging.WARNING, logger="aspire"):
        out = encoder.encode_independent(papers)
    (warning,) = cut_warnings(caplog)
    assert warning.startswith(f"2 text(s) longer than {LIMIT} word pieces (paper a sentence 2 (153 pieces), "
                              "paper b sentence 0 (142 pieces))")  # sentence 0 of paper a is its title
    torch.testing.assert_close(out.emb[0, 2], by_hand(encoder, [words(150) + "."], LIMIT)[0], atol=1e-5, rtol=1e-5)


def test_a_control_code_counts_against_the_limit(tiny_model_dir, caplog):
    encoder = ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir))
    encoder.add_codes(["[DOC]"], "[DOC]")
    texts = [words(LIMIT - 3), words(LIMIT - 2)]  # with the code: 128 pieces (fits), 129 (one over)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        encoder.embed_texts(texts)
    (warning,) = cut_warnings(caplog)
    assert warning.startswith(f"1 text(s) longer than {LIMIT} word pieces (text 1 ({LIMIT + 1} pieces))")


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_fast_backends_report_the_same_cut(tiny_model_dir, tmp_path, cache, caplog, backend):
    """InferenceEncoder inherits the text encodings; loaded from its load record it has the recorded Rust tokenizer
    (`aspire.encoders.recorded_tokenizer`), whose uncut count must agree."""
    import shutil

    model = shutil.copytree(tiny_model_dir, tmp_path / "tiny")
    papers = [Paper("short", "a title", ["we propose a model."]),
              Paper("long", "the title", [f"the model {k} improves the results of the task." for k in range(20)])]
    expected = []
    for load in range(2):  # the first load builds the torch model; the second reads the load record
        fast = load_encoder(model, backend=backend)
        assert (type(fast.tokenizer).__name__ == "RecordedTokenizer") == (load == 1)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="aspire"):
            fast.encode_abstract(papers)
            fast.encode_independent([Paper("x", "", ["short.", words(140)])])
        got = [re.sub(r"\s+", " ", w) for w in cut_warnings(caplog)]
        assert got[0].startswith(f"1 text(s) (pairs) longer than {LIMIT} word pieces (paper long (")
        assert got[1].startswith(f"1 text(s) longer than {LIMIT} word pieces (paper x sentence 1 (142 pieces))")
        expected.append(got)
    assert expected[0] == expected[1]
    exact = load_encoder(model)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        caplog.clear()
        exact.encode_abstract(papers)
    assert cut_warnings(caplog) == expected[0][:1]
