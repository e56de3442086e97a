"""Training records and resume: the models an interpolation or a soup records, as a later command in another folder
reads them, and a distillation run's teacher vectors, which a resumed run may not read changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.encoders.pretrained import resolve_model
from aspire.train import checkpoint as ckpt
from aspire.train.config import example_files
from aspire.train.export import _recorded_bases
from aspire.train.interpolate import RECORD_FILE, interpolate, soup
from aspire.train.teacher import main as teacher_main
from aspire.train.trainer import METRICS, run
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
FAST = ("model.kind=max", "data.use_dev=false", "train.max_steps=2", "train.save_every=1", "train.warmup_steps=0")
TEACHER = ("vectors.npy", "ids.json", "teacher.json")
WORDS = ["model", "results", "data", "task", "paper", "sentence", "learning", "text"]


# ---- interpolation records ----------------------------------------------------------------------------------
@pytest.fixture()
def work(tiny_model_dir, examples_dir, tmp_path, monkeypatch) -> Path:
    """`work/a` and `work/b`: two one-step runs of the tiny model (two seeds), the working directory `work/sub`, from
    which `../a` names the first relatively."""
    work = tmp_path / "work"
    for name, seed in (("a", 0), ("b", 1)):
        run(tiny_config(tiny_model_dir, examples_dir, work / name, *FAST, "train.max_steps=1", f"train.seed={seed}"))
    (work / "sub").mkdir()
    monkeypatch.chdir(work / "sub")
    return work


def _model(run_dir: Path) -> Path:
    return run_dir / ckpt.checkpoint_name(1) / ckpt.MODEL_DIR


def _record(folder: Path) -> dict:
    return json.loads((folder / RECORD_FILE).read_text())


def test_interpolate_records_a_relative_model_as_its_absolute_folder(work, tiny_model_dir, tmp_path, monkeypatch):
    interpolate("../a/checkpoint-000001/model", 0.5, work / "wise")  # its record held the path as given
    record = _record(work / "wise")
    assert record["model"] == str(Path.cwd().parent / "a/checkpoint-000001/model")  # was "../a/checkpoint-000001/model"
    interpolate("../b", 0.5, work / "wise-b")  # a run's folder: the checkpoint interpolated, not the run's best later
    assert _record(work / "wise-b")["model"] == str(Path.cwd().parent / "b/checkpoint-000001/model")  # was "../b/..."
    monkeypatch.chdir(tmp_path)  # read back from another folder: the same models
    assert resolve_model(record["model"]).resolve() == _model(work / "a").resolve()
    assert tiny_model_dir.resolve() in {path for path, _ in _recorded_bases(work / "wise").values()}


def test_a_soup_records_its_relative_members_as_their_absolute_folders(work, tmp_path, monkeypatch):
    """`soup`, `members`, `weights` and a soup of soups' leaves: each a path that loads from any folder (a relative
    `../a/...` was read against the working directory of whichever command read the record)."""
    inner = soup(["../a", "../b/checkpoint-000001/model"], work / "soup")
    a, b = (str(Path.cwd().parent / name / "checkpoint-000001/model") for name in "ab")
    record = _record(inner)
    assert record["soup"] == [a, b] and list(record["members"]) == [a, b]  # were "../a/checkpoint-000001/model", ...
    assert record["weights"] == pytest.approx({a: 0.5, b: 0.5})
    interpolate("../a", 0.5, work / "wise")
    monkeypatch.chdir(tmp_path)
    nested = _record(soup(["work/soup", "work/wise"], work / "nested"))
    assert nested["soup"] == [str(work / "soup"), str(work / "wise")]  # were "work/soup", "work/wise"
    assert nested["weights"] == pytest.approx({a: 0.25, b: 0.25, str(work / "wise"): 0.5})
    for name in nested["weights"]:
        assert (resolve_model(name) / "config.json").is_file()


# ---- a distillation run's teacher vectors -------------------------------------------------------------------
@pytest.fixture(scope="module")
def teacher(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(an ACL file of 20 papers, a teacher folder of them with sentence vectors), written once for the module."""
    root = tmp_path_factory.mktemp("teacher")
    acl = root / "acl.jsonl"
    acl.write_text("".join(json.dumps({"paper_id": f"Q{i}", "title": f"paper {WORDS[i % 8]} {i}", "abstract": [
        f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]}.", f"{WORDS[(i + 1) % 8]} task."]}) + "\n" for i in range(20)))
    assert teacher_main(["--teacher", str(tiny_model_dir), "--out", str(root / "vectors"), "--acl-path", str(acl),
                         "--sentences", "--benchmarks-dir", "", "--max-papers", "0", "--max-length", "32"]) == 0
    return acl, root / "vectors"


def _distill(tiny_model_dir, examples_dir, out, acl, teacher_dir, *more):
    task = (f"{{name: distill, sources: [acl], acl_path: {acl}, benchmarks_dir: null, dev_share: 0.3, "
            f"teacher_dir: {teacher_dir}, neighbours: 3, views: 2}}")
    return tiny_config(tiny_model_dir, examples_dir, out, *FAST, "model.kind=abstract", "loss.kind=mnrl",
                       f"tasks=[{{name: cocite}}, {task}]", *more)


def test_a_distill_run_records_its_teachers_files(tiny_model_dir, examples_dir, teacher, tmp_path):
    acl, vectors = teacher
    files = dict((p, s) for s, p in example_files(_distill(tiny_model_dir, examples_dir, tmp_path, acl, vectors)))
    assert {p.name: s for p, s in files.items() if p.parent == vectors} == {  # were none of them
        name: "tasks[1].teacher_dir" for name in (*TEACHER, "sentences.npy", "sentences.json")}
    assert files[acl] == "tasks[1].acl_path" and files[examples_dir / "examples.train.jsonl"] == "data.examples_dir"


@pytest.mark.parametrize("name", ["vectors.npy", "ids.json", "sentences.npy"])
def test_a_resume_whose_teacher_was_rewritten_is_refused_naming_the_file(tiny_model_dir, examples_dir, teacher,
                                                                         tmp_path, name):
    """The teacher folder written again between a run and its resume (other papers' vectors under the same ids, the
    ids in another order, other sentence vectors): the resumed steps took other neighbours and soft targets, unsaid.
    Each rewrite still loads as a whole teacher of the same ACL file (what the distill task's own check compares);
    the vectors and ids are changed in a teacher without sentences, whose texts would betray reordered ids."""
    acl, vectors = teacher
    vectors = shutil.copytree(vectors, tmp_path / "teacher")
    if name != "sentences.npy":
        for extra in ("sentences.npy", "sentences.json"):
            (vectors / extra).unlink()
    out = tmp_path / "run"
    run(_distill(tiny_model_dir, examples_dir, out, acl, vectors, "train.stop_after=1"))
    metrics = (out / METRICS).read_text()
    if name.endswith(".npy"):
        np.save(vectors / name, np.roll(np.load(vectors / name), 1, axis=0))
    else:
        ids = json.loads((vectors / name).read_text())
        (vectors / name).write_text(json.dumps(ids[1:] + ids[:1]))
    with pytest.raises(ValueError, match=rf"examples changed since it started \({vectors / name} "
                                         r"\(tasks\[1\]\.teacher_dir\): sha256 \w{12}\.\.\. when the run started"):
        run(_distill(tiny_model_dir, examples_dir, out, acl, vectors), resume=True)  # trained on, on other targets
    assert (out / METRICS).read_text() == metrics and ckpt.read_pointer(out)["step"] == 1


def test_a_distill_checkpoint_without_recorded_teacher_files_still_resumes_and_records_them(
        tiny_model_dir, examples_dir, teacher, tmp_path):
    """A checkpoint written before the teacher's files were recorded (its `examples` lacks them) resumes: they are
    not compared, as they were never recorded; the resumed run's checkpoints record them."""
    acl, vectors = teacher
    out = tmp_path / "run"
    run(_distill(tiny_model_dir, examples_dir, out, acl, vectors, "train.stop_after=1"))
    path = out / ckpt.checkpoint_name(1) / ckpt.STATE_FILE
    state = torch.load(path, weights_only=False)
    state["examples"] = {k: v for k, v in state["examples"].items() if Path(k).parent != vectors}
    torch.save(state, path)
    assert run(_distill(tiny_model_dir, examples_dir, out, acl, vectors), resume=True)["step"] == 2
    recorded = torch.load(out / ckpt.checkpoint_name(2) / ckpt.STATE_FILE, weights_only=False)["examples"]
    assert {str(vectors / n) for n in TEACHER} <= set(recorded)
