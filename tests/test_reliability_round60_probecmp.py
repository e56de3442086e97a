"""Round 60: `compare_probe_results` names the run, the paper (or query) and the field of a null label, prediction or
query score, before any metric is computed (a null year prediction was the year metric's "paper 1", naming neither
the run nor the paper; a null class numpy's TypeError; a null query score named the query but not the run)."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from aspire.evaluate.probes import compare_probe_results
from aspire.io import write_json
from tests.test_reliability_round24_compare import PRED_A, PRED_B, Y, _same_author_folder, _venue_folder

IDS = [f"p{i}" for i in range(6)]
YEARS = [2001.0, 2003.0, 2005.0, 2007.0, 2009.0, 2011.0]


def _year_folder(folder: pathlib.Path, preds: dict) -> pathlib.Path:
    """A year results folder written as `run_format` writes it (`write_json`: a NaN becomes null, under non_finite)."""
    reps = {rep: {"metrics": {}, "ci95": {}, "test_ids": IDS, "y": YEARS, "pred": pred} for rep, pred in preds.items()}
    write_json(folder / "results.json", {"format": "year", "representations": reps})
    return folder


@pytest.fixture
def metric_calls(monkeypatch) -> list:
    """The metrics compare would compute, counted (and still computed)."""
    import aspire.benchmarks.venue as venue
    import aspire.benchmarks.year as year

    calls = []
    for module, name in ((year, "kendall_tau"), (year, "rmse"), (venue, "macro_f1")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *args, _real=real, _name=name: calls.append(_name) or _real(*args))
    return calls


def test_a_null_year_prediction_is_named_by_run_paper_and_field_before_any_metric(tmp_path, metric_calls):
    good = [2000.0, 2004.0, 2004.0, 2008.0, 2010.0, 2010.0]
    a = _year_folder(tmp_path / "a", {"abstract": good, "sentences": good})
    # the second representation's NaN: once every metric of the first was computed before the error
    b = _year_folder(tmp_path / "b", {"abstract": good, "sentences": good[:3] + [float("nan")] + good[4:]})
    assert json.loads((b / "results.json").read_text())["representations"]["sentences"]["pred"][3] is None
    for first, second in ((a, b), (b, a)):
        with pytest.raises(ValueError, match=re.escape(f"{b} (sentences): the 'pred' of test paper p3 is None, not a "
                                                       "finite number (a nan the run wrote as null, under non_finite)")):
            compare_probe_results(first, second, n_perm=5)
    assert metric_calls == []
    assert compare_probe_results(a, a, n_perm=5)["sentences/RMSE (years)"]["delta"] == 0.0
    assert metric_calls  # the counting does count


def test_a_null_or_missing_year_label_names_the_first_run(tmp_path):
    a = _year_folder(tmp_path / "a", {"abstract": YEARS})
    doc = json.loads((a / "results.json").read_text())
    doc["representations"]["abstract"]["y"][0] = None
    (a / "results.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=re.escape(f"{a} (abstract): the 'y' of test paper p0 is None, not a finite")):
        compare_probe_results(a, a, n_perm=5)


def test_a_null_venue_class_is_named_by_run_paper_and_field(tmp_path, metric_calls):
    a = _venue_folder(tmp_path / "a", Y, {"abstract": PRED_A})
    b = _venue_folder(tmp_path / "b", Y, {"abstract": PRED_B[:4] + [None] + PRED_B[5:]})  # was numpy's TypeError
    with pytest.raises(ValueError, match=re.escape(f"{b} (abstract): the 'pred' of test paper p4 is None, not a class")):
        compare_probe_results(a, b, n_perm=5)
    c = _venue_folder(tmp_path / "c", [None] + Y[1:], {"abstract": PRED_A})
    with pytest.raises(ValueError, match=re.escape(f"{c} (abstract): the 'y' of test paper p0 is None, not a class")):
        compare_probe_results(c, c, n_perm=5)
    assert metric_calls == []
    assert compare_probe_results(a, a, n_perm=5)["abstract/macro-F1"]["delta"] == 0.0


@pytest.mark.parametrize("scores, said", [({"MAP": None, "nDCG@10": 0.5}, "None"),  # named the query alone
                                          ({"MAP": 0.5}, "missing")])  # a KeyError 'nDCG@10'
def test_a_null_or_missing_same_author_score_names_the_run_query_and_metric(tmp_path, scores, said):
    good = {"q1": {"MAP": 0.5, "nDCG@10": 0.6}, "q2": {"MAP": 1.0, "nDCG@10": 1.0}}
    a = _same_author_folder(tmp_path / "a", good)
    b = _same_author_folder(tmp_path / "b", {**good, "q2": scores})
    metric = "MAP" if said == "None" else "nDCG@10"
    with pytest.raises(ValueError, match=re.escape(f"{b} (abstract): the {metric} of same-author query q2 is {said}, "
                                                   "not a finite number")):
        compare_probe_results(a, b, n_perm=5)
    assert compare_probe_results(a, a, n_perm=5)["abstract/MAP"]["delta"] == 0.0
