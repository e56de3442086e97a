"""Every results.json names the command that made it (README "Formats"), as typed (`python -m aspire.evaluate`,
not the file runpy leaves in argv[0]); `aspire evaluate csfcube --ranked` loads the pool set once and reads each
ranked file once, its files unchanged (HEAD's bytes on the SPECTER sample pools)."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from aspire.benchmarks import pools, runs
from aspire.cli.evaluate import main
from aspire.paths import DATA
from tests.test_reliability_round18_tour import two_runs

REPO = Path(__file__).resolve().parents[1]
REV = DATA / "reviewer-matching"
SPECTER = {"background": (43.95, 66.70), "method": (22.44, 37.41), "result": (36.79, 56.67), "all": (34.23, 53.28)}


# ---- invocation(): the command as typed -------------------------------------------------------------------------

@pytest.mark.parametrize("argv, orig, want", [
    # `python -m aspire.evaluate`: its __main__ hands over to aspire.cli.evaluate, which runpy puts in argv[0]
    ([str(REPO / "aspire/cli/evaluate.py"), "context2doc", "--bm25"],
     ["/usr/bin/python3", "-m", "aspire.evaluate", "context2doc", "--bm25"], "python -m aspire.evaluate context2doc --bm25"),
    ([str(REPO / "aspire/cli/evaluate.py"), "fuse", "--exp", "a b"],
     ["python", "-X", "utf8", "-maspire.evaluate", "fuse", "--exp", "a b"], "python -m aspire.evaluate fuse --exp 'a b'"),
    # no `-m` for these arguments in orig_argv: the file's own dotted module
    ([str(REPO / "aspire/cli/evaluate.py"), "csfcube"], ["python", "-m", "pytest", "-q"],
     "python -m aspire.cli.evaluate csfcube"),
    ([str(REPO / "aspire/data/papers.py"), "check"], ["python", "aspire/data/papers.py", "check", "-m", "x"],
     "python -m aspire.data.papers check"),
    # unchanged: a package main of the repository, another package's main, the console script
    ([str(REPO / "aspire/__main__.py"), "evaluate", "pools"], ["python", "-m", "pytest"], "python -m aspire evaluate pools"),
    (["/venv/lib/site-packages/pytest/__main__.py", "-q"], ["python", "-m", "pytest", "-q"], "python -m pytest -q"),
    (["/venv/bin/aspire", "evaluate", "suite"], ["/venv/bin/python", "/venv/bin/aspire", "evaluate", "suite"],
     "/venv/bin/aspire evaluate suite"),
])
def test_invocation_is_the_command_as_typed(monkeypatch, argv, orig, want):
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig)
    assert runs.invocation() == want


def test_python_m_aspire_evaluate_records_itself_not_the_cli_file(tmp_path):
    """A real `python -m aspire.evaluate fuse-runs ...` (runpy, alter_sys=True): the command in results.json is
    what was typed; it was `/…/aspire/cli/evaluate.py fuse-runs …`, and fuse-runs recorded no command at all."""
    a, b = two_runs(tmp_path)
    args = ["fuse-runs", str(a), str(b), "--fusion", "rrf", "--out", str(tmp_path / "rrf"), "-q"]
    done = subprocess.run([sys.executable, "-m", "aspire.evaluate", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert results(tmp_path / "rrf")["command"] == shlex.join(["python", "-m", "aspire.evaluate", *args])


# ---- every writer of results.json records the command --------------------------------------------------------

def results(folder: Path) -> dict:
    def refuse(constant):
        raise ValueError(f"{folder}: {constant} is not strict JSON")

    return json.loads((folder / "results.json").read_text(encoding="utf-8"), parse_constant=refuse)


def typed(monkeypatch, args: list[str]) -> str:
    """Make `args` this process's `aspire evaluate ...` command line; returns it as results.json should record it."""
    argv = ["aspire", "evaluate", *args]
    monkeypatch.setattr(sys, "argv", argv)
    return shlex.join(argv)


def test_fuse_runs_records_its_command(tmp_path, monkeypatch):
    a, b = two_runs(tmp_path)
    command = typed(monkeypatch, ["fuse-runs", str(a), str(b), "--out", str(tmp_path / "z"), "-q"])
    assert main(sys.argv[2:]) == 0
    doc = results(tmp_path / "z")
    assert doc["command"] == command and doc["metrics"]  # scored too (the first folder's qrels)


POOLS = {"p1": {"cands": ["p1", "p2", "p3", "p4"], "relevance_adju": [3, 2, 0, 1]},  # p1 in its own pool
         "p6": {"cands": ["p2", "p3", "p7"], "relevance_adju": [0, 1, 2]}}
RANKED = {"p1": [["p4", 0.9], ["p2", 0.8], ["p3", 0.7]], "p6": [["p2", -1.0], ["p7", -2.0], ["p3", -3.0]]}


def test_pools_records_its_command_and_reads_each_ranked_file_once(tmp_path, monkeypatch):
    data = tmp_path / "toy"
    data.mkdir()
    (data / "test-pid2anns-toy.json").write_text(json.dumps(POOLS))
    (data / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(RANKED))
    reads = count_reads(monkeypatch)
    command = typed(monkeypatch, ["pools", "--data", str(data), "--name", "toy", "--ranked", str(data), "--exp",
                                  "manual", "--out", str(tmp_path / "o"), "-q"])
    assert main(sys.argv[2:]) == 0
    assert results(tmp_path / "o")["command"] == command
    assert reads["test-pid2pool-toy-manual-ranked.json"] == 1  # was 2: scored, then read again for run.trec
    # run.trec still carries the file's scores
    assert (tmp_path / "o" / "run.trec").read_text().splitlines()[:2] == ["p1 Q0 p4 1 0.9 manual",
                                                                         "p1 Q0 p2 2 0.8 manual"]


