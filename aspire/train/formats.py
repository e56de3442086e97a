"""Task formats of a trained document model (SPECTER2): control codes and adapters, chosen by the `model`
config section (`ModelConfig.control_codes`, `ModelConfig.adapter`).

`apply_formats` adds them to a fresh encoder before training; `use_task` switches them per batch: with
task codes every paper of the batch gets its task's code, and with per-task adapters the task's adapter
is the active (and only trained) one. A saved model keeps its codes and adapters; at inference every
paper gets the first task's code and adapter (`aspire.encoders.codes`, `aspire.encoders.adapters`).

The co-citation triples are the one task so far (`DEFAULT_TASK`); a config that trains several tasks
names them in `task_names`.
"""

from __future__ import annotations

from typing import Sequence

from aspire.encoders.codes import code_id, code_token, codes_for
from aspire.train.config import ModelConfig

DEFAULT_TASK = "cocite"


def task_names(cfg) -> list[str]:
    """The training tasks of a whole config, the first being the one inference uses (so far one: the
    co-citation triples)."""
    return [DEFAULT_TASK]


def apply_formats(encoder, cfg: ModelConfig, tasks: Sequence[str]) -> None:
    """Add `cfg`'s control codes and adapters to `encoder` (in place), for training `tasks`."""
    codes, code = codes_for(cfg.control_codes, tasks)
    if codes:
        encoder.add_codes(codes, code)
    spec = cfg.adapter
    if spec.kind == "none":
        return
    encoder.add_adapters(
        spec.kind, list(tasks) if spec.per_task else ["default"], r=spec.r, alpha=spec.alpha, dropout=spec.dropout,
        target_modules=spec.target_modules, trainable_tokens=[code_id(encoder.tokenizer, c) for c in codes],
    )


def use_task(encoder, cfg: ModelConfig, task: str) -> None:
    """Switch `encoder` to `task`'s code (task codes) and adapter (per-task adapters)."""
    if cfg.control_codes == "task":
        encoder.set_code(code_token(task))
    if cfg.adapter.kind != "none" and cfg.adapter.per_task:
        if task not in encoder.model.peft_config:
            raise ValueError(f"no adapter for task {task!r}; adapters: {list(encoder.model.peft_config)}")
        encoder.model.set_adapter(task)
