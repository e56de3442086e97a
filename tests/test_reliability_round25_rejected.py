"""Round 25, rejected records and gzip input around corpus reading.

1. `rejected.jsonl` was not in input-line order: `aspire encode`, `build_index`, `add_to_index` and shard 0 of
   `encode_shard` wrote the reader's rejections (`read_corpus`) first and the encoding's (`encode_corpus`) after
   them, so a paper rejected while encoding on line 2 came after a bad record on line 5. Now one list in line order
   (`aspire.index.corpus.in_line_order`), checked against a brute-force read of the same file.
2. A gzip file whose name does not end in `.gz` was read as plain bytes: one rejected record "not valid UTF-8: byte
   0x8b at column 2" and no paper. The name decides how a papers file is read (`write_papers` writes by it, and a
   `.gz` file that is not gzip is refused), so a mismatch the other way is now refused too, with a `DataError`
   saying it is gzip-compressed and how to name it.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from aspire.data.papers import jsonl_objects, read_papers
from aspire.encoders import load_encoder
from aspire.index import SentenceIndex
from aspire.index.__main__ import main as index_main
from aspire.index.build import add_to_index
from aspire.index.corpus import EncodedCorpus, read_corpus
from aspire.io import DataError

BLANK_TITLE = "\u200b"  # with include_title the tokenizer gives it no word piece: rejected while encoding
# Encoding rejections (lines 2, 4) before and between the reader's (lines 3, 5): the old order was 3, 5, 2, 4.
LINES = [
    json.dumps({"paper_id": "a", "title": "t", "abstract": ["the model."]}),
    json.dumps({"paper_id": "blank1", "title": BLANK_TITLE, "abstract": ["the text."]}),
    json.dumps({"paper_id": "bad", "title": "x", "abstract": "   "}),
    json.dumps({"paper_id": "blank2", "title": BLANK_TITLE, "abstract": ["a data."]}),
    '{"paper_id": "broken", ',
    "",
    json.dumps({"paper_id": "c", "title": "t", "abstract": ["the paper."]}),
    json.dumps({"paper_id": "blank3", "title": BLANK_TITLE, "abstract": ["a paper."]}),
]


def _write(path: Path, lines=LINES) -> Path:
    text = "".join(line + "\n" for line in lines)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _brute_rejected(path: Path, encoded_ids: list[str]) -> list[tuple[int, str | None]]:
    """(line, paper id or None) of every non-blank line of the file not among `encoded_ids`, in file order, read by
    hand (an id is None where the line is no JSON object)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    out = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                obj = None
            pid = str(obj["paper_id"]) if isinstance(obj, dict) else None
            if pid not in encoded_ids:
                out.append((n, pid))
    return out


