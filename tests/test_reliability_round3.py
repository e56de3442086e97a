"""Reliability, round three (issue 47): a corrupted cache (item 2), a broken YAML config (item 3) and output
closed early (item 5). A full disk (item 1) and two runs in one folder (item 4) have their own files,
tests/test_reliability_round3_disk.py and tests/test_reliability_round3_lock.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aspire.batch import DocBatch
from aspire.config import ConfigError, load_config, read_yaml
from aspire.data.papers import Paper
from aspire.index import IndexBuildConfig
from aspire.storage import check_record, record_path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}


# =========================================================================================== item 2: caches
PAPERS = [Paper("a", "t", ["x", "y"]), Paper("b", "t", ["z"])]


def _encoder(calls: list):
    def encode(ps):
        calls.append(len(ps))
        return DocBatch.from_list([torch.full((len(p.sentences), 3), float(i + 1)) for i, p in enumerate(ps)],
                                  [p.paper_id for p in ps], [p.sentences for p in ps])
    return encode


def _flip(path: Path, where: float) -> None:
    data = bytearray(path.read_bytes())
    data[int(where * len(data))] ^= 0x5A  # one byte changed, size kept
    path.write_bytes(bytes(data))


DAMAGE = {
    "one byte flipped": lambda path: _flip(path, 0.6),
    "a byte of the header flipped": lambda path: _flip(path, 0.0),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "emptied": lambda path: path.write_bytes(b""),
    "no record (an older aspire)": lambda path: record_path(path).unlink(missing_ok=True),
    "record unreadable": lambda path: record_path(path).write_text("{half"),
    "garbage written with its record": lambda path: (path.write_bytes(b"PK\x03\x04 not a torch file"),
                                                     _record_again(path)),
}


def _record_again(path: Path) -> None:
    from aspire.storage import write_record

    write_record(path)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_vector_cache_is_reported_once_and_rebuilt(tmp_path, caplog, damage):
    from aspire.evaluate.cache import cache_path, cached_encode

    calls: list = []
    first, hit = cached_encode(_encoder(calls), PAPERS, "fp", "contextual", {}, tmp_path)
    path = cache_path(tmp_path, "fp", "contextual", {}, PAPERS)
    assert hit is False and path.is_file()
    DAMAGE[damage](path)
    with caplog.at_level(logging.WARNING, logger="aspire"):
        again, hit = cached_encode(_encoder(calls), PAPERS, "fp", "contextual", {}, tmp_path)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert hit is False and calls == [2, 2]  # encoded again, never read from the damaged file
    assert len(warnings) == 1 and str(path) in warnings[0] and "encoding again" in warnings[0], warnings
    assert torch.equal(again.emb, first.emb) and again.sentences == first.sentences
    caplog.clear()
    third, hit = cached_encode(_encoder(calls), PAPERS, "fp", "contextual", {}, tmp_path)  # rewritten: a hit
    assert hit is True and calls == [2, 2] and torch.equal(third.emb, first.emb)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert check_record(path) is None  # rewritten with its size and checksum


def test_an_evaluation_over_a_corrupted_vector_cache_warns_and_finishes(tmp_path, tiny_model_dir, capsys):
    from aspire.cli import main as aspire_main

    data = tmp_path / "toy"
    data.mkdir()
    papers = {"q": ["we propose a model."], "a": ["the data."], "b": ["results improve."], "c": ["a method."]}
    (data / "abstracts-toy.jsonl").write_text("".join(
        json.dumps({"paper_id": p, "title": f"title {p}", "abstract": s}) + "\n" for p, s in papers.items()))
    (data / "test-pid2anns-toy.json").write_text(json.dumps({"q": {"cands": ["a", "b", "c"], "relevance_adju": [2, 0, 1]}}))
    cache = tmp_path / "cache"
    argv = ["evaluate", "pools", "--data", str(data), "--name", "toy", "--model", str(tiny_model_dir),
            "--scorer", "minl2", "--cache-dir", str(cache), "--quiet"]
    assert aspire_main([*argv, "--out", str(tmp_path / "o1")]) == 0
    files = sorted(p for p in cache.glob("*.pt"))
    assert files
    for path in files:
        _flip(path, 0.5)
    capsys.readouterr()
    assert aspire_main([*argv, "--out", str(tmp_path / "o2")]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if "is not used" in line]) == len(files), err
    first = json.loads(next((tmp_path / "o1").rglob("*results*.json")).read_text())
    second = json.loads(next((tmp_path / "o2").rglob("*results*.json")).read_text())
    assert first["summary"] == second["summary"]
    assert all(check_record(p) is None for p in files)  # rewritten, with their records


def test_a_damaged_onnx_export_is_reported_once_and_exported_again(tmp_path, tiny_model_dir, monkeypatch, caplog):
    pytest.importorskip("onnxruntime")
    from aspire.encoders import backends

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    papers = [Paper("a", "t", ["the model of text.", "results improve."])]
    exact = backends.load_encoder(str(tiny_model_dir)).encode(papers).emb
    first = backends.load_encoder(str(tiny_model_dir), backend="onnx")
    (path,) = (tmp_path / "cache" / "onnx").glob("*.onnx")
    for damage in ("one byte flipped", "truncated", "no record (an older aspire)"):
        DAMAGE[damage](path)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="aspire"):
            again = backends.load_encoder(str(tiny_model_dir), backend="onnx")
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and str(path) in warnings[0] and "exporting it again" in warnings[0], warnings
        assert again.fingerprint() == first.fingerprint(), damage  # the same graph, exported again
        assert torch.allclose(again.encode(papers).emb, exact, atol=1e-4), damage
        assert check_record(path) is None  # rewritten with a new record


def test_a_corrupted_bm25_file_of_an_index_stays_an_error_naming_it(tmp_path, tiny_model_dir, capsys):
    from aspire.cli import main as aspire_main

    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "a model", "abstract": [f"results {i} improve."]})
                              + "\n" for i in range(4)))
    root = tmp_path / "idx"
    assert aspire_main(["index", "build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(root),
                        "--quiet"]) == 0
    (gen,) = root.glob("gen-*")
    _flip(gen / "bm25.data.npy", 0.9)
    capsys.readouterr()
    assert aspire_main(["search", "--index", str(root), "--query-id", "p1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bm25.data.npy is corrupted" in err and "Traceback" not in err


# =========================================================================================== item 3: YAML
def test_a_yaml_syntax_error_names_file_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  lr: [1, 2\n  seed: 3\n")
    with pytest.raises(ConfigError, match=rf"^{path}:3:7: .*expected ',' or ']'") as caught:
        read_yaml(path)
    assert "\n" not in str(caught.value)
    path.write_text("encode:\n  batch_size: 4\n\tmax_sentences: 3\n")  # a tab
    with pytest.raises(ConfigError, match=rf"^{path}:3:1: .*cannot start any token"):
        read_yaml(path)


@pytest.mark.parametrize("text,line,column,key,first", [
    ("train:\n  lr: 1\n  lr: 2\n", 3, 3, "lr", "line 2, column 3"),
    ("train:\n  lr: 1\nmodel: {}\ntrain:\n  seed: 2\n", 4, 1, "train", "line 1, column 1"),
    ("index: {kind: flat, kind: hnsw}\n", 1, 21, "kind", "line 1, column 9"),
])
def test_a_key_given_twice_is_an_error(tmp_path, text, line, column, key, first):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{path}:{line}:{column}: key '{key}' is given twice \(first at {first}\)"):
        read_yaml(path)


def test_a_duplicate_in_a_base_file_names_the_base(tmp_path):
    (tmp_path / "base.yaml").write_text("index:\n  kind: flat\n  kind: hnsw\n")
    (tmp_path / "child.yaml").write_text("base: base.yaml\nindex:\n  kind: ivf\n")  # overriding a base key is fine
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'base.yaml'}:3:3: key 'kind' is given twice"):
        load_config(IndexBuildConfig, tmp_path / "child.yaml")
    (tmp_path / "base.yaml").write_text("index:\n  kind: flat\n")
    assert load_config(IndexBuildConfig, tmp_path / "child.yaml").index.kind == "ivf"
    with pytest.raises(ConfigError, match=r"override 'index.kind=\{a: 1, a: 2\}':1:8: key 'a' is given twice"):
        load_config(IndexBuildConfig, tmp_path / "child.yaml", ["index.kind={a: 1, a: 2}"])


SIMPLE = st.one_of(st.integers(-100, 100), st.booleans(), st.text("abcxyz", min_size=1, max_size=5))
KEYS = st.text("abcdefgh_", min_size=1, max_size=6).filter(lambda k: k not in ("y", "n") and not k.startswith("_"))
TREES = st.recursive(st.dictionaries(KEYS, SIMPLE, min_size=1, max_size=4),
                     lambda inner: st.dictionaries(KEYS, inner, min_size=1, max_size=3), max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREES, pick=st.integers(0, 10_000))
def test_property_any_repeated_key_line_is_refused_naming_its_line(tmp_path_factory, tree, pick):
    lines = yaml.safe_dump(tree, default_flow_style=False, sort_keys=False).splitlines()
    keyed = [i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("- ")]
    i = keyed[pick % len(keyed)]
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text("\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :]) + "\n")  # line i given twice
    column = len(lines[i]) - len(lines[i].lstrip()) + 1
    with pytest.raises(ConfigError, match=rf"^{path}:{i + 2}:{column}: key .* is given twice \(first at line {i + 1},"):
        read_yaml(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREES, pick=st.integers(0, 10_000), junk=st.sampled_from(["[", "{a: 1", "]", "- x", "\tk: 1", "k: 'open",
                                                                      ": :", "&", "*nowhere", "k: v: w", "@"]))
def test_property_broken_yaml_is_one_config_error_line(tmp_path_factory, tree, pick, junk):
    lines = yaml.safe_dump(tree, default_flow_style=False, sort_keys=False).splitlines()
    i = pick % (len(lines) + 1)
    indent = " " * (len(lines[i]) - len(lines[i].lstrip())) if i < len(lines) else ""
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    text = "\n".join(lines[:i] + [indent + junk] + lines[i:]) + "\n"
    path.write_text(text)
    try:
        yaml.safe_load(text)
    except yaml.YAMLError:
        with pytest.raises(ConfigError, match=rf"^{path}:\d+:\d+: ") as caught:
            read_yaml(path)
        assert "\n" not in str(caught.value)
    else:  # still YAML (e.g. a key that happens to be new): then it reads, or a repeated key is named
        try:
            read_yaml(path)
        except ConfigError as err:
            assert "is given twice" in str(err) or "top level must be a mapping" in str(err)


def test_cli_reports_a_broken_config_in_one_error_line(tmp_path, capsys):
    from aspire.cli import main as aspire_main

    config = tmp_path / "index.yaml"
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "a", "title": "t", "abstract": ["x."]}) + "\n")
    for text, where in (("index:\n  kind: flat\n  kind: hnsw\n", ":3:3: key 'kind' is given twice"),
                        ("index:\n  kind: [flat\n", ":3:1: ")):
        config.write_text(text)
        capsys.readouterr()
        assert aspire_main(["index", "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(tmp_path / "i"),
                            "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {config}{where}") and len(err.strip().splitlines()) == 1, err
    train = tmp_path / "train.yaml"
    train.write_text("train:\n  lr: 0.1\n  lr: 0.2\n")
    with pytest.raises(SystemExit) as caught:
        aspire_main(["train", "--config", str(train)])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {train}:3:3: key 'lr' is given twice (first at line 2, column 3)" in err and "Traceback" not in err


# =========================================================================================== item 5: pipes
@pytest.fixture(scope="module")
def small_index(tmp_path_factory, tiny_model_dir) -> Path:
    from aspire.cli import main as aspire_main

    root = tmp_path_factory.mktemp("pipe")
    corpus = root / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "a model of text",
                                          "abstract": ["we propose a new method.", f"results {i} improve."]}) + "\n"
                              for i in range(30)))
    assert aspire_main(["index", "build", "--model", str(tiny_model_dir), "--corpus", str(corpus),
                        "--out", str(root / "idx"), "--quiet"]) == 0
    return root / "idx"


def _run_into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess:
    """Run `python -m aspire ARGV` with stdout a pipe whose reader is already gone (`... | head` after head
    exits), stderr captured."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "aspire", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              env=ENV, text=True, timeout=300)
    finally:
        os.close(write_end)


