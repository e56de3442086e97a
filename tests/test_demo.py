"""The main job (`python -m aspire.demo`) end to end on a cut-down CSFCube with the tiny model."""

from __future__ import annotations

import json

import pytest

from aspire import demo


@pytest.mark.slow
def test_demo_runs_every_scorer_and_prints_the_table(small_csfcube, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "demo"
    code = demo.main(["--model", str(tiny_model_dir), "--data", str(small_csfcube), "--out", str(out),
                      "--cache-dir", str(tmp_path / "cache"), "--aspect-model", "none"])
    assert code == 0
    printed = capsys.readouterr().out
    table = [line for line in printed.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| model | background | method | result | all |")
    assert table[1].startswith("| SPECTER (published ranked pools) | 43.95 / 66.70 |")
    assert len(table) == 1 + 1 + len(demo.RUNS)  # header, SPECTER, one row a scorer
    for _, scorer, _, _ in demo.RUNS:
        results = json.loads((out / scorer / "results.json").read_text())
        assert 0.0 <= results["test"]["all"]["MAP"] <= 100.0
    cached = [p.name for p in (tmp_path / "cache").glob("*.pt")]
    assert len(cached) == 1 and "-contextual-" in cached[0]  # one encoding pass serves every row


@pytest.mark.slow
def test_demo_adds_the_aspect_models_rows_from_one_pass_of_its_own(small_csfcube, tiny_model_dir, tmp_path, capsys):
    from test_hybrid import adapted_tiny_model  # a LoRA adapter over the tiny model, shipped as aspire-minilm is

    aspect = adapted_tiny_model(tiny_model_dir, tmp_path / "aspect-model")
    out = tmp_path / "demo"
    assert demo.main(["--model", str(tiny_model_dir), "--data", str(small_csfcube), "--out", str(out),
                      "--cache-dir", str(tmp_path / "cache"), "--aspect-model", str(aspect)]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(table) == 2 + len(demo.RUNS) + len(demo.ASPECT_RUNS)
    assert [line.split(" | ")[0] for line in table[-len(demo.ASPECT_RUNS):]] == [
        f"| {aspect} {label}" for label, _, _, _ in demo.ASPECT_RUNS]
    for _, scorer, _, _ in demo.ASPECT_RUNS:
        assert json.loads((out / "aspect" / scorer / "results.json").read_text())["model"] == str(aspect)
    cached = sorted(p.name for p in (tmp_path / "cache").glob("*.pt"))
    assert len(cached) == 2 and all("-contextual-" in name for name in cached)  # one pass a model


def test_demo_refuses_a_missing_data_folder(tmp_path, capsys):
    assert demo.main(["--data", str(tmp_path / "nowhere")]) == 2
    assert "CSFCube not found" in capsys.readouterr().err
