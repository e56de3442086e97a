"""Round 32: distillation teachers (`aspire.train.teacher`) and training checkpoints (`aspire.train.checkpoint`),
checked against a direct encode of the same texts, torch's own optimizer / scheduler state and hand-built folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.train import checkpoint as ckpt
from aspire.train.teacher import IDS, META, SENTENCES, VECTORS, load_teacher, main

WORDS = ["model", "results", "data", "task", "parser", "speech", "translation", "corpus"]


def _unit(n: int, d: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, d))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _write_teacher(path: Path, vectors: np.ndarray, meta: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / VECTORS, vectors)
    (path / IDS).write_text(json.dumps([f"p{i}" for i in range(len(vectors))]))
    (path / META).write_text(json.dumps(meta if meta is not None else {"teacher": "tiny"}))
    return path


# ---- teacher vectors are a direct encode of the same texts --------------------------------------------------------
def test_teacher_vectors_are_a_direct_encode_of_title_space_abstract_at_any_batch_size(tiny_model_dir, tmp_path):
    """Checked, correct: each row is the unit-length mean-pooled vector of "title abstract" (a space between), in
    ids.json's order, and the batch size changes nothing (abstracts of different lengths pad differently)."""
    from aspire.data.papers import abstract_text
    from aspire.encoders import ContextualSentenceEncoder

    rows = [{"paper_id": f"Q{i}", "title": f"paper {WORDS[i % 8]} {i}",
             "abstract": [f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]} " * (i % 4 + 1) + ".", f"{WORDS[(i + 1) % 8]} task."]}
            for i in range(9)]
    acl = tmp_path / "acl.jsonl"
    acl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    built = {}
    for batch in (1, 4):
        out = tmp_path / f"t{batch}"
        assert main(["--teacher", str(tiny_model_dir), "--out", str(out), "--acl-path", str(acl), "--sentences",
                     "--benchmarks-dir", "", "--max-papers", "0", "--max-length", "32", "--batch-size", str(batch)]) == 0
        built[batch] = load_teacher(out)
    one, four = built[1], built[4]
    assert one.ids == four.ids and sorted(one.ids) == sorted(r["paper_id"] for r in rows)
    np.testing.assert_allclose(one.vectors, four.vectors, atol=1e-6)
    np.testing.assert_allclose(one.sentences, four.sentences, atol=1e-6)
    by_id = {r["paper_id"]: r for r in rows}
    encoder = ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir), max_length=32)
    texts = [abstract_text(by_id[pid]["title"], by_id[pid]["abstract"], " ") for pid in one.ids]
    assert texts[0].startswith(by_id[one.ids[0]]["title"] + " ")
    direct = encoder.embed_texts(texts, normalize=True, max_length=32, batch_size=3).numpy()
    np.testing.assert_allclose(one.vectors, direct, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(one.vectors, axis=1), 1.0, atol=1e-5)
    alone = encoder.embed_texts([t for _, t in one.sentence_texts], normalize=True, max_length=32).numpy()
    np.testing.assert_allclose(one.sentences, alone, atol=1e-5)
    assert one.meta["dim"] == 32 and one.meta["papers"] == 9 and one.meta["joiner"] == " "


# ---- a damaged array file is refused naming it --------------------------------------------------------------------
def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-20])  # the last 5 of 12 values


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _npz(path: Path) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, a=_unit(3, 4))


@pytest.mark.parametrize(("damage", "said"), [
    (_truncate, r"does not read as an array \(ValueError: cannot reshape"),
    (_empty, r"does not read as an array \(EOFError"),
    (_npz, r"holds a NpzFile, not a float array"),
    (lambda p: np.save(p, np.array([["1", "0", "0", "0"]] * 3)), r"holds an array of <U1, not a float array"),
    (lambda p: np.save(p, np.eye(3, 4, dtype=bool)), r"holds an array of bool, not a float array"),
    (lambda p: np.save(p, np.eye(3, 4, dtype=np.complex64)), r"holds an array of complex64, not a float array"),
])
@pytest.mark.parametrize("name", [VECTORS, SENTENCES])
def test_a_teacher_array_that_does_not_read_as_a_float_array_is_refused_naming_it(tmp_path, damage, said, name):
    """A truncated vectors.npy failed with numpy's "cannot reshape array of size 43 into shape (12,32)" (or an
    EOFError) naming no file; an .npz archive under the name with an AttributeError; strings "1", "0" and booleans were
    read as numbers, complex values cast to real with a warning."""
    path = _write_teacher(tmp_path / "t", _unit(3, 4))
    np.save(path / SENTENCES, _unit(3, 4, seed=1))
    (path / "sentences.json").write_text(json.dumps([[0, "a sentence."]] * 3))
    assert load_teacher(path).sentences.shape == (3, 4)
    damage(path / name)
    with pytest.raises(ValueError, match=rf"teacher vectors: .*{name} {said}"):
        load_teacher(path)


def test_a_float64_teacher_array_still_loads_as_float32(tmp_path):
    path = _write_teacher(tmp_path / "t", _unit(3, 4).astype(np.float64))
    teacher = load_teacher(path)
    assert teacher.vectors.dtype == np.float32 and teacher.vectors.shape == (3, 4)