def test_search_into_a_closed_pipe_exits_quietly(small_index, tmp_path):
    queries = tmp_path / "queries.txt"
    queries.write_text("".join(f"p{i}\n" for i in range(30)))
    for argv in (["search", "--index", str(small_index), "--query-id", "p1", "--k", "20"],
                 ["search", "--index", str(small_index), "--queries", str(queries), "--k", "20", "--json"]):
        proc = _run_into_closed_pipe([*argv, "--quiet"])
        assert proc.stderr == "", proc.stderr  # no "error: [Errno 32] Broken pipe", no "Exception ignored"
        assert proc.returncode == 141  # 128 + SIGPIPE, as a shell reports a Unix tool whose reader went away


def test_search_piped_into_head_prints_its_first_lines_and_no_error(small_index, tmp_path):
    queries = tmp_path / "queries.txt"
    queries.write_text("".join(f"p{i % 30}\n" for i in range(600)))  # more output than a pipe buffer holds
    cmd = (f"set -o pipefail; {sys.executable} -m aspire search --index {small_index} --queries {queries} "
           "--k 20 --json --quiet | head -n 2")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=ENV, timeout=300)
    assert len(proc.stdout.splitlines()) == 2 and json.loads(proc.stdout.splitlines()[0])["query_id"] == "p0"
    assert proc.stderr == "" and proc.returncode == 141, (proc.returncode, proc.stderr)


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error():
    code = ("import sys\nfrom aspire.cliutil import run_command\n"
            "def run():\n    raise BrokenPipeError(32, 'Broken pipe')\n"
            "sys.exit(run_command(run))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 2 and proc.stderr == "error: [Errno 32] Broken pipe\n", (proc.returncode, proc.stderr)