def _read_rejected(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _pairs(rejected: list[dict]) -> list[tuple[int, str | None]]:
    return [(r["line"], r["paper_id"]) for r in rejected]


@pytest.fixture(scope="module")
def titled_model(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model saved with include_title=True, so a command line loads it so."""
    out = tmp_path_factory.mktemp("titled") / "model"
    load_encoder(tiny_model_dir, include_title=True).save_pretrained(out)
    return out


def test_in_line_order_against_a_brute_force_sort():
    from aspire.index.corpus import in_line_order

    rng = random.Random(0)
    for _ in range(200):
        records = [{"n": i, **({} if rng.random() < 0.2 else {"line": rng.randint(1, 6)})}
                   for i in range(rng.randint(0, 9))]
        expected = []
        for line in range(1, 7):  # by line, ties in the order given
            expected += [r for r in records if r.get("line") == line]
        expected += [r for r in records if "line" not in r]  # no line: after, in the order given
        assert in_line_order(records) == expected
    assert in_line_order([{"line": None, "n": 0}, {"line": 3, "n": 1}]) == [{"line": 3, "n": 1}, {"line": None, "n": 0}]


def test_aspire_encode_writes_rejected_in_line_order(tmp_path, titled_model):
    from aspire.cli.encode import main as encode_main

    corpus = _write(tmp_path / "papers.jsonl")
    assert encode_main(["--model", str(titled_model), "--corpus", str(corpus), "--out", str(tmp_path / "v"), "-q"]) == 0
    saved, _ = EncodedCorpus.load_shard(tmp_path / "v")
    assert saved.paper_ids == ["a", "c"]
    rejected = _read_rejected(tmp_path / "v" / "rejected.jsonl")
    assert _pairs(rejected) == _brute_rejected(corpus, saved.paper_ids)
    assert _pairs(rejected) == [(2, "blank1"), (3, "bad"), (4, "blank2"), (5, None), (8, "blank3")]


def test_aspire_index_build_writes_rejected_in_line_order(tmp_path, titled_model):
    corpus = _write(tmp_path / "papers.jsonl.gz")
    out = tmp_path / "idx"
    assert index_main(["build", "--model", str(titled_model), "--corpus", str(corpus), "--out", str(out),
                       "index.kind=flat", "--quiet"]) == 0
    generation = out / (out / "CURRENT").read_text().strip()
    rejected = _read_rejected(generation / "rejected.jsonl")
    ids = list(SentenceIndex.load(out).paper_ids)
    assert ids == ["a", "c"]
    assert _pairs(rejected) == _brute_rejected(corpus, ids)
    assert {r["corpus"] for r in rejected} == {str(corpus)}


def test_add_to_index_writes_the_added_corpus_rejected_in_line_order(tmp_path, titled_model):
    out = tmp_path / "idx"
    assert index_main(["build", "--model", str(titled_model), "--corpus", str(_write(tmp_path / "papers.jsonl")),
                       "--out", str(out), "index.kind=flat", "--quiet"]) == 0
    old = SentenceIndex.load(out)
    before, old_ids = len(old.rejected), set(old.paper_ids)
    more = _write(tmp_path / "more.jsonl", [
        json.dumps({"paper_id": "d", "title": "t", "abstract": ["a model."]}),
        json.dumps({"paper_id": "a", "title": "t", "abstract": ["the model."]}),  # indexed already: the encoding's
        "[1]",  # the reader's
        json.dumps({"paper_id": "blank4", "title": BLANK_TITLE, "abstract": ["the data."]}),
    ])
    index, generation, added, n_rejected = add_to_index(out, more, load_encoder=lambda name: load_encoder(name),
                                                        progress=False)
    assert (added, n_rejected) == (1, 3)
    new = _read_rejected(generation / "rejected.jsonl")[before:]
    added_ids = [p for p in index.paper_ids if p not in old_ids]
    assert added_ids == ["d"]
    assert [(r["line"], r["paper_id"], r["corpus"]) for r in new] == [(n, pid, str(more)) for n, pid in
                                                                      _brute_rejected(more, added_ids)]
    assert [(r["line"], r["paper_id"], r["corpus"]) for r in new] == [(2, "a", str(more)), (3, None, str(more)),
                                                                     (4, "blank4", str(more))]


def test_encode_shard_zero_writes_rejected_in_line_order(tmp_path, titled_model):
    corpus, shards = _write(tmp_path / "papers.jsonl"), tmp_path / "shards"
    assert index_main(["encode-shard", "--model", str(titled_model), "--corpus", str(corpus), "--shards", str(shards),
                       "--num-shards", "2", "--quiet"]) == 0
    first, second = sorted(shards.iterdir())
    papers, _ = read_corpus(corpus)
    assert [p.paper_id for p in papers[:2]] == ["a", "blank1"]  # shard 0 holds lines 1-2; the reader's go with it
    ids = [pid for d in (first, second) for pid in EncodedCorpus.load_shard(d)[0].paper_ids]
    zero = _read_rejected(first / "rejected.jsonl")
    assert _pairs(zero) == [pair for pair in _brute_rejected(corpus, ids) if pair[0] in (2, 3, 5)]
    assert _pairs(_read_rejected(second / "rejected.jsonl")) == [(4, "blank2"), (8, "blank3")]


# ---- 2. gzip input under a name without .gz ----
def test_a_gzip_file_without_gz_in_its_name_is_refused(tmp_path):
    plain = _write(tmp_path / "g.jsonl")
    zipped = tmp_path / "g.jsonl.gz"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    unsuffixed = tmp_path / "g2.jsonl"
    unsuffixed.write_bytes(zipped.read_bytes())

    base = read_papers(plain, skip_bad=True)
    via_gz = read_papers(zipped, skip_bad=True)
    assert [p.paper_id for p in base.papers] == [p.paper_id for p in via_gz.papers] == ["a", "blank1", "blank2", "c",
                                                                                         "blank3"]
    assert [(r.line, r.reason) for r in base.rejected] == [(r.line, r.reason) for r in via_gz.rejected]
    assert base.blank_lines == via_gz.blank_lines == [6]

    for read in (lambda p: read_papers(p, skip_bad=True), read_corpus, lambda p: list(jsonl_objects(p))):
        with pytest.raises(DataError, match=r"g2\.jsonl: the file is gzip-compressed.*rename it to g2\.jsonl\.gz"):
            read(unsuffixed)


def test_aspire_encode_refuses_a_gzip_file_without_gz(tmp_path, titled_model, capsys):
    from aspire.cli.encode import main as encode_main

    corpus = tmp_path / "g.jsonl"
    corpus.write_bytes(gzip.compress(("".join(line + "\n" for line in LINES)).encode("utf-8")))
    out = tmp_path / "v"
    assert encode_main(["--model", str(titled_model), "--corpus", str(corpus), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "gzip-compressed" in err and "g.jsonl.gz" in err and "0x8b" not in err
    assert not (out / "rejected.jsonl").exists()


def test_a_plain_file_starting_with_one_gzip_byte_is_read_as_plain(tmp_path):
    """Only both magic bytes make a file gzip: a plain file whose first line is bad is one rejected record."""
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\x1f{}\n" + (json.dumps({"paper_id": "a", "title": "t", "abstract": ["x."]}) + "\n").encode())
    result = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in result.papers] == ["a"] and [r.line for r in result.rejected] == [1]
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert read_papers(empty).n_lines == 0


def test_an_index_merged_from_shards_lists_rejected_in_line_order(tmp_path, titled_model):
    """Shard 0 holds every record the reader rejected (lines 3, 5) beside its own (2); shard 1 holds 4 and 8. The
    merge joined them shard by shard (2, 3, 5, 4, 8); `plan_shards` now sorts them by line."""
    corpus, shards, out = _write(tmp_path / "papers.jsonl"), tmp_path / "shards", tmp_path / "idx"
    assert index_main(["encode-shard", "--model", str(titled_model), "--corpus", str(corpus), "--shards", str(shards),
                       "--num-shards", "2", "--merge-into", str(out), "--quiet"]) == 0
    generation = out / (out / "CURRENT").read_text().strip()
    ids = list(SentenceIndex.load(out).paper_ids)
    assert _pairs(_read_rejected(generation / "rejected.jsonl")) == _brute_rejected(corpus, ids)
