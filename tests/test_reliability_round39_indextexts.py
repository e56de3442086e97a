"""Round 39 sweep of aspire.index.texts, aspire.index.lexical and aspire.jsonsafe: texts read from disk equal texts
held in memory, a papers file changed or truncated after a load refused naming it, BM25 over exactly title + sentences
by a hand computation, and jsonsafe output that a strict JSON parser reads."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest

from aspire.index import IndexFormatError, SentenceIndex
from aspire.index.lexical import index_bm25, papers_bm25
from aspire.index.texts import SentencesOnDisk, read_index_papers
from aspire.jsonsafe import dumps, strict_loads
from tests.test_index import config, random_corpus


@pytest.fixture
def saved(tmp_path):
    corpus = random_corpus(12, seed=5)
    odd = {1: "line\u2028separator and \u2029 paragraph", 2: "", 3: "emoji 😀 and ü", 4: 'quote " and \\ back'}
    for i, text in odd.items():
        corpus.sentences[i] = [text] + corpus.sentences[i][1:]
    corpus.titles[5] = "tïtle\u2028with separator"
    root = tmp_path / "idx"
    SentenceIndex.build(corpus, config(kind="flat"), "fp").save(root)
    return corpus, root


def papers_file(root):
    return next(root.glob("**/papers.jsonl"))


def test_lazy_texts_equal_memory_texts_for_every_paper(saved):
    corpus, root = saved
    memory = SentenceIndex.load(root, texts="memory")
    disk = SentenceIndex.load(root, texts="disk")
    assert isinstance(disk.sentences, SentencesOnDisk)
    for p in range(memory.n_papers):
        assert disk.sentences[p] == memory.sentences[p] == corpus.sentences[p], p
        assert disk.sentences[p - memory.n_papers] == corpus.sentences[p]
    assert disk.sentences[1][0] == "line\u2028separator and \u2029 paragraph" and disk.sentences[2][0] == ""
    assert disk.titles == memory.titles == corpus.titles


def test_a_papers_file_changed_after_a_disk_load_is_refused_naming_it(saved):
    corpus, root = saved
    path = papers_file(root)
    ids, _, sentences, _ = read_index_papers(path, texts="disk")
    lines = path.read_bytes().splitlines(keepends=True)
    # line 0 rewritten in place, same length, as another paper's record: the old code returned its texts as p0's
    assert ids[0] == "p0" and b'"p0"' in lines[0]
    path.write_bytes(lines[0].replace(b'"p0"', b'"q0"') + b"".join(lines[1:]))
    with pytest.raises(IndexFormatError, match="papers.jsonl.*paper position 0.*paper_id 'q0', not 'p0'"):
        sentences[0]
    assert sentences[1] == corpus.sentences[1]  # the lines not changed still read
    # a line no longer JSON: named, not a bare JSONDecodeError
    path.write_bytes(b"x" * len(lines[0]) + b"".join(lines[1:]))
    with pytest.raises(IndexFormatError, match="papers.jsonl.*paper position 0.*JSONDecodeError"):
        sentences[0]


def test_a_papers_file_truncated_after_a_disk_load_is_refused_not_a_bus_error(saved, tmp_path):
    _, root = saved
    path = papers_file(root)
    script = textwrap.dedent(f"""
        import os
        from aspire.index.texts import read_index_papers, IndexFormatError
        sentences = read_index_papers({str(path)!r}, texts="disk")[2]
        os.truncate({str(path)!r}, 10)
        try:
            sentences[len(sentences) - 1]
        except IndexFormatError as err:
            print("REFUSED", err)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, (run.returncode, run.stderr[-500:])  # the old code died of SIGBUS (-7)
    assert "REFUSED" in run.stdout and "papers.jsonl" in run.stdout and "truncated" in run.stdout


def test_papers_bm25_refuses_titles_and_sentences_of_different_lengths():
    with pytest.raises(ValueError, match="3 titles for 2 sentence lists"):  # zip dropped the third paper, unsaid
        papers_bm25(["aa", "bb", "cc"], [["xx"], ["yy"]], 1.25, 0.75, False)


