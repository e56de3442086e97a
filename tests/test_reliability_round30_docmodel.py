"""Round 30, the document model, the trainer's bookkeeping and strict JSON: dict keys as JSON writes them (numpy keys,
`True` named "true" in "non_finite", two keys written as one name refused), a "non_finite" that is not an object
refused, and checks that found nothing wrong (a saved model loads to the very vectors of every kind, a resume config
read back from its YAML, the LR schedule against transformers')."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.jsonsafe import dumps, strict_loads
from aspire.train.document_model import KINDS, DocumentModel
from aspire.train.state import check_resume_config, linear_schedule, weights_digest

REPO = Path(__file__).resolve().parents[1]
NAN, INF = float("nan"), float("inf")


# ---- aspire.jsonsafe: dict keys ------------------------------------------------------------------------------------
def test_dumps_writes_numpy_dict_keys_as_the_python_keys_they_hold():
    """A numpy scalar was turned into its Python value as a value, not as a key: `{np.int64(3): 1.0}` (a count keyed
    by np.unique's values) was json's TypeError 'keys must be str, int, ... not numpy.int64'."""
    text = dumps({np.int64(3): 1.0, np.float32(0.5): np.float64(NAN), np.str_("a"): 2})
    assert strict_loads(text) == {"3": 1.0, "0.5": None, "a": 2, "non_finite": {"0.5": "nan"}}


def test_non_finite_paths_name_keys_as_json_writes_them():
    """The path of a non-finite value under a key True, None or 1e16 was str(key), "True" / "None" / "1e+16" by luck:
    the written object has "true" and "null", so "non_finite" named keys it does not hold."""
    back = strict_loads(dumps({True: NAN, None: {"x": INF}, 1e16: -INF, 2: NAN}))
    assert back["non_finite"] == {"true": "nan", "null.x": "inf", "1e+16": "-inf", "2": "nan"}
    for path in back["non_finite"]:  # every path leads to a null of the object read back
        node = back
        for part in path.split("."):
            node = node[part]
        assert node is None


def test_dumps_refuses_two_keys_written_as_one_name():
    """`{1: "a", "1": "b"}` was written `{"1": "a", "1": "b"}`: a reader keeps one of the two values, unsaid."""
    with pytest.raises(ValueError, match=r"q: keys 1 and '1' are both written as JSON name '1'"):
        dumps({"q": {1: "a", "1": "b"}})
    with pytest.raises(ValueError, match=r"\$: keys True and 'true'"):
        dumps({True: 1, "true": 2})
    assert strict_loads(dumps({1: "a", "2": "b"})) == {"1": "a", "2": "b"}  # distinct names: as before


def test_dumps_refuses_a_non_finite_key_naming_its_path():
    """A NaN key was json's 'Out of range float values are not JSON compliant', naming nothing."""
    with pytest.raises(ValueError, match=r"scores: a non-finite dict key nan"):
        dumps({"scores": {np.float64(NAN): 1}})


def test_dumps_refuses_a_non_finite_entry_that_is_not_an_object():
    """A record whose own "non_finite" held a value that is not an object (an extra field of a paper) lost it when a
    NaN elsewhere was recorded: `{"non_finite": 3, "x": nan}` was written `{"non_finite": {"x": "nan"}, "x": null}`."""
    with pytest.raises(ValueError, match=r"'non_finite' holds 3, not an object .* at x"):
        dumps({"non_finite": 3, "x": NAN})
    assert strict_loads(dumps({"non_finite": 3, "x": 1.0})) == {"non_finite": 3, "x": 1.0}  # nothing to record
    merged = strict_loads(dumps({"non_finite": {"bpref": "no non-relevant candidate"}, "bpref": None, "x": NAN}))
    assert merged["non_finite"] == {"bpref": "no non-relevant candidate", "x": "nan"}


def test_dumps_tuples_arrays_and_nesting_against_json():
    """Checked: tuples become lists, numpy arrays (0-d too) their lists, paths count list positions; what is finite
    is written exactly as `json.dumps` writes it."""
    obj = {"t": (1, NAN, [2.5, (INF,)]), "a": np.array([[1.0, np.nan]], dtype=np.float32), "z": np.array(-np.inf)}
    back = strict_loads(dumps(obj))
    assert back == {"t": [1, None, [2.5, [None]]], "a": [[1.0, None]], "z": None,
                    "non_finite": {"t.1": "nan", "t.2.1.0": "inf", "a.0.1": "nan", "z": "-inf"}}
    finite = {"k": [1, 2.0, "é", None, True, {"n": 10**20}], "f": 0.1}
    assert dumps(finite, ensure_ascii=False, indent=1) == json.dumps(finite, ensure_ascii=False, indent=1)
    assert dumps([NAN, (1,)]) == "[null, [1]]"  # not an object: no reasons, as documented


# ---- aspire.train.state: checked, found correct --------------------------------------------------------------------
def test_linear_schedule_matches_transformers_from_the_peak_on_and_its_docstring_before():
    from transformers import get_linear_schedule_with_warmup

    warmup, total = 3, 10
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    theirs = get_linear_schedule_with_warmup(opt, warmup, total).lr_lambdas[0]
    ours = linear_schedule(warmup, total)
    assert [ours(s) for s in range(warmup)] == [1 / 4, 2 / 4, 3 / 4]
    for step in range(warmup, total + 2):
        assert math.isclose(ours(step), theirs(step), rel_tol=0, abs_tol=1e-12), step
    assert ours(total - 1) == 1 / (total - warmup)


def test_weights_digest_sees_one_ulp_and_scalar_and_bool_buffers():
    model = torch.nn.BatchNorm1d(3)  # a 0-dim long buffer (num_batches_tracked)
    model.register_buffer("flags", torch.tensor([True, False]))
    before = weights_digest(model)
    assert weights_digest(model) == before
    with torch.no_grad():
        model.weight[1] = torch.nextafter(model.weight[1], torch.tensor(2.0))
    assert weights_digest(model) != before
    model.num_batches_tracked += 1
    model.flags[1] = True
    assert len({before, weights_digest(model)}) == 2


def test_resume_config_read_back_from_its_yaml_is_unchanged_for_every_training_config(tmp_path):
    """Checked: `save_config` then `parse_yaml` (what --resume compares) gives no change for any training config, and
    changing a fixed setting is named."""
    from aspire.config import ConfigError, load_config, parse_yaml, save_config
    from aspire.train.config import Config

    checked = 0
    for path in sorted((REPO / "configs").glob("*.yaml")):
        try:
            cfg = load_config(Config, path)
        except ConfigError:  # not a training config (index, negatives, ensemble, ...)
            continue
        save_config(cfg, tmp_path / "c.yaml")
        saved = parse_yaml((tmp_path / "c.yaml").read_text(encoding="utf-8"), tmp_path / "c.yaml")
        check_resume_config(saved, cfg)
        checked += 1
    assert checked >= 20
    saved["train"]["lr"] = saved["train"]["lr"] * 2
    with pytest.raises(ValueError, match=r"train\.lr: "):
        check_resume_config(saved, cfg)


# ---- aspire.train.document_model: checked, found correct -----------------------------------------------------------
PAPERS = [{"paper_id": "p1", "title": "a title", "abstract": ["the model of text.", "we propose a new method."]},
          {"paper_id": "p2", "title": "", "abstract": ["results show the approach improves performance."]},
          {"paper_id": "p3", "title": "document similarity", "abstract": ["a b c.", "two sentences.", "three."]}]


@pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
@pytest.mark.parametrize("kind", list(KINDS))
def test_saved_then_loaded_model_gives_the_very_vectors_and_scores(kind, tiny_model_dir, examples_dir, tmp_path):
    from aspire.train.trainer import build_model
    from tests.test_train import tiny_config

    model = build_model(tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", f"model.kind={kind}"))
    torch.manual_seed(1)
    with torch.no_grad():  # off the pretrained weights, scorer parameters too
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "m")
    back = DocumentModel.from_pretrained(tmp_path / "m")
    assert back.model_cfg == model.model_cfg and back.abstract_cfg == model.abstract_cfg and back.tasks == model.tasks
    mine, theirs = model.state_dict(), back.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    a, b = model.encode(PAPERS), back.encode(PAPERS)
    assert torch.equal(a.emb, b.emb) and torch.equal(a.mask, b.mask)
    assert torch.equal(model.score(a, a), back.score(b, b))
    one = model.encode(PAPERS, batch_size=1)  # batching pads; the scores stay
    torch.testing.assert_close(model.score(one, one), model.score(a, a), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
def test_forward_weights_each_tasks_mean_over_its_own_counted_anchors(tiny_model_dir, examples_dir, tmp_path):
    """Checked against a loop: with task ids and weights, `loss` is sum_t w_t * (mean over task t's anchors that had a
    negative) of each term's per-anchor loss (round 14 checks those against loops over sentence pairs); `loss/<term>`
    the unweighted mean over every counted anchor; `task_rows` and `triples` the counts."""
    from tests.test_reliability_round14_docmodel import _batch

    model, examples, batch, _, _, _ = _batch("hybrid+ts", tiny_model_dir, examples_dir, tmp_path, "loss.negatives=all")
    B = len(batch)
    batch.task_ids = torch.tensor([i % 3 for i in range(B)])
    batch.task_ids[0] = 2
    batch.weights = torch.tensor([0.5, 2.0, 1.5])
    with torch.no_grad():
        out = model(batch)
        docs = model.embed(batch.inputs)
        anchors, positives = docs.index(torch.arange(B)), docs.index(torch.arange(B, 2 * B))
        from aspire.losses import in_batch_negative_mask

        allowed = in_batch_negative_mask(batch.group_ids, batch.pos_ids)
        per_term = {t: model._term_loss(t, batch, docs, anchors, positives, allowed) for t in model.terms}
    want, rows, counted = 0.0, [0, 0, 0], [False] * B
    for term, (loss, valid) in per_term.items():
        assert valid.any()
        for t in range(3):
            mine = [float(loss[i]) for i in range(B) if int(batch.task_ids[i]) == t and bool(valid[i])]
            want += float(batch.weights[t]) * (sum(mine) / len(mine) if mine else 0.0)
        counted = [c or bool(v) for c, v in zip(counted, valid)]
        all_valid = [float(loss[i]) for i in range(B) if valid[i]]
        assert out[f"loss/{term}"].item() == pytest.approx(sum(all_valid) / len(all_valid), rel=1e-6)
    for i in range(B):
        rows[int(batch.task_ids[i])] += counted[i]
    assert out["loss"].item() == pytest.approx(want, rel=1e-6)
    assert out["task_rows"].tolist() == rows and int(out["triples"]) == sum(counted)
