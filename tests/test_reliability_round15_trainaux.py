"""Round-15 checks of the training side tools against independent references: a resume's changed loss term scales
(a mapping setting was compared key by key from the saved side only, so a scale added on resume went unseen), the
weights digest against a hand-written sha256 (a 0-dim tensor made it raise at the end of a run), the teacher's
sentence rows and paper ids (malformed ones were read as garbage), and the loss terms' aligned-pair values against
the diagonal of their all-pairs matrices."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.config import to_dict
from aspire.train.config import Config, LossConfig, ModelConfig
from aspire.train.state import check_resume_config, weights_digest
from aspire.train.teacher import IDS, META, SENTENCE_TEXTS, SENTENCES, VECTORS, load_teacher
from aspire.train.terms import CosineTerm, PassCosine, ScorerDist, VectorDist, make_scorer


# ---- resume: a setting that holds a mapping is compared whole ------------------------------------------------------
def mnrl(term_scale: dict | None = None) -> Config:  # kind hybrid+ts: terms aligned, whole and facet
    return Config(model=ModelConfig(kind="hybrid+ts"), loss=LossConfig(kind="mnrl", term_scale=term_scale or {}))


@pytest.mark.parametrize(("saved", "now", "said"), [
    ({}, {"aligned": 0.5}, "loss.term_scale: {} -> {'aligned': 0.5}"),
    ({"aligned": 0.5}, {"aligned": 0.5, "whole": 3.0}, "loss.term_scale: {'aligned': 0.5} -> {'aligned': 0.5, "),
    ({"aligned": 0.5}, {}, "loss.term_scale: {'aligned': 0.5} -> {}"),
])
def test_resume_refuses_a_loss_term_scale_added_or_removed(saved, now, said):
    """The loss reads term_scale from the config given to --resume: an added scale changed the loss unsaid (only the
    saved side's keys were compared, and {} has none)."""
    with pytest.raises(ValueError, match=re.escape(f"would not continue the same run: {said}")):
        check_resume_config(to_dict(mnrl(saved)), mnrl(now))


def test_resume_check_still_passes_the_same_config_and_one_saved_before_a_setting_existed():
    check_resume_config(to_dict(mnrl({"aligned": 0.5})), mnrl({"aligned": 0.5}))
    old = to_dict(mnrl())
    del old["loss"]["teacher_scale"], old["mix"]["mode"]  # written by a version without these settings
    check_resume_config(old, mnrl())
    gone = to_dict(mnrl())
    gone["loss"]["old_setting"] = 1  # a setting the config no longer has is still named
    with pytest.raises(ValueError, match=r"loss\.old_setting: 1 -> '\(no such setting\)'"):
        check_resume_config(gone, mnrl())
    with pytest.raises(ValueError, match=r"model\.adapter\.r: 8 -> 4"):  # nested sections: setting by setting
        changed = mnrl()
        changed.model.adapter.r = 4
        check_resume_config(to_dict(mnrl()), changed)


# ---- the weights digest ------------------------------------------------------------------------------------------
def hand_digest(module: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name in sorted(module.state_dict()):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(module.state_dict()[name].detach().numpy()).tobytes())
    return digest.hexdigest()


def test_weights_digest_reads_scalar_tensors_and_is_the_hand_written_sha256():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))  # num_batches_tracked: 0-dim int64
    model[0].weight.data = model[0].weight.data.t().contiguous().t()  # a non-contiguous parameter
    model.temperature = torch.nn.Parameter(torch.tensor(0.07))  # a 0-dim float parameter
    assert weights_digest(model) == hand_digest(model)  # raised "self.dim() cannot be 0 to view Long as Byte"
    plain = torch.nn.Linear(4, 3)  # no 0-dim tensor: the digest is the one earlier runs logged
    assert weights_digest(plain) == hand_digest(plain)
    before = weights_digest(model)
    with torch.no_grad():
        model.temperature += 1e-6
    assert weights_digest(model) != before