def hand_bm25(docs: list[list[str]], query: list[str], k1: float, b: float) -> np.ndarray:
    """Lucene BM25 (bm25s' default): idf ln(1 + (N - df + .5) / (df + .5)), tf / (tf + k1 (1 - b + b dl / avgdl))."""
    n, avg = len(docs), sum(map(len, docs)) / len(docs)
    out = np.zeros(n)
    for word in set(query):
        df = sum(word in d for d in docs)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = Counter(d)[word]
            out[i] += idf * tf / (tf + k1 * (1 - b + b * len(d) / avg))
    return out


@pytest.mark.parametrize("include_title", [False, True])
def test_index_bm25_scores_equal_a_hand_computation_over_title_and_sentences(tmp_path, include_title):
    corpus = random_corpus(4, seed=1)
    words = [["zebra", "quark"], ["quark", "plasma", "ion"], ["zebra"], ["ion", "ion", "muon"]]
    titles = ["zebra title", "quark", "   ", "muon muon"]
    corpus.titles = titles
    sents = [[" ".join(w)] * len(corpus.sentences[i]) for i, w in enumerate(words)]
    if include_title:  # the encoder stores a non-blank title as sentence 0
        sents = [[t, *s[1:]] if t.strip() else s for t, s in zip(titles, sents)]
    corpus.sentences = sents
    index = SentenceIndex.build(corpus, config(kind="flat"), "fp", include_title=include_title)
    k1, b = 1.5, 0.6
    bm25 = index_bm25(index, k1, b)
    docs = []
    for title, s in zip(titles, sents):
        body = s[1:] if include_title and title.strip() else s
        docs.append((title + " " + " ".join(body)).split())
    for query in ["zebra", "quark ion", "muon plasma zebra", "title"]:
        want = hand_bm25(docs, query.split(), k1, b)
        np.testing.assert_allclose(bm25.scores([query])[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), np.float32("nan"), np.array([1.0, np.inf])])
def test_jsonsafe_output_is_strict_json_wherever_the_non_finite_value_sits(value):
    def refuse(constant):
        raise AssertionError(f"bare {constant} in the output")

    doc = {"a": [1, {"b": (2.0, value)}], 3: {"c": {"d": value}}, "e": value}
    text = dumps(doc)
    out = json.loads(text, parse_constant=refuse)
    assert strict_loads(text) == out
    assert out["a"][1]["b"][1] in (None, [1.0, None]) and out["e"] in (None, [1.0, None])
    assert set(out["non_finite"]) >= {"e", "3.c.d"} or set(out["non_finite"]) >= {"e.1", "3.c.d.1"}
    top = json.loads(dumps([value, {"x": value}]), parse_constant=refuse)
    assert top[1]["x"] in (None, [1.0, None])


@pytest.mark.parametrize("include_title", [False, True])
def test_bm25_reads_the_title_once_for_a_paper_stored_as_its_title_alone(include_title):
    from aspire.data.papers import Paper
    from aspire.encoders.contextual import paper_sentences
    from aspire.scoring.lexical import BM25Index, paper_text

    papers = [Paper("a", "quark zebra", []), Paper("b", "plasma", ["muon ion", "zebra ion"]),
              Paper("c", "ion", ["plasma muon"])]
    stored = [paper_sentences(p, include_title) for p in papers]
    assert stored[0] == ["quark zebra"]  # the encoder stores a paper without abstract sentences as its title
    got = papers_bm25([p.title for p in papers], stored, 1.25, 0.75, include_title)
    want = BM25Index([paper_text(p) for p in papers], ["0", "1", "2"])  # the benchmarks' BM25: title + abstract
    for query in ["quark", "zebra ion", "plasma"]:  # the old code read "quark zebra quark zebra": 0.604, not 0.523
        np.testing.assert_allclose(got.scores([query]), want.scores([query]), rtol=1e-6)