def small_ranked(root: Path, folder: Path, exp: str, seed: int) -> None:
    """Ranked files of experiment `exp` in `folder` for every facet of the CSFCube copy at `root` (similarities)."""
    import random

    from aspire.benchmarks.csfcube import load_csfcube

    rng = random.Random(seed)
    for facet, pool in load_csfcube(root).pools.items():
        ranked = {}
        for q, cands in pool.items():
            order = sorted(cands, key=lambda c: rng.random())
            ranked[q] = [(c, 1.0 - i / 10) for i, c in enumerate(order)]
        pools.write_ranked(pools.ranked_path(folder, "csfcube", exp, facet), ranked)


def test_csfcube_ranked_and_fuse_record_their_command(small_csfcube, tmp_path, monkeypatch):
    small_ranked(small_csfcube, tmp_path / "r", "a", 1)
    small_ranked(small_csfcube, tmp_path / "r", "b", 2)
    command = typed(monkeypatch, ["csfcube", "--data", str(small_csfcube), "--ranked", str(tmp_path / "r"), "--exp",
                                  "a", "--out", str(tmp_path / "ca"), "-q"])
    assert main(sys.argv[2:]) == 0
    assert results(tmp_path / "ca")["command"] == command
    command = typed(monkeypatch, ["fuse", "--data", str(small_csfcube), "--run", f"{tmp_path / 'r'}:a",
                                  "--run", f"{tmp_path / 'r'}:b", "--exp", "ab", "--out", str(tmp_path / "f"), "-q"])
    assert main(sys.argv[2:]) == 0
    doc = results(tmp_path / "f")
    assert doc["command"] == command and doc["fused_from"] == [f"{tmp_path / 'r'}:a", f"{tmp_path / 'r'}:b"]


@pytest.mark.skipif(not (REV / "predictions").is_dir(), reason=f"reviewer-matching predictions not found at {REV}")
def test_reviewer_predictions_record_their_command(tmp_path, monkeypatch):
    command = typed(monkeypatch, ["reviewers", "--predictions", f"{REV / 'predictions'}:specter", "--out",
                                  str(tmp_path / "rev")])
    assert main(sys.argv[2:]) == 0
    doc = results(tmp_path / "rev")
    assert doc["command"] == command and doc["experiment"] == "specter"


# ---- csfcube --ranked: the pool set loaded once, each ranked file read once, the files as HEAD wrote them --------

def count_reads(monkeypatch) -> Counter:
    """Counts each JSON file `aspire.benchmarks.pools` reads (annotations, splits, ranked files), by file name."""
    reads: Counter = Counter()
    real = pools.read_json

    def counted(path, what):
        reads[Path(path).name] += 1
        return real(path, what)

    monkeypatch.setattr(pools, "read_json", counted)
    return reads


# sha256 of the files HEAD (ae51eee) wrote for `aspire evaluate csfcube --ranked sample_ranked_pools --exp specter`;
# results.json's without the `command` it now ends with
HEAD_FILES = {
    "run.trec": "1a150faaedaf891aa8f696b44aee78487adb9ba20740d723a73d0af84591c40b",
    "qrels.trec": "80795ee413ef91c5d0ec4fe3784e63d57e67568792fb0664f2c3c6c7518599c6",
    "test-pid2pool-csfcube-specter-perq.csv": "2fd43ce7a7c28700726bd5292c49f0b60f202a24abbb33e4643b319ae04e0605",
    "results.json": "278c857bdbfe15e51c69dbda29a3c8f9c2092f97d15eadd311de642ce24e0095",
}


@pytest.mark.slow
def test_csfcube_ranked_loads_once_and_writes_heads_files(shared_data, tmp_path, monkeypatch):
    root, out = shared_data / "csfcube", tmp_path / "out"
    reads = count_reads(monkeypatch)
    command = typed(monkeypatch, ["csfcube", "--data", str(root), "--ranked", str(root / "sample_ranked_pools"),
                                  "--exp", "specter", "--out", str(out), "-q"])
    assert main(sys.argv[2:]) == 0
    # was 4 loads of the pool set (3 annotation files + the splits file each) and 3 reads of each ranked file
    facets = ("background", "method", "result")
    assert reads == Counter({"evaluation_splits.json": 1, **{f"test-pid2anns-csfcube-{f}.json": 1 for f in facets},
                             **{f"test-pid2pool-csfcube-specter-{f}-ranked.json": 1 for f in facets}})
    doc = results(out)
    for group, (map_, ndcg) in SPECTER.items():  # the data README's known answer
        assert doc["test"][group]["MAP"] == pytest.approx(map_, abs=0.005)
        assert doc["test"][group]["NDCG%20"] == pytest.approx(ndcg, abs=0.005)
    assert doc["command"] == command and list(doc)[-1] == "command"
    text = (out / "results.json").read_bytes()
    tail = (', "command": ' + json.dumps(command, ensure_ascii=False) + "}\n").encode()
    assert text.endswith(tail)
    written = {name: (out / name).read_bytes() for name in HEAD_FILES}
    written["results.json"] = text[:-len(tail)] + b"}\n"
    assert {name: hashlib.sha256(b).hexdigest() for name, b in written.items()} == HEAD_FILES
    # run.trec: the sample files' distances, negated (an independent read of the files)
    first = json.loads((root / "sample_ranked_pools" / "test-pid2pool-csfcube-specter-background-ranked.json")
                       .read_text())
    qid, ranked = next(iter(first.items()))
    lines = [line.split() for line in (out / "run.trec").read_text().splitlines() if line.startswith(f"{qid}_background ")]
    assert [(d, float(s)) for _, _, d, _, s, _ in lines] == [(c, -s) for c, s in ranked if c != qid]
