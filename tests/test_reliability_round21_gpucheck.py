"""experiments/gpu_check.py: its CPU dry run passes every check with one JSON row a check, and one check's failure,
crash or missing package is recorded without stopping the others."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_dry_run_passes_every_check(gpu_check, tmp_path, capsys):
    rc = gpu_check.main(["--device", "cpu", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    names = [fn.__name__.removeprefix("check_") for fn in gpu_check.CHECKS]
    assert [row["check"] for row in report["checks"]] == names  # every check ran, one row each, in order
    bad = {row["check"]: row["detail"] for row in report["checks"] if row["status"] != "pass"}
    assert bad == {} and report["failed"] == [] and rc == 0
    for row in report["checks"]:
        assert row["tolerance"] > 0 and 0 <= row["max_abs_diff"] <= row["tolerance"]
    # what the brief names is covered
    for needed in ("sinkhorn_forward", "sinkhorn_implicit", "scorer_ot", "scorer_minl2", "loss_ot_triplet",
                   "loss_triplet_aligned", "loss_matrix", "encoder_forward", "encoder_encode", "train_ts_triplet"):
        assert needed in names
    assert f"{len(names)} of {len(names)} checks passed" in capsys.readouterr().out


def test_one_failing_check_does_not_stop_the_rest(gpu_check, tmp_path, monkeypatch):
    def check_raises(rec, dev):
        raise RuntimeError("boom")

    def check_needs_faiss(rec, dev):
        import faiss_not_installed_here  # noqa: F401

    def check_wrong_device(rec, dev):
        rec.on_device("out", torch.zeros(2), device=torch.device("cuda"))
        rec.close("x", torch.ones(2), torch.ones(2), 1e-6)

    def check_off_by_much(rec, dev):
        rec.close("x", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]), atol=1e-3)

    def check_fine(rec, dev):
        rec.close("x", torch.tensor([1.0]), torch.tensor([1.0 + 1e-9], dtype=torch.float64), atol=1e-6)

    monkeypatch.setattr(gpu_check, "CHECKS", [check_raises, check_needs_faiss, check_wrong_device, check_off_by_much,
                                              check_fine])
    rc = gpu_check.main(["--device", "cpu", "--out", str(tmp_path)])
    rows = {r["check"]: r for r in json.loads((tmp_path / "gpu_check.json").read_text())["checks"]}
    assert rc == 1
    assert rows["raises"]["status"] == "error" and "boom" in rows["raises"]["detail"]
    assert rows["needs_faiss"]["status"] == "needs faiss_not_installed_here"
    assert rows["wrong_device"]["status"] == "FAIL" and "on cpu, expected cuda" in rows["wrong_device"]["detail"]
    assert rows["off_by_much"]["status"] == "FAIL" and rows["off_by_much"]["max_abs_diff"] == pytest.approx(0.5)
    assert rows["fine"]["status"] == "pass"
