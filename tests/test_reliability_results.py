"""Results files are strict JSON and configs are checked when they load (issue 29, items 8 and 9).

Item 9: a metric undefined for a query (bpref when every candidate is relevant) is null with a
reason, never a bare NaN; every results file is read back with a parser that refuses NaN/Infinity.
Item 8: every numeric training-config field is range-checked at load time; an empty dev set is
refused unless evaluation is off.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aspire.benchmarks.metrics import UNDEFINED_REASONS, evaluate_rankings
from aspire.benchmarks.pools import write_ranked
from aspire.config import ConfigError, load_config
from aspire.evaluate.pool_run import run_pools
from aspire.jsonsafe import dumps, strict_loads
from aspire.train.config import Config

METRICS = ("MAP", "NDCG%20", "nDCG@10", "P@5", "MRR", "bpref", "R-precision")


# ---- item 9: strict JSON everywhere ------------------------------------------------------------------
def test_strict_loads_refuses_bare_nan_and_infinity():
    for bad in ('{"a": NaN}', "[Infinity]", '{"a": -Infinity}'):
        with pytest.raises(ValueError, match="bare"):
            strict_loads(bad)
    assert strict_loads('{"a": null}') == {"a": None}


@given(st.recursive(st.one_of(st.floats(), st.integers(), st.text(max_size=3), st.none()),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(alphabet="abc", max_size=2), inner, max_size=3)),
                    max_leaves=12))
def test_property_dumps_always_writes_strict_json_and_names_what_it_replaced(obj):
    text = dumps(obj)
    back = strict_loads(text)  # never raises: no bare NaN / Infinity
    n_bad = text.count("null") - json.dumps(obj).count("null")  # each non-finite float became one null
    if isinstance(back, dict) and n_bad:
        assert len(back["non_finite"]) >= 1
        assert set(back["non_finite"].values()) <= {"nan", "inf", "-inf"}


_GRADES = st.lists(st.integers(0, 3), min_size=1, max_size=6)


def _pool_files(root: Path, pools: list[list[int]]) -> None:
    anns, ranked = {}, {}
    for q, grades in enumerate(pools):
        cands = [f"c{q}_{i}" for i in range(len(grades))]
        anns[f"q{q}"] = {"cands": cands, "relevance_adju": grades}
        ranked[f"q{q}"] = [[c, float(len(cands) - i)] for i, c in enumerate(cands)]
    (root / "test-pid2anns-toy.json").write_text(json.dumps(anns))
    (root / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(ranked))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pools=st.lists(_GRADES, min_size=1, max_size=5))
def test_property_pool_results_are_strict_json_with_undefined_metrics_null_and_counted(tmp_path, pools):
    root = tmp_path / "toy"
    root.mkdir(exist_ok=True)
    _pool_files(root, pools)
    out = tmp_path / "out"
    with_relevant = [f"q{q}" for q, g in enumerate(pools) if any(x >= 1 for x in g)]
    if not with_relevant:  # nothing to evaluate is an error, not an empty results file
        with pytest.raises(ValueError, match="nothing to evaluate"):
            run_pools(root, "toy", out, metrics=METRICS, skip_no_relevant=True, ranked_dir=root, exp="manual")
        return
    run_pools(root, "toy", out, metrics=METRICS, skip_no_relevant=True, ranked_dir=root, exp="manual")
    results = strict_loads((out / "results.json").read_text())
    all_relevant = [f"q{q}" for q, g in enumerate(pools) if all(x >= 1 for x in g)]
    assert sorted(results["skipped_no_relevant"]) == sorted(set(f"q{q}" for q in range(len(pools))) - set(with_relevant))
    undefined = results["undefined_metrics"]
    if all_relevant:  # bpref has no non-relevant candidate to rank below: null with its reason
        assert sorted(undefined["bpref"]["queries"]) == sorted(all_relevant)
        assert undefined["bpref"]["reason"] == UNDEFINED_REASONS["bpref"]
        assert results["summary"]["all"]["n_undefined"]["bpref"] == len(all_relevant)
        if len(all_relevant) == len(with_relevant):
            assert results["summary"]["all"]["bpref"] is None
    else:
        assert "bpref" not in undefined
    for group in results["summary"].values():
        for m in METRICS:
            assert group[m] is None or (math.isfinite(group[m]) and 0.0 <= group[m] <= 100.0 + 1e-9)
    rows = (out / "perq.csv").read_text().splitlines()[1:]
    assert len(rows) == len(with_relevant)


def test_bpref_undefined_for_one_query_is_none_not_nan():
    scores = evaluate_rankings({"q": {"a": 2, "b": 1}, "r": {"a": 1, "b": 0}}, {"q": ["a", "b"], "r": ["b", "a"]},
                               ["bpref", "MAP"])
    assert scores["q"]["bpref"] is None and scores["q"]["MAP"] == 1.0
    assert scores["r"]["bpref"] == 0.0


def test_ranked_file_with_non_finite_scores_is_strict_json(tmp_path):
    write_ranked(tmp_path / "r.json", {"q": [("a", float("nan")), ("b", float("-inf")), ("c", 1.0)]})
    assert strict_loads((tmp_path / "r.json").read_text()) == {"q": [["a", None], ["b", None], ["c", 1.0]]}


def test_training_metrics_line_with_nan_loss_is_strict_json():
    line = dumps({"step": 3, "loss": float("nan"), "grad_norm": float("inf")})
    assert strict_loads(line) == {"step": 3, "loss": None, "grad_norm": None,
                                  "non_finite": {"loss": "nan", "grad_norm": "inf"}}


# ---- item 8: training configs checked at load time -----------------------------------------------------
# (key, lowest valid value); the value just below it, NaN and infinity must all be refused
_INT_FIELDS = [("train.batch_size", 1), ("train.grad_accum", 1), ("train.max_steps", 0), ("train.epochs", 1),
               ("train.warmup_steps", 0), ("train.stop_after", 0), ("train.log_every", 1), ("train.eval_every", 0),
               ("train.save_every", 0), ("train.keep_checkpoints", 0), ("train.num_workers", 0), ("train.seed", 0),
               ("model.ot_max_iter", 1), ("model.max_length", 0), ("data.max_sentences", 0),
               ("data.max_examples", 0), ("data.dev_batches", 0)]
_POSITIVE_FLOATS = ["train.lr", "train.clip_norm", "model.ot_eps", "model.ot_tau", "model.ot_tol", "model.att_tau"]
_NON_NEGATIVE_FLOATS = ["train.weight_decay", "loss.margin"]


@given(field=st.sampled_from(_INT_FIELDS), below=st.integers(1, 10**30))
def test_property_integer_fields_below_their_range_are_refused_at_load(field, below):
    key, lowest = field
    with pytest.raises(ConfigError, match=rf"{key.split('.')[1]}: must be >= {lowest}, got {lowest - below}"):
        load_config(Config, None, [*_reader(key), f"{key}={lowest - below}"])
    assert _get(load_config(Config, None, [*_reader(key), f"{key}={lowest + below}"]), key) == lowest + below


def _reader(key: str) -> list[str]:
    """The model kind that reads a scorer setting (the OT ones: `ot`; `att_tau`: `att`), for a config that sets it:
    a kind that reads none refuses it."""
    return ["model.kind=ot"] if key.startswith("model.ot_") else ["model.kind=att"] if key == "model.att_tau" else []


@given(key=st.sampled_from(_POSITIVE_FLOATS + _NON_NEGATIVE_FLOATS),
       value=st.one_of(st.sampled_from([".nan", ".inf", "-.inf", "0", "-1e-300"]), st.floats(max_value=-1e-12).map(repr)))
def test_property_float_fields_out_of_range_or_not_finite_are_refused_at_load(key, value):
    if value == "0" and key in _NON_NEGATIVE_FLOATS:
        assert _get(load_config(Config, None, [f"{key}=0"]), key) == 0.0
        return
    with pytest.raises(ConfigError, match=key.split(".")[1]):
        load_config(Config, None, [*_reader(key), f"{key}={value}"])


def test_config_file_with_a_zero_batch_size_fails_when_it_loads(tmp_path):
    (tmp_path / "bad.yaml").write_text("base: " + str(Path(__file__).resolve().parents[1] / "configs/base.yaml")
                                       + "\ntrain:\n  batch_size: 0\n")
    with pytest.raises(ConfigError, match=r"train\.batch_size: must be >= 1, got 0"):
        load_config(Config, tmp_path / "bad.yaml")


def _get(cfg, key):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def test_empty_dev_split_is_refused_unless_evaluation_is_off(tmp_path, tiny_model_dir):
    from test_train import tiny_config, write_examples_dir

    from aspire.train.data import load_dev_split
    from aspire.train.trainer import run

    examples = write_examples_dir(tmp_path / "ex")
    (examples / "examples.dev.jsonl").write_text("")
    cfg = tiny_config(tiny_model_dir, examples, tmp_path / "run")
    with pytest.raises(ValueError, match=r"dev split .*examples\.dev\.jsonl holds no examples.*data\.use_dev=false"):
        run(cfg)
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").glob("checkpoint-*"))
    off = tiny_config(tiny_model_dir, examples, tmp_path / "run-off", "data.use_dev=false")
    assert load_dev_split(off.data) is None


def test_a_dev_split_smaller_than_a_batch_is_refused_before_the_first_step(tmp_path, tiny_model_dir):
    """dev_loss takes whole batches: a dev split of 10 examples and batches of 11 once trained to the end, then
    failed at the first evaluation."""
    from test_train import tiny_config, write_examples_dir

    from aspire.train.trainer import run

    examples = write_examples_dir(tmp_path / "ex")  # 5 dev lines: 10 examples
    cfg = tiny_config(tiny_model_dir, examples, tmp_path / "run", "train.batch_size=11")
    with pytest.raises(ValueError, match=r"^the dev split holds 10 example\(s\), fewer than one batch "
                                         r"\(train\.batch_size=11\).*data\.use_dev=false$"):
        run(cfg)
    assert not list((tmp_path / "run").glob("checkpoint-*")) and not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("override, message", [
    ("batch_size=1", "batch_size: must be >= 2, got 1"),
    ("warmup=1.5", "warmup: must be <= 1, got 1.5"),
    ("epochs=0", "epochs: must be > 0, got 0.0"),
    ("learning_rate=.nan", "learning_rate: must be a finite number, got nan"),
])
def test_sentence_model_training_config_is_range_checked_at_load(override, message):
    from aspire.encoders.cosentbert import CoSentBertConfig

    with pytest.raises(ConfigError, match=message):
        load_config(CoSentBertConfig, None, [override])
