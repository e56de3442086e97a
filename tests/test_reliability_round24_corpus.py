"""Round 24, the corpus module (`aspire.index.corpus`): every input record comes out once, named by its line.

A paper `encode_corpus` rejects while encoding (a title the tokenizer gives no word piece, with include_title) went
to rejected.jsonl without the `"line"` that `read_corpus`'s rejections carry; now every rejected record names its
input line and id, through `aspire encode`, `aspire index build` and `aspire index encode-shard`. Also: the rejected
records of one encoding in input order, ids compared as strings (an integer 7 and the paper "7" were both encoded,
into a shard that did not load), ids checked by `read_papers`' rules, and gzip / plain / .jsonl inputs read alike.
Each is checked against a brute-force read of the same file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.papers import Paper
from aspire.encoders import load_encoder
from aspire.index import EncodeConfig, SentenceIndex
from aspire.index.__main__ import main as index_main
from aspire.index.corpus import EncodedCorpus, encode_corpus, read_corpus

BLANK_TITLE = "\u200b"  # read_papers allows any title; with include_title the tokenizer gives it no word piece
RECORDS = [
    {"paper_id": "a", "title": "t", "abstract": ["the model."]},
    {"paper_id": "bad", "title": "x", "abstract": "   "},  # rejected by the reader
    {"paper_id": "blank1", "title": BLANK_TITLE, "abstract": ["the text."]},  # rejected while encoding
    None,  # a blank line
    {"paper_id": 7, "title": "t", "abstract": ["a model."]},
    {"paper_id": "blank2", "title": BLANK_TITLE, "abstract": ["a data."]},
    {"paper_id": "c", "title": "t", "abstract": ["the paper."]},
]


def _write(path: Path, records=RECORDS) -> Path:
    text = "".join(("" if r is None else json.dumps(r)) + "\n" for r in records)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _brute_lines(path: Path) -> dict[str, int]:
    """paper id (as the reader makes it) -> line number, read by hand."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return {str(json.loads(line)["paper_id"]): n for n, line in enumerate(f, start=1) if line.strip()}


