"""Round 49: a distill task refuses a teacher folder written from another ACL file or another sample (its
`teacher.json` was never compared with the task), and the teacher's rows are its own encode of the texts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from aspire.train.tasks import build_tasks
from aspire.train.teacher import IDS, META, VECTORS, load_teacher, main
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
WORDS = ["model", "results", "data", "task", "parser", "speech", "translation", "corpus"]


def _acl(path: Path, shift: int = 0, n: int = 12) -> Path:
    rows = [{"paper_id": f"Q{i}", "title": f"paper {WORDS[(i + shift) % 8]} {i}",
             "abstract": [f"{WORDS[(i + shift) % 8]} {WORDS[(i * 3) % 8]}.", f"{WORDS[(i + 1) % 8]} task."]}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _teacher(tiny_model_dir, acl: Path, out: Path) -> Path:
    assert main(["--teacher", str(tiny_model_dir), "--out", str(out), "--acl-path", str(acl), "--benchmarks-dir", "",
                 "--max-papers", "0", "--max-length", "32", "--batch-size", "4"]) == 0
    return out


def _cfg(tiny_model_dir, examples_dir, out, acl, teacher, max_papers=0):
    task = (f"{{name: distill, sources: [acl], acl_path: {acl}, benchmarks_dir: null, dev_share: 0.3, "
            f"max_papers: {max_papers}, teacher_dir: {teacher}, neighbours: 2, views: 1}}")
    return tiny_config(tiny_model_dir, examples_dir, out, "model.kind=abstract", "loss.kind=mnrl",
                       f"tasks=[{task}]", "data.dev_batches=1")


def test_distill_refuses_a_teacher_written_from_another_acl_file_with_the_same_ids(tiny_model_dir, examples_dir, tmp_path):
    """Before: the teacher of `other.jsonl` (same 12 ids, other titles and abstracts) was read for `acl.jsonl` without
    a word; its neighbours came from other texts. Now the error names teacher.json, acl_path and both files."""
    acl, other = _acl(tmp_path / "acl.jsonl"), _acl(tmp_path / "other.jsonl", shift=3)
    teacher = _teacher(tiny_model_dir, other, tmp_path / "teacher")
    with pytest.raises(ValueError, match=r"teacher\.json records acl_path .*other\.jsonl.*acl\.jsonl"):
        build_tasks(_cfg(tiny_model_dir, examples_dir, tmp_path / "run", acl, teacher), "train")
    same = shutil.copy(acl, tmp_path / "copy.jsonl")  # a byte-identical copy is the same texts: accepted
    ok = _teacher(tiny_model_dir, Path(same), tmp_path / "teacher-copy")
    assert build_tasks(_cfg(tiny_model_dir, examples_dir, tmp_path / "run2", acl, ok), "train").parts[0].examples


def test_distill_refuses_a_teacher_of_another_sample_and_reads_old_folders(tiny_model_dir, examples_dir, tmp_path):
    """max_papers recorded 5 and asked 7: refused naming both; 0 (every paper) covers any sample; a teacher.json
    without acl_path / max_papers (an older folder) is read as before."""
    acl = _acl(tmp_path / "acl.jsonl")
    teacher = _teacher(tiny_model_dir, acl, tmp_path / "teacher")
    meta = json.loads((teacher / META).read_text())
    assert build_tasks(_cfg(tiny_model_dir, examples_dir, tmp_path / "a", acl, teacher, max_papers=7), "train")
    (teacher / META).write_text(json.dumps({**meta, "max_papers": 5}))
    with pytest.raises(ValueError, match=r"teacher\.json records max_papers 5, the task asks for 7"):
        build_tasks(_cfg(tiny_model_dir, examples_dir, tmp_path / "b", acl, teacher, max_papers=7), "train")
    (teacher / META).write_text(json.dumps({k: v for k, v in meta.items() if k not in ("acl_path", "max_papers")}))
    assert build_tasks(_cfg(tiny_model_dir, examples_dir, tmp_path / "c", acl, teacher, max_papers=7), "train")


def test_teacher_rows_are_its_own_encode_and_a_damaged_folder_names_its_file(tiny_model_dir, tmp_path):
    """Checked, correct: rows equal the tiny model's own unit encode of "title abstract"; a truncated vectors.npy
    and a missing ids.json are errors naming the file."""
    from aspire.data.papers import abstract_text
    from aspire.encoders import ContextualSentenceEncoder

    acl = _acl(tmp_path / "acl.jsonl")
    teacher = load_teacher(_teacher(tiny_model_dir, acl, tmp_path / "t"))
    rows = {r["paper_id"]: r for r in map(json.loads, acl.read_text().splitlines())}
    enc = ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir), max_length=32)
    texts = [abstract_text(rows[p]["title"], rows[p]["abstract"], " ") for p in teacher.ids]
    np.testing.assert_allclose(teacher.vectors, enc.embed_texts(texts, normalize=True, max_length=32).numpy(), atol=1e-5)
    broken = Path(shutil.copytree(tmp_path / "t", tmp_path / "broken"))
    data = (broken / VECTORS).read_bytes()
    (broken / VECTORS).write_bytes(data[: len(data) - 40])
    with pytest.raises(ValueError, match=r"broken/vectors\.npy does not read as an array"):
        load_teacher(broken)
    (broken / IDS).unlink()
    with pytest.raises(FileNotFoundError, match=r"broken/ids\.json is missing"):
        load_teacher(broken)
