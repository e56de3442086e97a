"""`aspire index` merge and saving a generation: what a user meets running them.

- A merged index's rejected.jsonl held its shards' records without the `corpus` a built or extended index's records
  carry, and its duplicate paper ids (met in two shards, or twice in an encoded corpus) without `line` or `corpus`;
  every rejected record has the same keys now: `line`, `paper_id`, `reason`, `corpus`.
- When CURRENT could not be written and CURRENT was no file (a folder, say), the clean-up's own IndexFormatError
  replaced the error that stopped the write and the new generation stayed behind; the write's error is raised now and
  the new generation removed.
"""

from __future__ import annotations

import pytest

from aspire.index.disk import IndexFormatError
from aspire.index.store import begin_generation, publish_generation

# ---- 2. a failed pointer write raises its own error and removes the new generation -------------------------------


@pytest.mark.parametrize("how", ["folder in CURRENT's place", "full disk, then a folder"])
def test_a_failed_pointer_write_raises_its_error_and_removes_the_new_generation(tmp_path, monkeypatch, how):
    root = tmp_path / "idx"
    root.mkdir()
    tmp = begin_generation(root)
    (tmp / "vectors.npy").write_bytes(b"filled")
    if how == "full disk, then a folder":
        def full(path, text):
            (root / "CURRENT").mkdir()  # what else happened meanwhile: CURRENT, no file, names no generation
            raise OSError(28, "No space left on device")

        monkeypatch.setattr("aspire.index.store._write_atomic", full)
        expected = "No space left on device"
    else:
        (root / "CURRENT").mkdir()
        expected = "Is a directory"
    with pytest.raises(OSError, match=expected) as raised:
        publish_generation(root, tmp)
    assert not isinstance(raised.value, IndexFormatError)
    assert sorted(p.name for p in root.iterdir()) == ["CURRENT"], sorted(p.name for p in root.iterdir())