# ---- the teacher's files -----------------------------------------------------------------------------------------
def write_teacher(path, ids, texts) -> None:
    path.mkdir(parents=True, exist_ok=True)
    vectors = np.eye(len(ids), 3, dtype=np.float32)
    np.save(path / VECTORS, vectors)
    np.save(path / SENTENCES, vectors)
    (path / IDS).write_text(json.dumps(ids))
    (path / META).write_text(json.dumps({"teacher": "tiny"}))
    (path / SENTENCE_TEXTS).write_text(json.dumps(texts))


def test_teacher_sentence_rows_round_trip(tmp_path):
    write_teacher(tmp_path, ["p1", "p2"], [[0, "we show."], [2, "a third one."]])
    teacher = load_teacher(tmp_path)
    assert teacher.sentence_texts == [(0, "we show."), (2, "a third one.")]


@pytest.mark.parametrize(("texts", "said"), [
    ([[0, "we show."], [-1, "the last sentence."]], r"row 1 \(paper 'p2'\): not \[position >= 0, sentence text\]"),
    ([[0, "we show."], ["2", "a text."]], r"row 1 \(paper 'p2'\)"),
    ([[0, "we show."], [3]], r"row 1 \(paper 'p2'\)"),
    ([[0, "we show.", "extra"], [1, "b"]], r"row 0 \(paper 'p1'\)"),
    ([[True, "we show."], [1, "b"]], r"row 0 \(paper 'p1'\)"),
    ({"ab": [0, "x"], "cd": [1, "y"]}, r"holds a JSON dict, not a list of \[position, text\] rows"),
])
def test_teacher_refuses_a_sentence_row_that_is_not_a_position_and_a_text(tmp_path, texts, said):
    """A dict was read key by key ("ab" -> ('a', 'b')), a negative position picked a sentence from the abstract's
    end, a short row failed later in the distill task naming no file."""
    write_teacher(tmp_path, ["p1", "p2"], texts)
    with pytest.raises(ValueError, match=said):
        load_teacher(tmp_path)


def test_teacher_refuses_a_paper_id_that_is_not_a_string(tmp_path):
    write_teacher(tmp_path, ["p1", 1045], [[0, "a"], [0, "b"]])  # every row then read as "no teacher vector"
    with pytest.raises(ValueError, match=r"ids\.json, row 1: a paper id is a string, got int 1045"):
        load_teacher(tmp_path)


# ---- the loss terms: the aligned pairs are the diagonal of all pairs ---------------------------------------------
def doc_batch(gen: torch.Generator, sentences: int) -> DocBatch:
    emb = torch.randn(4, sentences, 8, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, sentences, dtype=torch.bool)
    if sentences > 2:
        mask[1, 2:] = False
        mask[2, 1:] = False
    whole = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    return DocBatch(emb * mask[..., None], mask, list("abcd"), [["s"] * sentences] * 4, whole)


def test_every_terms_pairwise_values_are_the_diagonal_of_its_matrix():
    gen = torch.Generator().manual_seed(0)
    single = (doc_batch(gen, 1), doc_batch(gen, 1))
    multi = (doc_batch(gen, 5), doc_batch(gen, 5))
    terms = [(VectorDist(), single), (CosineTerm(), single), (PassCosine("whole"), multi), (PassCosine("facet"), multi)]
    for name in ("minl2", "ot", "attention"):
        cfg = ModelConfig(kind={"minl2": "ts", "ot": "ot", "attention": "attention"}[name])
        terms.append((ScorerDist(make_scorer(name, cfg).double(), name), multi))
    for term, (a, b) in terms:
        dist = term.dist(a, b)
        assert torch.allclose(dist.diagonal(), term.pairwise_dist(a, b), atol=1e-10), term.name
        assert torch.allclose(term.sim(a, b).diagonal(), term.pairwise_sim(a, b), atol=1e-10), term.name
    cos = CosineTerm()
    a, b = single
    by_hand = torch.nn.functional.normalize(a.emb[:, 0], dim=-1) @ torch.nn.functional.normalize(b.emb[:, 0], dim=-1).T
    assert torch.allclose(cos.sim(a, b), by_hand) and torch.allclose(cos.dist(a, b), 1 - by_hand)
