"""Round 55: `save_checkpoint`'s `best` record is checked before anything is written."""

from pathlib import Path

import numpy as np
import pytest

from aspire.train import checkpoint as ckpt


def _write(d: Path) -> None:
    (d / ckpt.MODEL_DIR).mkdir()
    (d / ckpt.MODEL_DIR / "w.txt").write_text("w")


def _listing(out: Path) -> dict:
    return {p.relative_to(out).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(out.rglob("*"))}


def _record(step: int, **extra) -> dict:
    return {"checkpoint": ckpt.checkpoint_name(step), "step": step, "dev_loss": 0.5, **extra}


@pytest.mark.parametrize("best, key", [
    ([1, 2], "dict"),                                                             # AttributeError before
    ({"checkpoint": "checkpoint-000001", "step": True, "dev_loss": 0.5}, "step"),   # written, refused at resume
    ({"checkpoint": "checkpoint-000001", "step": 1.0, "dev_loss": 0.5}, "step"),    # written, refused at resume
    ({"checkpoint": "checkpoint-000000", "step": 1, "dev_loss": 0.5}, "checkpoint"),
    ({"checkpoint": "checkpoint-000001", "step": 1}, "dev_loss"),
    ({"checkpoint": "checkpoint-000001", "step": 1, "dev_loss": float("nan")}, "dev_loss"),
    ({"checkpoint": "checkpoint-000001", "step": 1, "dev_loss": "0.5"}, "dev_loss"),
    (_record(1, **{"dev_loss/x": np.float32(0.5)}), "dev_loss/x"),  # TypeError after the rename before
])
def test_a_bad_best_record_is_refused_before_anything_is_written(tmp_path, best, key):
    ckpt.save_checkpoint(tmp_path, 0, _write, {"step": 0}, best=_record(0))
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=key):
        ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1}, best=best)
    assert _listing(tmp_path) == before
    assert ckpt.read_pointer(tmp_path)["step"] == 0
    assert ckpt.read_pointer(tmp_path, ckpt.BEST) == _record(0)


def test_a_good_best_record_is_written_and_read_back(tmp_path):
    """Checked, correct: the record comes back as given (numpy float64 and int losses are JSON numbers)."""
    ckpt.save_checkpoint(tmp_path, 3, _write, {"step": 3}, best=_record(3, **{"dev_loss/a": np.float64(0.25)}))
    assert ckpt.read_pointer(tmp_path, ckpt.BEST) == _record(3, **{"dev_loss/a": 0.25})
    ckpt.save_checkpoint(tmp_path, 4, _write, {"step": 4}, best={"checkpoint": "checkpoint-000004", "step": 4,
                                                                  "dev_loss": 0})
    assert ckpt.read_pointer(tmp_path, ckpt.BEST)["step"] == 4
    assert ckpt.read_pointer(tmp_path)["step"] == 4


def test_a_failure_while_writing_leaves_no_half_checkpoint_and_latest_unchanged(tmp_path):
    """Checked, correct: a write_contents that raises mid-way leaves the folder as it was (no temp, no checkpoint)."""
    ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1}, best=_record(1))
    before = _listing(tmp_path)

    def broken(d: Path) -> None:
        _write(d)
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError):
        ckpt.save_checkpoint(tmp_path, 2, broken, {"step": 2}, best=_record(2))
    assert _listing(tmp_path) == before