@pytest.fixture(scope="module")
def titled_model(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model saved with include_title=True, so a command line loads it so."""
    out = tmp_path_factory.mktemp("titled") / "model"
    load_encoder(tiny_model_dir, include_title=True).save_pretrained(out)
    return out


def _check_accounting(path: Path, encoded_ids: list[str], rejected: list[dict]) -> None:
    """Every record of the file once, encoded or rejected; every rejected one names its (true) line and id."""
    lines = _brute_lines(path)
    assert all("line" in r for r in rejected), rejected
    assert {r["line"]: r["paper_id"] for r in rejected} == {lines[r["paper_id"]]: r["paper_id"] for r in rejected}
    assert sorted(encoded_ids + [r["paper_id"] for r in rejected]) == sorted(lines)
    assert not set(encoded_ids) & {r["paper_id"] for r in rejected}
    assert encoded_ids == sorted(encoded_ids, key=lines.__getitem__)  # input order


def test_aspire_encode_rejected_records_name_their_line(tmp_path, titled_model):
    from aspire.cli.encode import main as encode_main

    corpus = _write(tmp_path / "papers.jsonl")
    assert encode_main(["--model", str(titled_model), "--corpus", str(corpus), "--out", str(tmp_path / "v"), "-q"]) == 0
    rejected = [json.loads(x) for x in (tmp_path / "v" / "rejected.jsonl").read_text().splitlines()]
    saved, _ = EncodedCorpus.load_shard(tmp_path / "v")
    assert saved.paper_ids == ["a", "7", "c"]
    by_id = {r["paper_id"]: r for r in rejected}
    assert by_id["blank1"]["line"] == 3 and by_id["blank2"]["line"] == 6 and "word piece" in by_id["blank1"]["reason"]
    _check_accounting(corpus, saved.paper_ids, rejected)


def test_aspire_index_build_rejected_records_name_their_line(tmp_path, titled_model):
    corpus = _write(tmp_path / "papers.jsonl.gz")
    out = tmp_path / "idx"
    assert index_main(["build", "--model", str(titled_model), "--corpus", str(corpus), "--out", str(out),
                       "index.kind=flat", "--quiet"]) == 0
    index = SentenceIndex.load(out)
    assert {r["paper_id"]: r["line"] for r in index.rejected} == {"bad": 2, "blank1": 3, "blank2": 6}
    _check_accounting(corpus, list(index.paper_ids), index.rejected)


def test_aspire_index_encode_shard_rejected_records_name_their_line(tmp_path, titled_model):
    corpus, shards = _write(tmp_path / "papers.jsonl"), tmp_path / "shards"
    assert index_main(["encode-shard", "--model", str(titled_model), "--corpus", str(corpus), "--shards", str(shards),
                       "--num-shards", "2", "--quiet"]) == 0
    parts = [EncodedCorpus.load_shard(d)[0] for d in sorted(shards.iterdir())]
    rejected = [r for p in parts for r in p.rejected]
    assert {r["paper_id"]: r["line"] for r in rejected} == {"bad": 2, "blank1": 3, "blank2": 6}
    _check_accounting(corpus, [pid for p in parts for pid in p.paper_ids], rejected)


class _Stub:
    """An encoder whose tokenizer 'sees' nothing in a sentence holding '#', and that gives a paper whose first
    sentence holds '%' no sentence vector."""

    dim = 3

    def unseen_sentences(self, papers, batch_size=32):
        return [[i for i, s in enumerate(p.sentences) if "#" in s] for p in papers]

    def encode(self, papers, batch_size=32, progress=False):
        kept = [[] if "%" in p.sentences[0] else p.sentences for p in papers]
        return DocBatch.from_list([torch.ones(len(s), 3) for s in kept], [p.paper_id for p in papers], kept)


def test_encode_corpus_rejects_in_input_order_and_names_lines_given():
    papers = [Paper("p0", "t", ["a#."]), Paper("p1", "t", ["%b."]), Paper("p2", "t", ["c."]),
              Paper("p0", "t", ["d."]), Paper("p4", "t", ["e\u200b\u200b"]), Paper("p5", "t", ["\u200b"]),
              Paper("p6", "t", ["f#"])]
    corpus = encode_corpus(_Stub(), papers, EncodeConfig(chunk_papers=2), progress=False, lines=range(10, 17))
    assert corpus.paper_ids == ["p2", "p4"]
    assert [(r["line"], r["paper_id"]) for r in corpus.rejected] == [(10, "p0"), (11, "p1"), (13, "p0"), (15, "p5"),
                                                                     (16, "p6")]
    assert list(corpus.rejected[0]) == ["line", "paper_id", "reason"]  # as read_corpus's records
    with pytest.raises(ValueError, match="3 input lines for 7 papers"):
        encode_corpus(_Stub(), papers, progress=False, lines=[1, 2, 3])


def test_encode_corpus_rejected_records_come_in_input_order():
    """The reader's early verdicts (a repeated id, invisible text) came before every tokenizer or encoder verdict."""
    papers = [Paper("p0", "t", ["a#."]), Paper("p1", "t", ["%b."]), Paper("p2", "t", ["c."]), Paper("p0", "t", ["d."]),
              Paper("p4", "t", ["\u200b"])]
    corpus = encode_corpus(_Stub(), papers, progress=False)
    assert [r["paper_id"] for r in corpus.rejected] == ["p0", "p1", "p0", "p4"]
    assert [r["reason"].split(" ")[0] for r in corpus.rejected] == ["sentence(s)", "encoder", "duplicate", "sentence"]


def test_read_corpus_papers_keep_their_lines_when_sliced(tmp_path):
    from aspire.index.corpus import CorpusPapers

    corpus = _write(tmp_path / "papers.jsonl")
    papers, _ = read_corpus(corpus)
    lines = _brute_lines(corpus)
    assert isinstance(papers, CorpusPapers) and papers.lines == [lines[p.paper_id] for p in papers] == [1, 3, 5, 6, 7]
    assert papers[1:4].lines == [3, 5, 6] and isinstance(papers[1:4], CorpusPapers)  # as encode_shard slices
    assert papers[0].paper_id == "a"
    encoded = encode_corpus(_Stub(), papers[3:], progress=False)  # nothing the stub rejects: names lines of the file
    assert encoded.paper_ids == ["blank2", "c"]
    more = encode_corpus(_Stub(), CorpusPapers([Paper("x", "t", ["#"])], [42]), progress=False)
    assert more.rejected == [{"line": 42, "paper_id": "x", "reason": more.rejected[0]["reason"]}]


def test_ids_are_compared_as_strings():
    """An integer 7 and the paper "7" were two papers (a shard that then did not load); skip_ids=[7] skipped no "7"."""
    corpus = encode_corpus(_Stub(), [Paper(7, "t", ["a."]), Paper("7", "t", ["b."])], progress=False)
    assert corpus.paper_ids == ["7"]
    assert corpus.rejected == [{"paper_id": 7, "reason": "paper_id must be a string, got int"}]
    with pytest.raises(TypeError, match="skip_ids holds int 7"):
        encode_corpus(_Stub(), [Paper("7", "t", ["a."])], skip_ids=[7], progress=False)
    skipped = encode_corpus(_Stub(), [Paper("7", "t", ["a."]), Paper("8", "t", ["b."])], skip_ids={"7": 0},
                            progress=False)
    assert skipped.paper_ids == ["8"] and skipped.rejected[0]["reason"] == "duplicate paper_id (already indexed)"


def test_ids_the_reader_refuses_are_rejected_not_encoded(tmp_path):
    """An id `read_papers` refuses (blank, holding whitespace) was encoded from Papers given directly."""
    papers = [Paper("", "t", ["a."]), Paper("a b", "t", ["b."]), Paper("ok", "t", ["c."])]
    corpus = encode_corpus(_Stub(), papers, progress=False)
    assert corpus.paper_ids == ["ok"]
    assert [r["paper_id"] for r in corpus.rejected] == ["", "a b"]
    assert "empty" in corpus.rejected[0]["reason"] and "whitespace" in corpus.rejected[1]["reason"]
    corpus.save_shard(tmp_path / "s", {"model_name": "m", "model_fingerprint": "f"})
    assert EncodedCorpus.load_shard(tmp_path / "s")[0].paper_ids == ["ok"]


@pytest.mark.parametrize("name", ["papers.jsonl.gz", "papers.txt", "papers"])
def test_gzip_and_plain_variants_read_as_the_jsonl(tmp_path, name):
    """The same records under another name read the same (papers and rejections did before the fix; `lines` is new)."""
    base = read_corpus(_write(tmp_path / "papers.jsonl"))
    other = read_corpus(_write(tmp_path / name))
    assert other[0] == base[0] and other[0].lines == base[0].lines and other[1] == base[1]
    assert [r["line"] for r in base[1]] == [2]
