"""Round 61: a teacher folder records the bytes of the ACL file it encoded (`acl_sha256`), so a distill task refuses
it once that file was rewritten in place (the same path, the same ids, other texts): `check_source` compared paths,
and the same path passed whatever it now held, the vectors of the old texts read as the new ones' targets."""

from __future__ import annotations

import json
import shutil

import pytest

from aspire.checksum import file_sha256
from aspire.train.tasks import build_tasks
from aspire.train.teacher import META, check_source, load_teacher
from tests.test_reliability_round49_teacher import _acl, _cfg, _teacher

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def test_distill_refuses_a_teacher_whose_acl_file_was_rewritten_in_place(tiny_model_dir, examples_dir, tmp_path):
    """Before: the teacher of `acl.jsonl` was read after `acl.jsonl` was rewritten with other titles and abstracts
    under the same 12 ids (`os.path.samefile` passed), its neighbours those of the old texts. Now the error names
    teacher.json, the file and both digests; the file written back as it was is accepted again."""
    acl = _acl(tmp_path / "acl.jsonl")
    before = acl.read_bytes()
    teacher = _teacher(tiny_model_dir, acl, tmp_path / "teacher")
    digest = file_sha256(acl)
    _acl(acl, shift=3)  # the same path, the same ids, other texts
    with pytest.raises(ValueError, match=r"teacher\.json records acl_path .*acl\.jsonl.* of sha256 [0-9a-f]{12}.*, "
                                         r"the task reads .*acl\.jsonl.* of sha256 [0-9a-f]{12}"):
        build_tasks(_cfg(tiny_model_dir, examples_dir, tmp_path / "run", acl, teacher), "train")
    assert load_teacher(teacher).meta["acl_sha256"] == digest
    acl.write_bytes(before)
    assert build_tasks(_cfg(tiny_model_dir, examples_dir, tmp_path / "run2", acl, teacher), "train").parts[0].examples


def test_a_teacher_whose_acl_file_moved_is_compared_by_its_bytes(tiny_model_dir, tmp_path, caplog):
    """The recorded file gone (the folder copied to another machine): before, any file passed with a warning that
    nothing could be compared; now the task's file is compared with the recorded digest: a copy passes unsaid,
    another file is refused."""
    acl = _acl(tmp_path / "acl.jsonl")
    teacher = _teacher(tiny_model_dir, acl, tmp_path / "teacher")
    meta = load_teacher(teacher).meta
    moved = shutil.move(acl, tmp_path / "moved.jsonl")
    check_source(meta, teacher, str(moved), 0, "distill task")
    assert "cannot be compared" not in caplog.text
    other = _acl(tmp_path / "other.jsonl", shift=3)
    with pytest.raises(ValueError, match=r"teacher\.json records acl_path .*acl\.jsonl.*the task reads .*other\.jsonl"):
        check_source(meta, teacher, str(other), 0, "distill task")


@pytest.mark.parametrize("digest", [42, "", None])
def test_a_damaged_or_missing_digest(tiny_model_dir, tmp_path, caplog, digest):
    """A recorded digest that is no sha256 is refused naming the key; a folder written before it was recorded (no key)
    is compared by its path, as before."""
    acl = _acl(tmp_path / "acl.jsonl")
    teacher = _teacher(tiny_model_dir, acl, tmp_path / "teacher")
    meta = {k: v for k, v in json.loads((teacher / META).read_text()).items() if k != "acl_sha256"}
    if digest is None:
        check_source(meta, teacher, str(acl), 0, "distill task")  # the same path: accepted, unchanged
        with pytest.raises(ValueError, match=r"records acl_path .*acl\.jsonl.*the task reads .*other\.jsonl"):
            check_source(meta, teacher, str(_acl(tmp_path / "other.jsonl", shift=3)), 0, "distill task")
        return
    with pytest.raises(ValueError, match=r"teacher\.json records acl_sha256 .*, not a sha256"):
        check_source({**meta, "acl_sha256": digest}, teacher, str(acl), 0, "distill task")
