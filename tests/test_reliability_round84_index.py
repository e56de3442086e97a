"""`aspire index` add, merge and the papers reader: what a user meets running them.

- `index add --help` said --batch-size defaults to "the config's encode.batch_size, 32", as build's help says; an add
  encodes with the batch size the index records (64 for an index built with configs/index-large.yaml). Each command's
  help names its own default now.
- `index merge --overwrite` (and `encode-shard --merge-into --overwrite`) over an index whose CURRENT is a folder
  failed once the new generation was renamed into place, leaving it behind; it replaces the index now, as
  `build --overwrite` does.
- A papers record whose id holds whitespace was rejected with `paper_id` null (rejected.jsonl, `papers check`), the id
  named in the reason alone; the id is recorded as given now, as every other rejected record's is.
"""

from __future__ import annotations

import json

import pytest

from aspire.data.papers import read_papers
from aspire.index.__main__ import main
from aspire.index.disk import require_live_generation
from aspire.index.store import SentenceIndex
from tests.test_reliability_round83_index import CountingEncoder, loaded_encoders, run, write_corpus, write_shards


class BatchRecordingEncoder(CountingEncoder):
    """`CountingEncoder` that records the batch size of each `encode` call."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_sizes: list[int] = []

    def encode(self, papers, batch_size=32, progress=False):
        self.batch_sizes.append(batch_size)
        return super().encode(papers, batch_size, progress)


@pytest.fixture
def recording(monkeypatch) -> list[BatchRecordingEncoder]:
    return loaded_encoders(monkeypatch, BatchRecordingEncoder)


def help_text(capsys, command: str) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


def batch_size_help(capsys, command: str) -> str:
    text = help_text(capsys, command)
    start = text.index("--batch-size BATCH_SIZE papers encoded")
    return text[start : text.index(" -q, --quiet", start)]


# ---- 1. each command's --batch-size help says its own default ---------------------------------------------------

def test_add_batch_size_help_names_the_index_s_batch_size_which_add_encodes_with(tmp_path, capsys, recording):
    said = batch_size_help(capsys, "add")
    assert "the batch size the index records" in said and "32" not in said, said
    corpus, out = write_corpus(tmp_path / "papers.jsonl"), tmp_path / "idx"
    config = tmp_path / "large.yaml"
    config.write_text("encode:\n  batch_size: 64\nindex:\n  kind: flat\n")  # configs/index-large.yaml's batch size
    assert run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(out),
               "--config", str(config))[0] == 0
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"paper_id": "new", "title": "t", "abstract": ["a new paper."]}) + "\n")
    assert run(capsys, "add", "--index", str(out), "--corpus", str(more))[0] == 0
    assert run(capsys, "add", "--index", str(out), "--corpus", str(write_corpus(tmp_path / "m.jsonl", 8)),
               "--batch-size", "3")[0] == 0
    more.write_text(json.dumps({"paper_id": "newer", "title": "t", "abstract": ["another paper."]}) + "\n")
    assert run(capsys, "add", "--index", str(out), "--corpus", str(more))[0] == 0
    # the build's 64, the add's default the index's 64, a --batch-size 3 for its run only, then 64 again
    assert [set(e.batch_sizes) for e in recording] == [{64}, {64}, {3}, {64}]


@pytest.mark.parametrize("command", ["build", "encode-shard"])
def test_build_and_encode_shard_batch_size_help_names_the_config_s(capsys, command):
    said = batch_size_help(capsys, command)
    assert "encode.batch_size of --config" in said and "else 32" in said, said


# ---- 2. merge --overwrite replaces an index whose CURRENT is a folder, as build --overwrite does ---------------

def test_merge_overwrite_replaces_an_index_whose_current_is_a_folder(tmp_path, capsys):
    shards, out = write_shards(tmp_path), tmp_path / "idx"
    assert run(capsys, "merge", "--shards", str(shards), "--out", str(out))[0] == 0
    (out / "CURRENT").unlink()
    (out / "CURRENT").mkdir()
    (out / "CURRENT" / "note.txt").write_text("a folder in the pointer's place")
    status, err = run(capsys, "merge", "--shards", str(shards), "--out", str(out))
    assert status == 2 and "CURRENT is a folder" in err and "--overwrite" in err, err  # refused unasked, as before
    status, err = run(capsys, "merge", "--shards", str(shards), "--out", str(out), "--overwrite")
    assert status == 0, err
    live = require_live_generation(out)
    assert sorted(p.name for p in out.iterdir()) == [".lock", "CURRENT", live]  # no generation left behind
    assert SentenceIndex.load(out, verify=True).paper_ids == ["a", "b"]


def test_a_merge_refused_for_its_shards_leaves_a_damaged_index_as_it_was(tmp_path, capsys):
    shards, out = write_shards(tmp_path), tmp_path / "idx"
    assert run(capsys, "merge", "--shards", str(shards), "--out", str(out))[0] == 0
    (out / "CURRENT").unlink()
    (out / "CURRENT").mkdir()
    (shards / "shard-00000-of-00001" / "offsets.npy").write_bytes(b"not an array")
    before = sorted(p.name for p in out.iterdir())
    status, err = run(capsys, "merge", "--shards", str(shards), "--out", str(out), "--overwrite")
    assert status == 2 and "offsets.npy does not read as an array" in err, err
    assert sorted(p.name for p in out.iterdir()) == before and (out / "CURRENT").is_dir()


def test_encode_shard_merge_into_overwrite_replaces_an_index_whose_current_is_a_folder(tmp_path, capsys, recording):
    corpus, out = write_corpus(tmp_path / "papers.jsonl"), tmp_path / "idx"
    (out / "CURRENT").mkdir(parents=True)
    status, err = run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards",
                      str(tmp_path / "shards"), "--merge-into", str(out), "--overwrite", "index.kind=flat")
    assert status == 0, err
    assert sorted(p.name for p in out.iterdir()) == [".lock", "CURRENT", require_live_generation(out)]
    assert SentenceIndex.load(out).n_papers == 6


# ---- 3. a rejected id holding whitespace is recorded as given ---------------------------------------------------

def test_an_id_holding_whitespace_is_recorded_with_its_rejection(tmp_path, capsys, recording):
    corpus = write_corpus(tmp_path / "papers.jsonl", 2)
    corpus.write_bytes(corpus.read_bytes() + json.dumps({"paper_id": "a b", "title": "t", "abstract": ["x."]}).encode()
                       + b'\n{"paper_id": "c\\td", "title": "caf\xe9", "abstract": ["y."]}\n')  # Latin-1: no UTF-8
    result = read_papers(corpus, skip_bad=True)
    assert [(r.line, r.paper_id) for r in result.rejected] == [(3, "a b"), (4, "c\td")]
    assert str(result.rejected[0]) == f"{corpus}:3 (paper_id 'a b'): paper_id 'a b' holds whitespace, which TREC " \
                                      "runs and query lines cannot hold"
    out = tmp_path / "idx"
    assert run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(out), "index.kind=flat")[0] == 0
    gen = out / require_live_generation(out)
    rejected = [json.loads(line) for line in (gen / "rejected.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["line"], r["paper_id"], r["corpus"]) for r in rejected] == [(3, "a b", str(corpus)),
                                                                           (4, "c\td", str(corpus))]
    index = SentenceIndex.load(out, verify=True)  # the readers of rejected.jsonl: load, info, a later add's save
    assert index.rejected == rejected and index.paper_ids == ["p0", "p1"]
    assert main(["info", "--index", str(out), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["n_rejected"] == 2
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"paper_id": "e f", "title": "t", "abstract": ["z."]}) + "\n"
                    + json.dumps({"paper_id": "g", "title": "t", "abstract": ["w."]}) + "\n", encoding="utf-8")
    assert run(capsys, "add", "--index", str(out), "--corpus", str(more))[0] == 0
    assert [r["paper_id"] for r in SentenceIndex.load(out, verify=True).rejected] == ["a b", "c\td", "e f"]


def test_a_corpus_of_ids_holding_whitespace_is_refused_naming_each(tmp_path, capsys, recording):
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "a b", "title": "t", "abstract": ["x."]}) + "\n", encoding="utf-8")
    status, err = run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "idx"))
    assert status == 2 and "line 1 paper 'a b': paper_id 'a b' holds whitespace" in err, err
    assert recording == []  # refused before the model loads


def test_a_blank_id_still_records_no_id(tmp_path):
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "  ", "title": "t", "abstract": ["x."]}) + "\n", encoding="utf-8")
    assert [(r.paper_id, r.reason) for r in read_papers(corpus, skip_bad=True).rejected] == [(None, "paper_id is empty")]