@pytest.mark.parametrize(("meta", "said"), [
    ({"teacher": "mpnet", "papers": 3, "dim": 8}, r"records dim 8 \(the vectors hold 4\)"),
    ({"teacher": "mpnet", "papers": 5, "dim": 4}, r"records papers 5 \(the vectors hold 3\)"),
    ({"papers": "3", "dim": 4}, r"records papers '3' \(the vectors hold 3\)"),
    ({"papers": 3, "dim": True}, r"records dim True \(the vectors hold 4\)"),
])
def test_teacher_json_counts_that_the_vectors_do_not_hold_are_refused(tmp_path, meta, said):
    """teacher.json of an mpnet teacher (dim 8) beside a 4-wide vectors.npy copied in from another teacher was read
    under the mpnet name and fingerprint (the distill task reports both in its stats)."""
    with pytest.raises(ValueError, match=rf"teacher\.json {said}: the folder mixes two teachers' files"):
        load_teacher(_write_teacher(tmp_path / "t", _unit(3, 4), meta))
    assert load_teacher(_write_teacher(tmp_path / "ok", _unit(3, 4), {"papers": 3, "dim": 4})).meta["dim"] == 4
    assert load_teacher(_write_teacher(tmp_path / "bare", _unit(3, 4), {})).vectors.shape == (3, 4)  # not recorded


# ---- checkpoints --------------------------------------------------------------------------------------------------
def _trained(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (s + 1))
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return model, optimizer, scheduler


def test_checkpoint_save_then_load_gives_back_weights_optimizer_scheduler_and_step(tmp_path):
    """Checked, correct: torch's own load_state_dict of what `load_state` reads gives the same moments and rate."""
    model, optimizer, scheduler = _trained()
    state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "step": 3}
    final = ckpt.save_checkpoint(tmp_path, 3, lambda p: torch.save(model.state_dict(), p / "w.pt"), state)
    assert final == tmp_path / "checkpoint-000003"
    assert ckpt.read_pointer(tmp_path) == {"checkpoint": "checkpoint-000003", "step": 3}
    loaded = ckpt.load_state(final)
    model2, optimizer2, scheduler2 = _trained(seed=1)
    model2.load_state_dict(torch.load(final / "w.pt"))
    optimizer2.load_state_dict(loaded["optimizer"])
    scheduler2.load_state_dict(loaded["scheduler"])
    assert loaded["step"] == 3
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(optimizer.state_dict()["state"][0][key], optimizer2.state_dict()["state"][0][key])
    assert scheduler2.get_last_lr() == scheduler.get_last_lr() and scheduler2.last_epoch == 3


@pytest.mark.parametrize("step", [-1, np.int64(5), True, 2.0])
def test_save_checkpoint_refuses_a_step_that_is_not_a_whole_number_before_writing(tmp_path, step):
    """-1 wrote checkpoint--00001 and a `latest` that read_pointer calls damaged (the run could not resume); a numpy
    integer left checkpoint-000005 behind a TypeError from json, no pointer naming it; True wrote `"step": true`."""
    with pytest.raises(ValueError, match=r"checkpoint step must be an integer >= 0, got"):
        ckpt.save_checkpoint(tmp_path, step, lambda p: None, {"step": 0})
    assert list(tmp_path.iterdir()) == []


def test_latest_at_a_missing_or_partial_checkpoint_is_refused_naming_it(tmp_path):
    """Checked, correct."""
    for step in (1, 2):
        ckpt.save_checkpoint(tmp_path, step, lambda p: None, {"step": step})
    (tmp_path / "checkpoint-000002" / ckpt.STATE_FILE).unlink()  # copied in part
    with pytest.raises(FileNotFoundError, match=r"latest points at checkpoint-000002, which has no trainer_state\.pt"):
        ckpt.read_pointer(tmp_path)
    shutil.rmtree(tmp_path / "checkpoint-000002")
    with pytest.raises(FileNotFoundError, match=r"latest points at checkpoint-000002"):
        ckpt.read_pointer(tmp_path)


def test_pruning_keeps_the_newest_by_step_and_never_the_best_or_latest(tmp_path):
    """Checked, correct: keep_checkpoints=1 keeps the newest by step (checkpoint-1000000 after checkpoint-999999) and
    the best's, whatever their age; keep 0 keeps the two pointers' alone."""
    steps = [5, 999999, 1000000]
    for step in steps:
        best = {"checkpoint": ckpt.checkpoint_name(step), "step": step, "dev_loss": 0.5} if step == 5 else None
        ckpt.save_checkpoint(tmp_path, step, lambda p: None, {"step": step}, best=best)
    (tmp_path / "checkpoint-000007-copy").mkdir()
    ckpt.prune_checkpoints(tmp_path, 1)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [
        "checkpoint-000005", "checkpoint-000007-copy", "checkpoint-1000000"]
    ckpt.save_checkpoint(tmp_path, 1000001, lambda p: None, {"step": 1000001})
    ckpt.prune_checkpoints(tmp_path, 0)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [
        "checkpoint-000005", "checkpoint-000007-copy", "checkpoint-1000001"]
    assert ckpt.read_pointer(tmp_path, ckpt.BEST)["checkpoint"] == "checkpoint-000005"
