"""Round 64: the experiment name of a run given no `exp` (`aspire.evaluate.options.default_exp` / `options_exp`;
the name of its ranked files and results). A scorer option whose value is a mapping (the hybrid's `weights` or
`calibration`) raised a TypeError in `exact_g`, so an ensemble's CSFCube step (`run_csfcube` without `exp`) failed on
such a member after `load_ensemble` had passed it, maybe after other members had run; and two runs that differed
only in their encode options (`max_length`, `normalize`, `joiner`, `pooling`) shared one name, so the second
replaced the first's files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ensemble import _rows
from test_reliability_round24_names import assert_a_run_with_options_does_not_replace_the_default_run

from aspire.evaluate.ensemble import EnsembleMember
from aspire.evaluate.options import EvalOptions, default_exp, options_exp

WEIGHTS = {"whole": 1.0, "facet": 0.5}


# --- 1. mapping-valued scorer options ------------------------------------------------------------------------------

def test_a_mapping_scorer_option_is_named_by_its_sorted_entries():
    name = default_exp("minilm", "hybrid", scorer_options={"weights": WEIGHTS})
    assert name == "minilm-contextual-hybrid-weights-facet0.5-whole1"
    # the same mapping in another order is the same run: one name
    assert default_exp("minilm", "hybrid", scorer_options={"weights": {"facet": 0.5, "whole": 1.0}}) == name
    # calibration pairs from YAML (lists) and from Python (tuples) are one run; a negative mean keeps its sign
    cal = default_exp("m", "hybrid", scorer_options={"calibration": {"whole": (-0.5, 0.1)}, "tau": 2.0})
    assert cal == "m-contextual-hybrid-calibration-whole-0.5,0.1-tau2"
    assert default_exp("m", "hybrid", scorer_options={"calibration": {"whole": [-0.5, 0.1]}, "tau": 2.0}) == cal


def test_runs_with_different_mapping_options_have_different_names():
    variants = [{}, {"weights": WEIGHTS}, {"weights": {"whole": 1.0, "facet": 0.25}}, {"weights": {"whole": 1.0}},
                {"weights": {"whole": 1.0, "facet": 0.5, "ot": 0.1}}, {"weights": None},
                {"weights": WEIGHTS, "calibration": {"whole": (0.5, 0.1)}},
                {"weights": WEIGHTS, "calibration": {"whole": (0.5, 0.2)}},
                {"weights": WEIGHTS, "calibration": {"facet": (0.5, 0.1)}},
                {"weights": WEIGHTS, "tau": 0.5}, {"weights": {"whole": 1.0, "facet": 0.500001}}]
    names = [default_exp("m", "hybrid", scorer_options=v) for v in variants]
    assert len(set(names)) == len(names), names


@pytest.mark.parametrize("options", [
    {"weights": WEIGHTS, "calibration": {"whole": (-0.5, 0.1), "facet": [0.25, 1e-7]}},
    {"grad": "a/b c"}, {"grad": "x:y"}, {"weights": {"whole": 1.0, "a/b": 2.0}},
])
def test_a_named_scorer_option_makes_a_valid_folder_name(options, tmp_path):
    name = default_exp("minilm", "hybrid", scorer_options=options)
    assert Path(name).name == name and not any(c in name for c in ' /\\:"*?<>|')
    (tmp_path / name).mkdir()  # a folder of that name can be made, one level under tmp_path
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_string_with_dashes_or_commas_reads_back_one_way():
    """`-` separates the name's parts and `,` a list's items: a string holding them is escaped, so it cannot be
    read as two entries or two items."""
    a = default_exp("m", "ot", scorer_options={"grad": "x-tau1"})
    b = default_exp("m", "ot", scorer_options={"grad": "x", "tau": 1})
    c = default_exp("m", "ot", scorer_options={"grad": ["x", "y"]})
    d = default_exp("m", "ot", scorer_options={"grad": "x,y"})
    assert len({a, b, c, d}) == 4


def test_a_value_that_cannot_be_named_is_a_value_error_naming_its_key():
    with pytest.raises(ValueError, match="'weights'.*set"):
        default_exp("m", "hybrid", scorer_options={"weights": {"whole", "facet"}})


def test_an_ensemble_csfcube_step_runs_a_hybrid_member_with_explicit_weights(small_csfcube, tmp_path, tiny_model_dir):
    """The ensemble's CSFCube step names each member's run (`run_csfcube` without `exp`): a hybrid member with
    `weights` and `calibration` given as mappings failed there with a TypeError, after the member before it ran."""
    model = str(tiny_model_dir)
    options = {"weights": WEIGHTS, "calibration": {"whole": [0.5, 0.1], "facet": [0.4, 0.1]}}
    members = [EnsembleMember("minl2", model, "minl2", 1.0), EnsembleMember("hybrid", model, "hybrid", 1.0,
                                                                            scorer_options=options)]
    rows = _rows("csfcube", "z", members, small_csfcube, tmp_path / "o", cache_dir=tmp_path / "cache", batch_size=8)
    assert [r["metric"] for r in rows] == ["MAP", "NDCG%20"] and all(0.0 <= r["value"] <= 100.0 for r in rows)
    results = json.loads((tmp_path / "o/members/hybrid/csfcube/results.json").read_text())
    assert results["experiment"] == options_exp(model, "hybrid", EvalOptions(scorer_options=options)) == \
        f"{Path(model).name}-contextual-hybrid-calibration-facet0.4,0.1-whole0.5,0.1-weights-facet0.5-whole1"


# --- 2. encode options -----------------------------------------------------------------------------------------------

def test_runs_that_differ_only_in_encode_options_have_different_names():
    default = options_exp("minilm", "abstract", EvalOptions())
    encoded = options_exp("minilm", "abstract", EvalOptions(encode_options={"max_length": 256, "normalize": True}))
    assert default == "minilm-abstract-abstract"
    assert encoded == "minilm-abstract-abstract-encode-max-length-256-encode-normalize-true"
    independent = [EvalOptions(encoding="independent"), EvalOptions(encoding="independent", encode_options={"pooling": "cls"}),
                   EvalOptions(encoding="independent", encode_options={"max_length": 16}),
                   EvalOptions(encoding="independent", encoder_options={"max_length": 16}),  # the encoder's window
                   EvalOptions(encoding="independent", encode_options={"max_length": 16},
                               encoder_options={"max_length": 16})]
    names = [options_exp("m", "minl2", o) for o in independent]
    assert len(set(names)) == len(names), names


def test_encode_options_at_their_default_keep_the_name():
    spelt = {"max_length": 0, "normalize": False, "pooling": "mean", "joiner": None}
    assert options_exp("minilm", "abstract", EvalOptions(encode_options=spelt)) == "minilm-abstract-abstract"
    assert options_exp("m", "minl2", EvalOptions(encoding="independent", encode_options={"pooling": "mean"})) == \
        "m-independent-minl2"


def test_a_joiner_is_named_as_a_valid_folder_name(tmp_path):
    names = [options_exp("minilm", "abstract", EvalOptions(encode_options={"joiner": j})) for j in (" ", "/", "", ". ")]
    assert names[0] == "minilm-abstract-abstract-encode-joiner-%20"
    assert len(set(names)) == len(names)
    for name in names:
        (tmp_path / name).mkdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_an_encode_option_run_does_not_replace_a_default_run_of_the_same_folder(tmp_path):
    """`check_out` refuses a folder holding another experiment: a run with encode options once took the default
    run's name and replaced its ranked files and results."""
    assert_a_run_with_options_does_not_replace_the_default_run(
        tmp_path, "abstract", EvalOptions(encode_options={"max_length": 256, "normalize": True}))


def test_evaluate_csfcube_refuses_an_encode_option_run_into_a_default_runs_folder(tmp_path, tiny_model_dir,
                                                                                  shared_data, capsys):
    """Through the command, before any encoding: `--max-length 16 --normalize` is another run than the defaults."""
    from aspire.cli.evaluate import main

    out = tmp_path / "run"
    out.mkdir()
    default = options_exp(str(tiny_model_dir), "abstract", EvalOptions())
    (out / "results.json").write_text(json.dumps({"benchmark": "csfcube", "experiment": default}))
    argv = ["csfcube", "--data", str(shared_data / "csfcube"), "--model", str(tiny_model_dir), "--scorer", "abstract",
            "--out", str(out), "--no-cache", "--max-length", "16", "--normalize"]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert f"experiment '{default}'" in err and f"'{default}-encode-max-length-16-encode-normalize-true'" in err
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
