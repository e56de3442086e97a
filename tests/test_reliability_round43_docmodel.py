"""Round 43, the document model: a saved file whose `model.kind` is not a string named (it was a bare TypeError),
task ids out of the batch's weights refused naming the rows (they were one_hot's RuntimeError), and checks that
found nothing wrong (kinds `max` and `cocite_vector` against loops over the encoder's own vectors, gradients finite
and reaching the encoder, in-batch negatives never the anchor's own positive, an unknown kind refused)."""

from __future__ import annotations

import json

import pytest
import torch

from aspire.train.document_model import read_model_file
from tests.test_reliability_round14_docmodel import _batch

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


@pytest.mark.parametrize("kind", [["ts"], {"name": "ts"}])
def test_read_model_file_names_the_file_for_a_kind_that_is_not_a_string(kind, tmp_path):
    """`settings.get("kind") in KINDS` with a list or an object was `TypeError: unhashable type: 'list'`, naming
    neither the file nor the key."""
    file = tmp_path / "document_model.json"
    file.write_text(json.dumps({"model": {"kind": kind}}))
    with pytest.raises(ValueError, match=rf"{file}: in `model`: .*kind"):
        read_model_file(file)


@pytest.mark.parametrize("ids, weights", [([0, 1, 0, 1, 0, 1, 0, 3], [1.0, 2.0]), ([0, 0, 0, 0, 0, 0, 0, 1], None),
                                          ([0, 1, 0, 1, 0, 1, 0, -1], [1.0, 2.0])])
def test_forward_refuses_task_ids_out_of_the_weights_naming_the_rows(ids, weights, tiny_model_dir, examples_dir,
                                                                       tmp_path):
    """A task id past the batch's weights (or any id but 0 without weights, or a negative one) was one_hot's
    'RuntimeError: Class values must be smaller than num_classes', naming no row."""
    model, _, batch, _, _, _ = _batch("max", tiny_model_dir, examples_dir, tmp_path)
    batch.task_ids = torch.tensor(ids)
    batch.weights = None if weights is None else torch.tensor(weights)
    with pytest.raises(ValueError, match=r"batch rows \[7\]: task ids \[-?\d\] out of range for the batch's \d task"):
        model(batch)


# ---- checked, found correct ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["max", "cocite_vector"])
def test_triplet_loss_equals_a_hinge_over_distances_from_the_encoders_own_vectors(kind, tiny_model_dir, examples_dir,
                                                                                   tmp_path):
    """`max`: min over real sentence pairs of the L2 distance; `cocite_vector`: L2 of the mean of the real sentence
    vectors (from the encoder itself, not `embed`); the loss mean(max(0, d+ - d- + margin)) over anchors with a
    negative, the negative never the anchor's own positive (nor one of its `members`)."""
    model, examples, batch, out, _, neg = _batch(kind, tiny_model_dir, examples_dir, tmp_path)
    B = len(examples)
    with torch.no_grad():
        raw = model.encoder(batch.inputs)

    def dist(i, j):
        a, b = raw.emb[i][raw.mask[i]], raw.emb[j][raw.mask[j]]
        if kind == "cocite_vector":
            return float((a.mean(0) - b.mean(0)).norm())
        return min(float((x - y).norm()) for x in a for y in b)

    want = []
    for i in range(B):
        if neg[i] is None:
            continue
        assert neg[i] != B + i and examples[neg[i] - B].positive_id != examples[i].positive_id
        assert examples[neg[i] - B].positive_id not in examples[i].members
        want.append(max(0.0, dist(i, B + i) - dist(i, neg[i]) + 0.3))
    assert want
    assert out["loss"].item() == pytest.approx(sum(want) / len(want), rel=1e-5)


@pytest.mark.parametrize("kind", ["ts", "ot", "att", "hybrid+ts"])
def test_gradients_are_finite_and_reach_the_encoder(kind, tiny_model_dir, examples_dir, tmp_path):
    model, _, batch, _, _, _ = _batch(kind, tiny_model_dir, examples_dir, tmp_path, "loss.margin=5.0")
    model.train()
    model(batch)["loss"].backward()
    grads = [p.grad for p in model.encoder.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads if g is not None)
    assert sum(float(g.abs().sum()) for g in grads if g is not None) > 0


def test_an_unknown_kind_is_refused_listing_the_valid_ones():
    from aspire.train.config import ModelConfig
    from aspire.train.document_model import DocumentModel

    cfg = ModelConfig()
    cfg.kind = "nope"  # as a config built in code, not read (the config's own check refuses it there)
    with pytest.raises(ValueError, match=r"unknown model kind 'nope'; valid kinds: \['abs', 'abstract', 'att'"):
        DocumentModel(torch.nn.Linear(1, 1), cfg)
