"""Round 44, `aspire encode` and `python -m aspire.demo`: a correctness sweep.

Checked against the encoder's own `encode()` of the same papers (rows paper after paper, offsets, whole vectors
of the same pass), records refused naming line and key, an --out folder of something else left as it is, the
demo's bad options refused (status 2) before any model loads, and `--help` without torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aspire import demo
from aspire.cli.encode import main as encode_main
from aspire.encoders import load_encoder

REPO = Path(__file__).resolve().parents[1]

GOOD = [
    {"paper_id": "p1", "title": "a", "abstract": ["the model works.", "the data is big.", "a result."]},
    {"paper_id": "p2", "title": "b", "abstract": ["one sentence only."]},
    {"paper_id": "p3", "title": "c", "abstract": ["the paper.", "the method is new.", "results are good.",
                                                   "a data set.", "the end."]},
]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _no_load(*args, **kwargs):
    raise AssertionError("a model was loaded")


def test_encode_arrays_equal_the_encoders_own_encode(tmp_path, tiny_model_dir):
    lines = [json.dumps(GOOD[0]), json.dumps({"paper_id": "empty", "title": "t", "abstract": []}),
             json.dumps(GOOD[1]), '{"paper_id": "broken", ', json.dumps({**GOOD[0], "title": "again"}),
             json.dumps(GOOD[2])]
    corpus = _write(tmp_path / "papers.jsonl", lines)
    out = tmp_path / "v"
    assert encode_main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out), "-q",
                        "--batch-size", "2"]) == 0
    vectors, offsets, whole = (np.load(out / f"{n}.npy") for n in ("vectors", "offsets", "whole"))
    papers = [json.loads(line) for line in (out / "papers.jsonl").read_text().splitlines()]
    assert [p["paper_id"] for p in papers] == ["p1", "p2", "p3"]
    batch = load_encoder(tiny_model_dir).encode(GOOD, batch_size=8)
    counts = batch.mask.sum(1).tolist()
    assert counts == [3, 1, 5]
    assert offsets.tolist() == [0, 3, 4, 9]
    assert vectors.dtype == np.float32 and whole.dtype == np.float32
    for p in range(3):  # brute force: paper p's real sentence rows, one after the other
        expected = batch.emb[p][batch.mask[p]].numpy()
        np.testing.assert_allclose(vectors[offsets[p]:offsets[p + 1]], expected, rtol=1e-5, atol=1e-5)
        assert papers[p]["sentences"] == GOOD[p]["abstract"]
    np.testing.assert_allclose(whole, batch.whole.numpy(), rtol=1e-5, atol=1e-5)
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert [r.get("line") for r in rejected] == [2, 4, 5]
    assert rejected[0]["paper_id"] == "empty" and rejected[2]["paper_id"] == "p1"


def test_encode_leaves_an_out_folder_of_something_else_alone(tmp_path, tiny_model_dir, monkeypatch, capsys):
    import aspire.encoders as encoders

    monkeypatch.setattr(encoders, "load_encoder", _no_load)
    corpus = _write(tmp_path / "papers.jsonl", [json.dumps(GOOD[0])])
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert encode_main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out), "-q"]) == 2
    assert "no shard.json in it" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("options, says", [
    (["--model", "no-such-model-x"], "--model"),
    (["--backend", "onnx", "--quantize", "bf16"], "--quantize bf16 goes with --backend"),
    (["--backend", "torch", "--quantize", "int8"], "--quantize int8 goes with --backend onnx"),
    (["--aspect-model", "no-such-model-y"], "--aspect-model"),
    (["--out", "FILE"], "is a file, not a folder"),
    (["--data", "NOWHERE"], "CSFCube not found"),
    (["--data", "EMPTYDIR"], "is not a CSFCube folder"),
])
def test_demo_bad_options_are_refused_before_any_model_loads(options, says, tmp_path, monkeypatch, capsys,
                                                             small_csfcube):
    import aspire.encoders as encoders
    import aspire.evaluate.csfcube as csfcube

    monkeypatch.setattr(encoders, "load_encoder", _no_load)
    monkeypatch.setattr(csfcube, "run_csfcube", _no_load)
    (tmp_path / "file").write_text("x")
    (tmp_path / "emptydir").mkdir()
    swap = {"FILE": str(tmp_path / "file"), "NOWHERE": str(tmp_path / "nowhere"), "EMPTYDIR": str(tmp_path / "emptydir")}
    options = [swap.get(o, o) for o in options]
    base = ["--data", str(small_csfcube), "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    assert demo.main(base + options) == 2
    err = capsys.readouterr().err
    assert says in err and "error" in err


@pytest.mark.parametrize("module", ["aspire.demo", "aspire.cli.encode"])
def test_help_does_not_import_torch(module):
    code = (f"import sys; from {module} import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--model" in done.stdout
