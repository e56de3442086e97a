"""Round 24: a run's default experiment name says how the model encoded when that is not the default
(`aspire.evaluate.options.options_exp`): two CSFCube or pools runs that differed only in `--facet-code`, `--doc-code`
or `--backend/--quantize` once shared one name, so the second replaced the first's ranked files and results."""

from __future__ import annotations

import argparse
import json

import pytest

from aspire.cli import evaluate_out
from aspire.evaluate.options import EvalOptions, default_exp, options_exp


def test_a_run_on_default_encoding_options_keeps_its_name():
    for scorer, opts in (("ot", {"tau": 0.5}), ("minl2", {}), ("abstract", {})):
        options = EvalOptions(scorer_options=opts)
        assert options_exp("runs/x/model", scorer, options) == default_exp("runs/x/model", scorer,
                                                                         scorer_options=opts)
    explicit = EvalOptions(encoder_options={"backend": "torch"})  # torch named: still the default encoder
    assert options_exp("m", "minl2", explicit) == "m-contextual-minl2"


@pytest.mark.parametrize("options, suffix", [
    (EvalOptions(facet_code="none"), "-facet-code-none"),
    (EvalOptions(facet_code="method"), "-facet-code-method"),
    (EvalOptions(encoder_options={"code": "method"}), "-doc-code-method"),
    (EvalOptions(encoder_options={"code": None}), "-doc-code-none"),
    (EvalOptions(encoder_options={"backend": "openvino", "quantize": None}), "-backend-openvino"),
    (EvalOptions(encoder_options={"backend": "onnx", "quantize": "int8"}), "-backend-onnx-quantize-int8"),
    (EvalOptions(encoder_options={"max_length": 16}), "-max-length-16"),
])
def test_each_non_default_encoding_option_is_in_the_name(options, suffix):
    assert options_exp("minilm", "minl2", options) == "minilm-contextual-minl2" + suffix


def test_names_of_runs_that_differ_in_one_encoding_option_differ():
    variants = [EvalOptions(), EvalOptions(facet_code="none"), EvalOptions(facet_code="background"),
                EvalOptions(encoder_options={"code": None}), EvalOptions(encoder_options={"code": "method"}),
                EvalOptions(encoder_options={"backend": "openvino", "quantize": None}),
                EvalOptions(encoder_options={"backend": "openvino", "quantize": "int8"}),
                EvalOptions(facet_code="none", encoder_options={"code": None})]
    names = [options_exp("m", "ot", v) for v in variants]
    assert len(set(names)) == len(names)


def assert_a_run_with_options_does_not_replace_the_default_run(tmp_path, scorer: str, options: EvalOptions) -> None:
    """`check_out` lets the default run of `scorer` replace its own folder, and refuses a run with `options` there."""
    out = tmp_path / "run"
    out.mkdir()
    default = options_exp("minilm", scorer, EvalOptions())
    (out / "results.json").write_text(json.dumps({"benchmark": "csfcube", "experiment": default}))
    args = argparse.Namespace(command="csfcube", out=str(out), data=None, model="minilm", scorer=scorer)
    evaluate_out.check_out(args, default)  # the same run again: replaced, as before
    with pytest.raises(FileExistsError, match="experiment"):
        evaluate_out.check_out(args, options_exp("minilm", scorer, options))


def test_a_facet_code_run_does_not_replace_a_default_run_of_the_same_folder(tmp_path):
    assert_a_run_with_options_does_not_replace_the_default_run(tmp_path, "minl2", EvalOptions(facet_code="none"))


def test_evaluate_csfcube_refuses_a_facet_code_run_into_a_default_runs_folder(tmp_path, tiny_model_dir, shared_data,
                                                                              capsys):
    """Through the command: the folder of a run on the defaults is refused, before any encoding, to a run with
    `--facet-code none` (it once took the same experiment name and replaced that run's files)."""
    from aspire.cli.evaluate import main

    out = tmp_path / "run"
    out.mkdir()
    auto = options_exp(str(tiny_model_dir), "minl2", EvalOptions())
    (out / "results.json").write_text(json.dumps({"benchmark": "csfcube", "experiment": auto}))
    argv = ["csfcube", "--data", str(shared_data / "csfcube"), "--model", str(tiny_model_dir), "--scorer", "minl2",
            "--out", str(out), "--no-cache", "--facet-code", "none"]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert f"experiment '{auto}'" in err and f"experiment '{auto}-facet-code-none'" in err
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
