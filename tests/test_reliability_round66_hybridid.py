"""Round 66: two hybrid ensemble members the scorer reads alike are one run (`aspire.evaluate.ensemble.member_run`).

`HybridScorer` leaves a term of weight 0 out of its weights and reads `calibration: null` and `calibration: {}` alike,
but the members' identity took both options as written: `weights: {whole: 1, facet: 1}` and the same with `ot: 0`,
or no calibration and `calibration: {}`, were two members, fused twice, the run weighing double unsaid."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aspire.evaluate.ensemble import load_ensemble
from tests.test_reliability_round57_ensemble import _write


@pytest.mark.parametrize("first, second", [
    ("{weights: {whole: 1, facet: 1}}", "{weights: {whole: 1, facet: 1, ot: 0}}"),
    ("{weights: null}", "{weights: {whole: 1.0, facet: 1.0, minl2: 0.0, ot: 0}}"),
    ("{weights: {whole: 1, ot: 0.5}}", "{weights: {ot: 0.5, minl2: 0, whole: 1.0}}"),
    ("{}", "{calibration: {}}"),
    ("{calibration: null}", "{calibration: {}, weights: {facet: 1, whole: 1, minl2: 0}}"),
    ("{weights: {whole: 1, ot: 1}, calibration: {ot: [-1, 2]}, tau: 2}",
     "{weights: {whole: 1.0, ot: 1.0, facet: 0}, calibration: {ot: [-1.0, 2.0]}, tau: 2.0, eps: 0.05}"),
])
def test_hybrid_members_the_scorer_reads_alike_are_refused_naming_both(tmp_path, first, second):
    path = _write(tmp_path, [f"{{name: a, model: minilm, scorer: hybrid, scorer_options: {first}}}",
                             f"{{name: b, model: minilm, scorer: hybrid, scorer_options: {second}}}"])
    with pytest.raises(ValueError, match=re.escape(f"{path}: members[1] (b): the same run as members[0] (a): ")):
        load_ensemble(path)


@pytest.mark.parametrize("first, second", [
    ("{weights: {whole: 1, facet: 1}}", "{weights: {whole: 1, facet: 1, ot: 0.1}}"),
    ("{}", "{calibration: {whole: [0, 2]}}"),
    ("{weights: {whole: 1, ot: 1}}", "{weights: {whole: 1, ot: 1}, tau: 2}"),
    ("{weights: {whole: 1, facet: 1}}", "{weights: {whole: 1, facet: 2}}"),
])
def test_hybrid_members_the_scorer_reads_apart_are_kept(tmp_path, first, second):
    path = _write(tmp_path, [f"{{name: a, model: minilm, scorer: hybrid, scorer_options: {first}}}",
                             f"{{name: b, model: minilm, scorer: hybrid, scorer_options: {second}}}"])
    assert [m.name for m in load_ensemble(path).members] == ["a", "b"]


@pytest.mark.parametrize("scorer, first, second", [
    ("ot", "{tau: 1, eps: 0.05, max_iter: 1000}", "{tau: 1.0, eps: 5.0e-2, tol: 0.0001}"),
    ("attention", "{tau: 2}", "{tau: 2.0}"),
    ("maxpassage", "{window: 2}", "{window: 2.0}"),
])
def test_other_scorers_numbers_compare_by_value(tmp_path, scorer, first, second):
    path = _write(tmp_path, [f"{{name: a, model: minilm, scorer: {scorer}, scorer_options: {first}}}",
                             f"{{name: b, model: minilm, scorer: {scorer}, scorer_options: {second}}}"])
    with pytest.raises(ValueError, match=re.escape("members[1] (b): the same run as members[0] (a)")):
        load_ensemble(path)


@pytest.mark.parametrize("name", ["minilm", "rrf"])
def test_the_committed_ensemble_configs_load_to_their_members(name):
    config = load_ensemble(Path(__file__).parents[1] / "configs" / f"ensemble_{name}.yaml")
    want = {"minilm": [("abstract", "abstract"), ("maxpassage", "maxpassage"), ("bm25", None)],
            "rrf": [("abstract", "abstract"), ("minl2", "minl2"), ("ot", "ot")]}[name]
    assert [(m.name, m.scorer) for m in config.members] == want
