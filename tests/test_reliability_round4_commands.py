"""The commands' hostile inputs (`aspire index build|add|merge|encode-shard`, `python -m aspire.demo`): a file
given where a folder is wanted is one error naming the option, before any model loads; a corpus with no readable
paper is refused by encode-shard as by build, before the model loads; an empty corpus is said to be empty;
`--quiet` hides encode-shard's progress bar."""

from __future__ import annotations

import json

import pytest
from test_index_shards import HashEncoder

from aspire import demo
from aspire.index.__main__ import main


def paper(pid: str, *sentences: str) -> dict:
    return {"paper_id": pid, "title": f"title {pid}", "abstract": list(sentences)}


PAPERS = [paper("p1", "we propose a new model", "results improve"), paper("p2", "the data of the task"),
          paper("p3", "a neural network for text", "we show results")]


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Every model load, by name; each gives a HashEncoder."""
    seen = []

    def load(name, device=None, **options):
        seen.append(name)
        return HashEncoder("hash")

    monkeypatch.setattr("aspire.encoders.load_encoder", load)
    return seen


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main([*argv, "--quiet"])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("command, option", [
    ("build", "--out"), ("merge", "--out"), ("merge", "--shards"), ("encode-shard", "--shards"),
    ("encode-shard", "--merge-into")])
def test_a_file_given_for_a_folder_is_one_error_naming_the_option(tmp_path, capsys, loads, tiny_model_dir,
                                                                   command, option):
    corpus = write_jsonl(tmp_path / "papers.jsonl", PAPERS)
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    folders = {"build": {"--out": tmp_path / "out"}, "merge": {"--shards": tmp_path, "--out": tmp_path / "out"},
               "encode-shard": {"--shards": tmp_path / "shards", "--merge-into": tmp_path / "index"}}[command]
    folders[option] = afile
    model = [] if command == "merge" else ["--model", str(tiny_model_dir), "--corpus", corpus]
    argv = [command, *model, *(str(x) for pair in folders.items() for x in pair)]
    status, _, err = run(capsys, *argv)
    assert (status, err) == (2, f"error: {option} {afile} is a file, not a folder\n")
    assert loads == []  # refused before any model loads (encode-shard once encoded the corpus first)


def test_an_out_folder_under_a_file_is_refused_naming_the_file(tmp_path, capsys, loads, tiny_model_dir):
    corpus = write_jsonl(tmp_path / "papers.jsonl", PAPERS)
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    status, _, err = run(capsys, "build", "--model", str(tiny_model_dir), "--corpus", corpus, "--out",
                         str(afile / "index"))
    assert (status, err) == (2, f"error: --out {afile / 'index'}: {afile} is a file, not a folder\n")
    assert loads == []


@pytest.mark.parametrize("records, says", [
    ([{"title": "no id"}, paper("a")], "nothing to index: all 2 records of {corpus} were rejected: line 1: missing"),
    ([], "nothing to index: {corpus} holds no records")])
def test_encode_shard_refuses_a_corpus_with_no_readable_paper_before_the_model_loads(tmp_path, capsys, loads,
                                                                                     tiny_model_dir, records, says):
    corpus = write_jsonl(tmp_path / "papers.jsonl", records)
    shards = tmp_path / "shards"
    status, out, err = run(capsys, "encode-shard", "--model", str(tiny_model_dir), "--corpus", corpus,
                           "--shards", str(shards))
    assert status == 2 and err.startswith("error: " + says.format(corpus=corpus)), err
    assert out == "" and loads == [] and not shards.exists()  # once: an empty shard, "wrote ...", status 0


def test_an_empty_corpus_is_said_to_hold_no_records(tmp_path, capsys, loads, tiny_model_dir):
    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    index = tmp_path / "index"
    status, _, err = run(capsys, "build", "--model", str(tiny_model_dir), "--corpus", empty, "--out", str(index))
    assert (status, err) == (2, f"error: nothing to index: {empty} holds no records\n")  # was "all 0 records ..."
    corpus = write_jsonl(tmp_path / "papers.jsonl", PAPERS)
    assert run(capsys, "build", "--model", str(tiny_model_dir), "--corpus", corpus, "--out", str(index))[0] == 0
    status, _, err = run(capsys, "add", "--index", str(index), "--corpus", empty)
    assert (status, err) == (2, f"error: nothing to add: {empty} holds no records\n")


def test_quiet_hides_encode_shards_progress_bar(tmp_path, capsys, loads, tiny_model_dir):
    corpus = write_jsonl(tmp_path / "papers.jsonl", PAPERS)
    encode = ["encode-shard", "--model", str(tiny_model_dir), "--corpus", corpus]
    status, out, err = run(capsys, *encode, "--shards", str(tmp_path / "quiet"))
    assert status == 0 and out.startswith("wrote") and "encoding papers" not in err
    assert main([*encode, "--shards", str(tmp_path / "loud")]) == 0
    assert "encoding papers" in capsys.readouterr().err  # the bar is there without --quiet


@pytest.mark.parametrize("option", ["--out", "--cache-dir"])
def test_demo_refuses_a_file_for_a_folder_before_encoding(tmp_path, capsys, option):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    folders = {"--out": str(tmp_path / "out"), "--cache-dir": str(tmp_path / "cache"), option: str(afile)}
    argv = ["--data", str(tmp_path), "--model", str(tmp_path / "no-model"), "--aspect-model", "none"]
    assert demo.main([*argv, *(x for pair in folders.items() for x in pair)]) == 2
    assert capsys.readouterr().err == f"error: {option} {afile} is a file, not a folder\n"


@pytest.mark.parametrize("option", ["--model", "--aspect-model"])
def test_demo_names_the_option_of_an_unknown_model(tmp_path, capsys, option):
    """`--aspect-model nomodel` said only "unknown model 'nomodel'": the demo takes two models."""
    models = {"--model": "minilm", "--aspect-model": "none", option: "nomodel"}
    argv = ["--data", str(tmp_path), "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    assert demo.main([*argv, *(x for pair in models.items() for x in pair)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {option}: unknown model 'nomodel'")
