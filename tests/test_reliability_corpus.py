"""Hostile corpora (issue 29, items 1 and 3): text the tokenizer cannot see, and papers of unbounded size.

Item 1: a sentence is judged by what the encoder will see; a paper with a sentence that gets no word
piece (invisible or control characters, lone surrogates, marks with no base, U+FFFD) is rejected
with its reason while every other paper is indexed.
Item 3: reading and encoding are bounded per paper: over-long lines are skipped unread, papers over
`max_sentences` / `max_sentence_chars` are rejected with the documented reason, and windows go
through the model `batch_size` at a time.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aspire.data.guards import bounded_lines, invisible_text_reason
from aspire.data.papers import Paper, read_papers
from aspire.encoders import load_encoder
from aspire.encoders.pieces import budget_batches
from aspire.index import EncodeConfig, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.build import build_index
from aspire.index.corpus import encode_corpus

INVISIBLE = ["\x00", "\x07", "\x1f", "\x7f", "\u200b", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u0301", "\u0308",
             "\u20dd", "\ufffd", "\ue000", "\U000f0000", "\u0378", " ", "\u3000", "\u2028"]
VISIBLE = ["the", "model", "text", "é", "α", "→", "中", ".", "42", "ß"]
_SENTENCE = st.one_of(
    st.lists(st.sampled_from(VISIBLE), min_size=1, max_size=4).map(" ".join),
    st.lists(st.sampled_from(INVISIBLE), min_size=1, max_size=4).map("".join),
    st.tuples(st.sampled_from(INVISIBLE), st.sampled_from(VISIBLE)).map("".join),  # a mark before a word
)
_SURROGATE_LINE = '{"paper_id": "sur%d", "title": "t", "abstract": ["fine.", "bad \\ud800 one"]}'


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    return load_encoder(tiny_model_dir)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(papers=st.lists(st.lists(_SENTENCE, min_size=1, max_size=3), min_size=1, max_size=6),
       surrogates=st.integers(0, 2))
def test_property_bad_text_rejects_its_paper_and_every_other_paper_is_indexed(tmp_path_factory, encoder, papers,
                                                                                surrogates):
    root = tmp_path_factory.mktemp("corpus")
    lines = [json.dumps({"paper_id": f"p{i}", "title": "a title", "abstract": sents}) for i, sents in enumerate(papers)]
    lines += [_SURROGATE_LINE % i for i in range(surrogates)]
    lines.append(json.dumps({"paper_id": "anchor", "title": "t", "abstract": ["the model."]}))  # never all rejected
    (root / "papers.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = IndexBuildConfig(index=IndexConfig(kind="flat"))
    index, _ = build_index(root / "idx", "tiny", root / "papers.jsonl", config, load_encoder=lambda _: encoder)

    visible = {f"p{i}" for i, sents in enumerate(papers) if all(invisible_text_reason(s) is None for s in sents)}
    assert set(index.paper_ids) == visible | {"anchor"}  # every paper the encoder can see is indexed
    reasons = {r["paper_id"]: r["reason"] for r in index.rejected}
    assert set(reasons) == {f"p{i}" for i in range(len(papers))} - visible | {f"sur{i}" for i in range(surrogates)}
    assert all(any(w in r for w in ("visible", "surrogate", "word piece", "empty")) for r in reasons.values()), reasons
    for pid, sents in zip(index.paper_ids, index.sentences):  # every indexed sentence has its vector
        n = index.offsets[index.position(pid) + 1] - index.offsets[index.position(pid)]
        assert n == len(sents)
        assert all(encoder.tokenizer(s, add_special_tokens=False)["input_ids"] for s in sents)
    assert np.isfinite(np.asarray(index.vectors)).all()


def test_tokenizer_verdict_rejects_a_title_it_cannot_see_when_the_title_is_a_sentence(tiny_model_dir):
    """The reader allows any title; with include_title the title is sentence 0 and the tokenizer judges it."""
    titled = load_encoder(tiny_model_dir, include_title=True)
    papers = [Paper("blank-title", "\u200b\u2060", ["the model."]), Paper("ok", "a title", ["the text."])]
    assert titled.unseen_sentences(papers) == [[0], []]
    corpus = encode_corpus(titled, papers, progress=False)
    assert corpus.paper_ids == ["ok"]
    assert corpus.rejected[0]["paper_id"] == "blank-title" and "word piece" in corpus.rejected[0]["reason"]
    with pytest.raises(ValueError, match="blank-title.*no word pieces"):  # encode alone still refuses it
        titled.encode(papers)


class _Stub:
    """An encoder whose tokenizer 'sees' nothing in sentences containing '#'."""

    dim = 3

    def unseen_sentences(self, papers, batch_size=32):
        return [[i for i, s in enumerate(p.sentences) if "#" in s] for p in papers]

    def encode(self, papers, batch_size=32, progress=False):
        from aspire.batch import DocBatch

        assert not any("#" in s for p in papers for s in p.sentences), "unseen papers must not reach encode"
        return DocBatch.from_list([torch.ones(len(p.sentences), 3) for p in papers], [p.paper_id for p in papers],
                                  [p.sentences for p in papers])


@given(marks=st.lists(st.booleans(), min_size=1, max_size=20), chunk=st.integers(1, 5))
def test_property_encoder_verdict_rejects_exactly_the_unseen_papers_in_every_chunk(marks, chunk):
    papers = [Paper(f"p{i}", "t", ["a.", "b#" if bad else "b."]) for i, bad in enumerate(marks)]
    corpus = encode_corpus(_Stub(), papers, EncodeConfig(chunk_papers=chunk), progress=False)
    assert corpus.paper_ids == [f"p{i}" for i, bad in enumerate(marks) if not bad]
    assert [r["paper_id"] for r in corpus.rejected] == [f"p{i}" for i, bad in enumerate(marks) if bad]
    assert all("sentence(s) [1]" in r["reason"] for r in corpus.rejected)


# ---- item 3: bounded reading and encoding -------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 300), min_size=1, max_size=8), limit=st.integers(40, 200))
def test_property_lines_over_the_limit_are_rejected_unread_and_the_rest_read(tmp_path, lengths, limit):
    lines = []
    for i, n in enumerate(lengths):
        record = json.dumps({"paper_id": f"p{i}", "title": "t", "abstract": ["x" * max(n, 1)]})
        lines.append(record)
    path = tmp_path / "papers.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = read_papers(path, skip_bad=True, max_line_bytes=limit)
    long_ids = {f"p{i}" for i, line in enumerate(lines) if len(line.encode()) > limit}
    assert {p.paper_id for p in result.papers} == {f"p{i}" for i in range(len(lines))} - long_ids
    assert {r.paper_id for r in result.rejected} == long_ids  # the id is recovered from the line's head
    assert all(f"more than max_line_bytes={limit}" in r.reason for r in result.rejected)
    assert sorted(result.paper_lines + [r.line for r in result.rejected]) == list(range(1, len(lines) + 1))


def test_reading_a_huge_line_holds_only_a_bounded_part_of_it(tmp_path):
    path = tmp_path / "papers.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps({"paper_id": "ok", "title": "t", "abstract": ["fine."]}) + "\n")
        f.write('{"paper_id": "huge", "title": "t", "abstract": ["' + "word " * 4_000_000 + '"]}\n')  # 20 MB
        f.write(json.dumps({"paper_id": "after", "title": "t", "abstract": ["also fine."]}) + "\n")
    tracemalloc.start()
    result = read_papers(path, skip_bad=True)  # default limit: 1 MiB
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [p.paper_id for p in result.papers] == ["ok", "after"]
    assert result.rejected[0].paper_id == "huge" and "max_line_bytes=1048576" in result.rejected[0].reason
    assert peak < 4 << 20, f"reading held {peak} bytes for a 20 MB line"


def test_bounded_lines_yield_short_lines_whole_and_only_the_head_and_length_of_long_ones():
    import io

    data = b"aa\n" + b"b" * 50 + b"\ncc"
    assert list(bounded_lines(io.BytesIO(data), 10)) == [(b"aa\n", 0), (b"b" * 11, 51), (b"cc", 0)]
    assert list(bounded_lines(io.BytesIO(data), None)) == [(b"aa\n", 0), (b"b" * 50 + b"\n", 0), (b"cc", 0)]


def test_build_limits_reject_over_long_papers_with_the_documented_reason(tmp_path, encoder):
    lines = [json.dumps({"paper_id": "many", "title": "t", "abstract": ["the model."] * 12}),
             json.dumps({"paper_id": "long", "title": "t", "abstract": ["the " * 30 + "end."]}),
             json.dumps({"paper_id": "ok", "title": "t", "abstract": ["the text.", "a model."]})]
    (tmp_path / "papers.jsonl").write_text("\n".join(lines) + "\n")
    config = IndexBuildConfig(index=IndexConfig(kind="flat"),
                              encode=EncodeConfig(max_sentences=10, max_sentence_chars=100, max_line_bytes=0))
    index, _ = build_index(tmp_path / "idx", "tiny", tmp_path / "papers.jsonl", config, load_encoder=lambda _: encoder)
    assert index.paper_ids == ["ok"]
    reasons = {r["paper_id"]: r["reason"] for r in SentenceIndex.load(tmp_path / "idx").rejected}
    assert reasons == {"many": "abstract has 12 sentences, more than max_sentences=10",
                       "long": "sentence 0 has 124 characters, more than max_sentence_chars=100"}


def test_forward_in_row_chunks_equals_one_pass(encoder):
    words = "the model learns a representation of scientific text".split()
    long = Paper("long", "t", [" ".join(words[(i + j) % 8] for j in range(9)) + "." for i in range(60)])  # > 128 pieces
    inputs = encoder.tokenize([long, Paper("short", "t", ["a model."])])
    assert len(inputs.input_ids) > 3  # several continuation windows
    with torch.no_grad():
        whole = encoder.forward(inputs)
        chunked = encoder.forward(inputs, max_rows=2)
    assert torch.equal(whole.mask, chunked.mask)
    assert torch.allclose(whole.emb, chunked.emb, atol=1e-5)


@given(sizes=st.lists(st.integers(0, 50), max_size=30), max_items=st.integers(1, 6), max_total=st.integers(1, 80))
def test_property_budget_batches_keep_order_and_budgets(sizes, max_items, max_total):
    order = list(np.argsort([-s for s in sizes], kind="stable"))
    batches = budget_batches(order, sizes, max_items, max_total)
    assert [i for b in batches for i in b] == order
    for b in batches:
        assert 1 <= len(b) <= max_items
        assert len(b) == 1 or sum(sizes[i] for i in b) <= max_total
