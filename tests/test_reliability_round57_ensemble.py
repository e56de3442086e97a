"""Round 57: an ensemble listing one run twice (the same model, scorer, encoding and options, the model perhaps
spelled another way) is refused naming both members (`aspire.evaluate.ensemble.load_ensemble`): fused twice, it
weighed double without a word, where a member's share is its weight."""

from __future__ import annotations

import json
import re

import pytest

from aspire.evaluate.ensemble import load_ensemble


def _write(tmp_path, members: list[str]):
    path = tmp_path / "ens.yaml"
    path.write_text("members:\n" + "".join(f" - {m}\n" for m in members))
    return path


def _model(folder):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


@pytest.mark.parametrize("second", ["models/m", "{abs}", "{abs}/", "./models/../models/m", "link"])
def test_one_model_folder_spelt_two_ways_is_refused_naming_both_members(tmp_path, monkeypatch, second):
    """Relative and absolute paths, a trailing slash, a `..` and a link to the folder are one model."""
    folder = _model(tmp_path / "models" / "m")
    (tmp_path / "link").symlink_to(folder, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    second = second.format(abs=folder)
    path = _write(tmp_path, ["{name: a, model: models/m, scorer: ot, scorer_options: {tau: 1}, weight: 0.5}",
                             "{name: lex, model: bm25}",
                             f"{{name: b, model: '{second}', scorer: ot, scorer_options: {{tau: 1.0}}, weight: 0.5}}"])
    spelt = "" if second == "models/m" else f" (model '{second}' is 'models/m' there)"
    with pytest.raises(ValueError, match=re.escape(f"{path}: members[2] (b): the same run as members[0] (a){spelt}: "
                                                   "the same model, scorer, encoding and options")):
        load_ensemble(path)


def test_a_training_run_and_its_checkpoint_model_are_one_model(tmp_path):
    run = tmp_path / "run"
    model = _model(run / "checkpoint-000120" / "model")
    (run / "best").write_text(json.dumps({"checkpoint": "checkpoint-000120"}))
    path = _write(tmp_path, [f"{{name: a, model: '{run}', scorer: minl2}}", f"{{name: b, model: '{model}', "
                                                                                "scorer: minl2}"])
    with pytest.raises(ValueError, match=r"members\[1\] \(b\): the same run as members\[0\] \(a\)"):
        load_ensemble(path)


@pytest.mark.parametrize("members", [
    ["{name: a, model: bm25, weight: 0.2}", "{name: m, model: minilm, scorer: ot}", "{name: b, model: bm25}"],
    ["{name: a, model: minilm, scorer: maxpassage, scorer_options: {window: 2}}",
     "{name: b, model: minilm, scorer: maxpassage, scorer_options: {window: 2}, weight: 3}"],
    # the abstract scorer encodes whole abstracts whatever the encoding asked for (`EvalOptions.checked`)
    ["{name: a, model: minilm, scorer: abstract, encode_options: {normalize: true}}",
     "{name: b, model: minilm, scorer: abstract, encoding: independent, encode_options: {normalize: true}}"],
])
def test_identical_bm25_or_model_members_are_refused(tmp_path, members):
    with pytest.raises(ValueError, match=r"members\[\d\] \(b\): the same run as members\[0\] \(a\)"):
        load_ensemble(_write(tmp_path, members))


def test_members_differing_in_model_scorer_encoding_or_options_are_kept(tmp_path):
    path = _write(tmp_path, [
        "{name: a, model: minilm, scorer: ot}", "{name: b, model: mpnet, scorer: ot}",
        "{name: c, model: minilm, scorer: minl2}", "{name: d, model: minilm, scorer: minl2, encoding: independent}",
        "{name: e, model: minilm, scorer: ot, scorer_options: {tau: 5}}", "{name: f, model: minilm, scorer: abstract}",
        "{name: g, model: minilm, scorer: abstract, encoding: pass}",
        "{name: h, model: minilm, scorer: abstract, encode_options: {normalize: true}}",
        "{name: i, model: m1, scorer: ot}", "{name: j, model: m2, scorer: ot}", "{name: k, model: bm25}"])
    assert [m.name for m in load_ensemble(path).members] == list("abcdefghijk")


def test_the_suite_command_refuses_a_repeated_member_before_anything_runs(tmp_path, capsys):
    from aspire.cli.evaluate import main

    path = _write(tmp_path, ["{name: a, model: minilm, scorer: ot}", "{name: b, model: minilm, scorer: ot}"])
    assert main(["suite", "--ensemble", str(path), "--data", str(tmp_path / "none"),
                 "--out", str(tmp_path / "out")]) == 2
    assert "members[1] (b): the same run as members[0] (a)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_training_run_whose_pointer_names_no_model_is_refused_naming_the_member(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "best").write_text(json.dumps({"checkpoint": "checkpoint-000120"}))  # no checkpoint folder
    path = _write(tmp_path, ["{name: a, model: minilm, scorer: minl2}", f"{{name: b, model: '{run}', scorer: ot}}"])
    with pytest.raises(ValueError, match=re.escape(f"{path}: members[1] (b): {run / 'best'} names 'checkpoint-000120'")):
        load_ensemble(path)
