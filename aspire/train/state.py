"""Run bookkeeping of the trainer: the LR schedule, the weights digest, the metrics log trimmed on
resume, and the settings, examples and teacher vectors a resumed run may not change."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from aspire.checksum import file_sha256
from aspire.config import to_dict
from aspire.io import write_text
from aspire.train.config import Config, example_files

METRICS = "metrics.jsonl"

log = logging.getLogger(__name__)


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """LR factor of update `step` (0-based): 1/(warmup + 1), 2/(warmup + 1), ... warmup/(warmup + 1) over the
    first `warmup` updates, then (total - step) / (total - warmup): the peak 1 at update `warmup` alone, down to
    1 / (total - warmup) at the last one (0 at `total`, after the run). From update `warmup` on this is
    transformers' `get_linear_schedule_with_warmup`; its warm-up, step/warmup, gives the first update rate 0, where
    here the first update already moves (and the peak is still reached once, not held for two updates)."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))
    return factor


def weights_digest(model: nn.Module) -> str:
    """sha256 of the name and bytes of every state-dict tensor (parameters and buffers), in name order (equal
    digests = bit-identical weights). A 0-dim tensor (a scalar parameter, BatchNorm's step count) is read as one
    element: torch cannot view it as bytes in place."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def trim_metrics(out_dir: Path, step: int) -> None:
    """Drop metrics logged after `step` (by a run that was then killed) and a torn last line (with a warning).

    Any other line that is not a JSON record with an integer `step` is a ValueError naming it: a damaged log is
    not rewritten without it."""
    path = out_dir / METRICS
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    keep = []
    for number, line in enumerate(lines, 1):
        if not line.strip():  # holds no record
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        good = isinstance(record, dict) and type(record.get("step")) is int  # a step-less record: not one the trainer wrote
        if not good and number == len(lines):  # a write cut short (a killed run, a full disk)
            log.warning("%s: dropping its torn last line %d: %.80r", path, number, line)
            continue
        if not good:
            raise ValueError(f"{path}, line {number}: not a metrics record (a JSON object with an integer step): "
                             f"{line[:80]!r}; remove or repair the line, then --resume again")
        if record["step"] <= step and record.get("event") != "end":
            keep.append(line)
    write_text(path, "".join(k + "\n" for k in keep))


# what must not change between a run and its --resume (the data order, the loss and each update depend on them: a
# changed train.clip_norm clipped the resumed steps otherwise, under a config.yaml that then claimed it for the whole
# run; the model's settings come from the checkpoint, and the optimizer's lr and weight decay from its saved state, so
# a changed one would be recorded but not used)
RESUME_FIXED = ("model", "data", "loss", "abstract",
                "tasks", "mix", "train.seed", "train.batch_size", "train.grad_accum", "train.max_steps", "train.epochs", "train.warmup_steps",
                "train.lr", "train.weight_decay", "train.clip_norm")


def check_resume_config(saved: dict, cfg: Config) -> None:
    """Raise ValueError naming every `RESUME_FIXED` setting that differs from the checkpoint's config."""
    now = to_dict(cfg)

    def get(tree: dict, dotted: str):
        for key in dotted.split("."):
            tree = tree.get(key, "(no such setting)") if isinstance(tree, dict) else "(no such setting)"
        return tree

    def section(dotted: str):  # the config object at `dotted` (a section's dataclass), or None
        node = cfg
        for key in dotted.split("."):
            node = getattr(node, key, None) if dataclasses.is_dataclass(node) else None
        return node

    def leaves(tree, prefix: str):  # (dotted key, value) of every setting under `prefix`
        # a section's settings one by one; a setting that holds a mapping (loss.term_scale) is one value, compared
        # whole: by its saved keys alone, a scale added on resume ({} -> {aligned: 0.5}) went unseen
        if isinstance(tree, dict) and dataclasses.is_dataclass(section(prefix)):
            for key, value in tree.items():
                yield from leaves(value, f"{prefix}.{key}")
        else:
            yield prefix, tree

    changed = [f"{key}: {was!r} -> {get(now, key)!r}" for k in RESUME_FIXED for key, was in leaves(get(saved, k), k)
               if was != get(now, key)]
    if changed:
        raise ValueError("--resume with a changed config would not continue the same run: " + "; ".join(changed))


def example_digests(cfg: Config) -> dict[str, str]:
    """{file, as the config names it: sha256 of its bytes} of each file the run's examples are read from, a distill
    task's teacher vectors included (`aspire.train.config.example_files`), read once when a run starts (fresh or
    resumed): its checkpoints record them (the trainer state's `examples`) and a resume compares them
    (`check_resume_examples`)."""
    return {str(path): file_sha256(path) for _, path in example_files(cfg)}


def check_resume_examples(saved: dict[str, str] | None, now: dict[str, str], cfg: Config, where: Path) -> None:
    """ValueError naming each file whose checksum differs from the one recorded when the run started (`saved`, the
    trainer state's `examples` of checkpoint state `where`; None: a checkpoint written before they were recorded,
    which nothing can be compared with) or that only one of them reads: the same path holding other pairs (or
    texts, or teacher vectors) would continue the run on other data, unsaid. A distill task's teacher of which
    `saved` records no file (a checkpoint written before the teacher's files were recorded) is not compared."""
    if saved is None:
        log.info("%s records no checksums of the examples (written before they were recorded): the examples of this "
                 "resume are not compared with the run's", where)
        return
    settings = {str(path): setting for setting, path in example_files(cfg)}
    teachers = {setting for setting in settings.values() if setting.endswith(".teacher_dir")}
    unrecorded = teachers - {settings[name] for name in saved if name in settings}
    if unrecorded:
        log.info("%s records no checksums of the teacher vectors of %s (written before they were recorded): they "
                 "are not compared with the run's", where, ", ".join(sorted(unrecorded)))
        now = {name: digest for name, digest in now.items() if settings.get(name) not in unrecorded}

    def change(name: str) -> str:
        if name not in now:
            return "read when the run started, not now"
        if name not in saved:
            return "read now, not when the run started"
        return f"sha256 {saved[name][:12]}... when the run started, {now[name][:12]}... now"

    differ = [f"{name} ({settings.get(name, 'not read now')}): {change(name)}"
              for name in sorted(saved.keys() | now.keys()) if saved.get(name) != now.get(name)]
    if differ:
        raise ValueError(f"--resume: the run's examples changed since it started ({'; '.join(differ)}), so it would "
                         f"continue on other data than its checkpoints (recorded in {where}) were trained on; restore "
                         "the file(s), or start a new run into another train.out_dir")
