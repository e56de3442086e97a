"""A full disk (issue 47, item 1): an index generation and a training checkpoint that meet a full disk end
in one `error:` line naming the folder, the temporary folder removed, the live generation / last
checkpoint untouched; free space is checked up front where the size is known.

Disk-full is injected (`OSError(errno.ENOSPC)` into the writer) and, where the machine allows it, met on a
real full disk: a small tmpfs mounted in a private mount namespace (`unshare -r -m`, or `unshare -m` as root).
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_index import random_corpus
from test_train import REPO, tiny_config

import aspire.storage as storage
from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.__main__ import main as index_main
from aspire.storage import DiskFullError
from aspire.train import checkpoint as ckpt
from aspire.train.trainer import METRICS, run

FLAT = IndexBuildConfig(index=IndexConfig(kind="flat"))
ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def _no_leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith((".tmp-", ".CURRENT.")))


def _error_lines(err: str) -> list[str]:
    """The lines of `err` besides logged warnings (a hand-built examples folder is warned of: no ingest report says
    whether benchmark papers were held out)."""
    return [line for line in err.splitlines() if line.strip() and not line.startswith("WARNING aspire.")]


# ---- injected: the index ------------------------------------------------------------------------------
@pytest.mark.parametrize("writer", ["faiss", "numpy", "papers"])
def test_index_save_meeting_a_full_disk_keeps_the_live_generation_and_removes_the_temporary(tmp_path, monkeypatch,
                                                                                          writer):

    root = tmp_path / "idx"
    SentenceIndex.build(random_corpus(5), FLAT, "fp").save(root)
    bigger = SentenceIndex.build(random_corpus(40, seed=1), FLAT, "fp")

    def full(*args, **kwargs):
        if writer == "faiss":  # what faiss raises: a RuntimeError whose text names the errno
            raise RuntimeError("Error in void faiss::write_index(...): write error in x.faiss: 10 != 2560 "
                               "(No space left on device)")
        raise ENOSPC

    target = {"faiss": "aspire.index.store.faiss.write_index", "numpy": "aspire.index.store.np.save",
              "papers": "aspire.index.store.write_index_papers"}[writer]
    monkeypatch.setattr(target, full)
    with pytest.raises(DiskFullError, match=r"the disk filled up while writing a new index generation") as caught:
        bigger.save(root)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(root)
    assert _no_leftovers(root) == []  # the temporary generation removed on the way out
    monkeypatch.undo()
    assert SentenceIndex.load(root, verify=True).n_papers == 5  # the live generation, untouched
    bigger.save(root)  # space freed: the next save goes through
    assert SentenceIndex.load(root, verify=True).n_papers == 40


def test_index_save_without_room_for_the_generation_is_refused_before_writing(tmp_path, monkeypatch):
    root = tmp_path / "idx"
    SentenceIndex.build(random_corpus(5), FLAT, "fp").save(root)
    bigger = SentenceIndex.build(random_corpus(40, seed=1), FLAT, "fp")
    needed = bigger.saved_bytes()
    vectors = int(np.asarray(bigger.vectors).nbytes)
    assert needed >= 2 * vectors  # the exact vectors and the faiss copy of them, at least
    monkeypatch.setattr(storage, "free_bytes", lambda folder: needed - 1)
    written = []
    monkeypatch.setattr("aspire.index.store.begin_generation", lambda root: written.append(root))
    with pytest.raises(DiskFullError, match=rf"not enough disk space .* needs about {needed / 2**10:.1f} KiB"):
        bigger.save(root)
    assert written == []  # refused before a generation was begun
    monkeypatch.undo()
    assert SentenceIndex.load(root, verify=True).n_papers == 5


def test_cli_build_overwrite_on_a_full_disk_is_one_error_line(tmp_path, tiny_model_dir, monkeypatch, capsys):
    root, corpus = tmp_path / "idx", tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "a model", "abstract": ["the data is new."]})
                              + "\n" for i in range(3)))
    argv = ["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(root), "--quiet"]
    assert index_main(argv) == 0
    live = (root / "CURRENT").read_text().strip()

    def full(*args, **kwargs):
        raise RuntimeError("Error in void faiss::write_index(...): write error (No space left on device)")

    monkeypatch.setattr("aspire.index.store.faiss.write_index", full)
    capsys.readouterr()
    assert index_main([*argv, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert _error_lines(err) == [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(_error_lines(err)) == 1 and "Traceback" not in err
    assert "disk filled up" in err and str(root) in err
    assert _no_leftovers(root) == [] and (root / "CURRENT").read_text().strip() == live
    monkeypatch.undo()
    assert SentenceIndex.load(root, verify=True).n_papers == 3


# ---- injected: the checkpoint ---------------------------------------------------------------------------
def test_checkpoint_meeting_a_full_disk_keeps_latest_and_removes_the_temporary(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    ckpt.save_checkpoint(out, 2, lambda p: (p / "model").mkdir(), {"step": 2})

    def full(obj, f):
        Path(f).write_bytes(b"PK\x03\x04 half")
        raise ENOSPC

    monkeypatch.setattr(ckpt.torch, "save", full)
    with pytest.raises(DiskFullError, match="checkpoint-000004") as caught:
        ckpt.save_checkpoint(out, 4, lambda p: (p / "model").mkdir(), {"step": 4})
    assert caught.value.filename == str(out)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-000002", "latest"]  # no temporary left
    monkeypatch.undo()
    assert ckpt.read_pointer(out) == {"checkpoint": "checkpoint-000002", "step": 2}
    with pytest.raises(DiskFullError, match="not enough disk space for checkpoint-000004"):
        monkeypatch.setattr(storage, "free_bytes", lambda folder: 10)
        ckpt.save_checkpoint(out, 4, lambda p: (p / "model").mkdir(), {"step": 4}, needed=11)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-000002", "latest"]


def test_training_on_a_full_disk_ends_in_one_error_line_and_resumes(tiny_model_dir, examples_dir, tmp_path,  # noqa: F811
                                                                    monkeypatch, capsys):
    from aspire.train.__main__ import main as train_main

    out = tmp_path / "run"
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"base": str(REPO / "configs" / "base.yaml")}))
    argv = ["--config", str(config), f"model.encoder={tiny_model_dir}", f"data.examples_dir={examples_dir}",
            f"train.out_dir={out}", "train.batch_size=4", "train.lr=1e-3", "train.warmup_steps=2",
            "train.max_steps=6", "train.log_every=1", "train.eval_every=0", "train.save_every=2",
            "train.device=cpu", "data.max_sentences=4", "--quiet"]
    real_save, calls = ckpt.torch.save, []

    def full_at_second(obj, f):
        calls.append(f)
        if len(calls) == 2:
            Path(f).write_bytes(b"PK\x03\x04 half")
            raise ENOSPC
        real_save(obj, f)

    monkeypatch.setattr(ckpt.torch, "save", full_at_second)
    capsys.readouterr()
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert len(_error_lines(err)) == 1 and _error_lines(err)[0].startswith("error: ") and "Traceback" not in err
    assert "checkpoint-000004" in err and str(out) in err
    assert ckpt.read_pointer(out)["step"] == 2
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp-checkpoint-")]
    monkeypatch.undo()
    capsys.readouterr()
    assert train_main([*argv, "--resume"]) == 0  # room again: --resume continues
    assert ckpt.read_pointer(out)["step"] == 6
    ends = [r for r in map(json.loads, (out / METRICS).read_text().splitlines()) if r.get("event") == "end"]
    assert len(ends) == 1 and ends[0]["step"] == 6


def test_training_without_room_for_one_checkpoint_is_refused_before_the_first_step(tiny_model_dir, examples_dir,  # noqa: F811
                                                                                  tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(storage, "free_bytes", lambda folder: 1000)
    with pytest.raises(DiskFullError, match="not enough disk space for a checkpoint of this model"):
        run(tiny_config(tiny_model_dir, examples_dir, out))
    assert not (out / METRICS).exists() and not list(out.glob("checkpoint-*"))  # no step was taken


# ---- a real full disk ------------------------------------------------------------------------------------
def _small_disk(tmp_path: Path) -> tuple[list[str], Path]:
    """A command prefix that runs a command with a small tmpfs mounted on tmp_path/disk (its size the
    first argument after the prefix), or skip, saying why, where this machine allows no such mount."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("unshare") is None:
        pytest.skip("no real full-disk check: `unshare` (util-linux) is not installed")
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    reasons = []
    for flags in (["-r", "-m"], ["-m"]):  # an unprivileged user namespace, else root
        prefix = ["unshare", *flags, "sh", "-c", script, "sh"]
        probe = subprocess.run([*prefix, "64k", str(mount), "true"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return prefix, mount
        reasons.append(f"unshare {' '.join(flags)}: {probe.stderr.strip()[:120]}")
    pytest.skip("no real full-disk check: this machine allows no private tmpfs mount (" + "; ".join(reasons) + ")")


REAL_INDEX = r"""
import json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from test_index import random_corpus
from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.storage import DiskFullError, free_bytes

disk = Path(sys.argv[1])
root, ballast = disk / "idx", disk / "ballast"
flat = IndexBuildConfig(index=IndexConfig(kind="flat"))
SentenceIndex.build(random_corpus(5), flat, "fp").save(root)
bigger = SentenceIndex.build(random_corpus(3000, seed=1), flat, "fp")
texts = sum(len(t) for s in bigger.sentences for t in s) + sum(map(len, bigger.titles))
needed, out = 2 * bigger.vectors.nbytes + bigger.offsets.nbytes + texts, {}  # what saved_bytes() counts

def fill(leave):
    ballast.unlink(missing_ok=True)
    with open(ballast, "wb") as f:
        f.write(b"\0" * max(free_bytes(disk) - leave, 0))

for case, leave in (("up_front", needed // 2), ("while_writing", needed + 8192)):
    fill(leave)
    try:
        bigger.save(root)
        out[case] = "saved"
    except DiskFullError as err:
        out[case] = f"{err.strerror}: {err.filename}"
    except Exception as err:  # noqa: BLE001 - anything else is what the test reports
        out[case] = f"{type(err).__name__}: {err}"
    out[case + "_leftovers"] = sorted(p.name for p in root.iterdir() if p.name.startswith((".tmp-", ".CURRENT.")))
    out[case + "_live"] = SentenceIndex.load(root, verify=True).n_papers
ballast.unlink()
out["after_freeing"] = SentenceIndex.load(bigger.save(root).parent, verify=True).n_papers
out["names"] = sorted(p.name for p in root.iterdir())
print(json.dumps(out))
"""


def test_real_full_disk_index_save(tmp_path):
    prefix, disk = _small_disk(tmp_path)
    proc = subprocess.run([*prefix, "4m", str(disk), sys.executable, "-c", REAL_INDEX, str(disk),
                           str(REPO / "tests"), str(REPO)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["up_front"].startswith("not enough disk space for a new index generation"), out["up_front"]
    assert out["up_front"].endswith("/idx")
    assert out["while_writing"].startswith("the disk filled up while writing a new index generation"), out["while_writing"]
    for case in ("up_front", "while_writing"):
        assert out[case + "_leftovers"] == [] and out[case + "_live"] == 5, (case, out)
    assert out["after_freeing"] == 3000
    assert len([n for n in out["names"] if n.startswith("gen-")]) == 1 and not _leftover_names(out["names"])


def _leftover_names(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith((".tmp-", ".CURRENT."))]


REAL_CLI = r"""
import contextlib, io, json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[3]]
from aspire.index import SentenceIndex
from aspire.index.__main__ import main
from aspire.storage import free_bytes

disk, model = Path(sys.argv[1]), sys.argv[2]
root, corpus, ballast = disk / "idx", disk / "papers.jsonl", disk / "ballast"
corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "a model", "abstract": ["the data is new."]})
                          + "\n" for i in range(3)))
argv = ["build", "--model", model, "--corpus", str(corpus), "--out", str(root), "--quiet"]
assert main(argv) == 0
live = (root / "CURRENT").read_text().strip()
with open(ballast, "wb") as f:  # leaves two pages: room for the vectors, none for a generation's dozen files
    f.write(b"\0" * (free_bytes(disk) - 8192))
err = io.StringIO()
with contextlib.redirect_stderr(err):
    status = main([*argv, "--overwrite"])
names = sorted(p.name for p in root.iterdir())
same = (root / "CURRENT").read_text().strip() == live
n = SentenceIndex.load(root, verify=True).n_papers
print(json.dumps({"status": status, "err": err.getvalue(), "names": names, "same_live": same, "n": n}))
"""


def _one_error_line(proc, folder_suffix: str) -> dict:
    """The child's report (its last stdout line, JSON) after it met the full disk: the command it ran ended
    with status 2 and one `error:` line naming the folder, no traceback."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    err = out["err"]
    assert out["status"] == 2 and "Traceback" not in err, err
    assert len(_error_lines(err)) == 1 and _error_lines(err)[0].startswith("error: ") and err.rstrip().endswith(folder_suffix), err
    return out


def test_real_full_disk_cli_index_build_overwrite(tmp_path, tiny_model_dir):
    prefix, disk = _small_disk(tmp_path)
    proc = subprocess.run([*prefix, "1m", str(disk), sys.executable, "-c", REAL_CLI, str(disk), str(tiny_model_dir),
                           str(REPO)], capture_output=True, text=True, timeout=300)
    out = _one_error_line(proc, "/idx")
    err = out["err"]
    assert "disk" in err and "space" in err
    assert out["same_live"] and out["n"] == 3 and not _leftover_names(out["names"]), out


REAL_TRAIN_CONFIG = """\
base: {base}
model: {{encoder: {model}}}
data: {{examples_dir: {examples}, max_sentences: 4}}
train: {{out_dir: {out}, batch_size: 4, lr: 0.001, warmup_steps: 2, max_steps: 8, log_every: 1, eval_every: 0,
         save_every: 1, keep_checkpoints: 100, progress: false, device: cpu}}
"""

REAL_TRAIN = r"""
import json, subprocess, sys
from pathlib import Path
from aspire.storage import free_bytes
from aspire.train import checkpoint as ckpt

disk, config, size = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
out, ballast = disk / "run", disk / "ballast"
with open(ballast, "wb") as f:  # room for about two and a half checkpoints, then the disk is full
    f.write(b"\0" * (free_bytes(disk) - int(2.5 * size)))
cmd = [sys.executable, "-m", "aspire.train", "--config", config, "--quiet"]
first = subprocess.run(cmd, capture_output=True, text=True)
state = {"status": first.returncode, "err": first.stderr, "latest": ckpt.read_pointer(out)["step"],
         "names": sorted(p.name for p in out.iterdir())}
ballast.unlink()  # space freed
again = subprocess.run([*cmd, "--resume"], capture_output=True, text=True)
state.update(resumed=again.returncode, resumed_err=again.stderr[-2000:], final=ckpt.read_pointer(out)["step"])
print(json.dumps(state))
"""


@pytest.mark.slow
def test_real_full_disk_training_checkpoint_then_resume(tmp_path, tiny_model_dir, examples_dir):  # noqa: F811
    prefix, disk = _small_disk(tmp_path)
    probe = tmp_path / "probe"  # one checkpoint of this model, written on the ordinary disk, sizes the tmpfs
    run(tiny_config(tiny_model_dir, examples_dir, probe, "train.max_steps=1", "train.eval_every=0"))
    size = sum(p.stat().st_size for p in (probe / "checkpoint-000001").rglob("*") if p.is_file())
    config = tmp_path / "train.yaml"
    config.write_text(REAL_TRAIN_CONFIG.format(base=REPO / "configs" / "base.yaml", model=tiny_model_dir,
                                               examples=examples_dir, out=disk / "run"))
    env_path = f"PYTHONPATH={REPO}"
    proc = subprocess.run([*prefix, f"{12 * size // 1024 + 1024}k", str(disk), "env", env_path, "OMP_NUM_THREADS=1",
                           sys.executable, "-c", REAL_TRAIN, str(disk), str(config), str(size)],
                          capture_output=True, text=True, timeout=600)
    out = _one_error_line(proc, "/run")
    err = out["err"]
    assert "space" in err or "disk filled up" in err
    assert 1 <= out["latest"] < 8 and not [n for n in out["names"] if n.startswith(".tmp-checkpoint-")], out
    assert out["resumed"] == 0, out["resumed_err"]
    assert out["final"] == 8
