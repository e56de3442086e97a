"""Task formats of a trained document model (SPECTER2): control codes and adapters, chosen by the `model`
config section (`ModelConfig.control_codes`, `ModelConfig.adapter`).

`apply_formats` adds them to a fresh encoder before training. With task codes every paper of a batch is
tokenised with the code of its own task (`[COCITE]`, `[CONTEXT2DOC]`, `[CROP]`, ... one per configured
task, `task_names`), so they work in every mixing mode; with per-task adapters `use_task` makes the
batch's task's adapter the active (and only trained) one, which needs batches of one task (`mix.mode`
alternating or sequential, `check_formats`). A saved model keeps its codes and adapters; at inference
every paper gets the first task's code and adapter (`aspire.encoders.codes`, `aspire.encoders.adapters`).
Without `tasks:` the co-citation triples are the one task (`DEFAULT_TASK`).
"""

from __future__ import annotations

from typing import Sequence

from aspire.config import ConfigError
from aspire.encoders.adapters import QUERY_ADAPTER, adapter_settings, is_adapted
from aspire.encoders.codes import code_id, code_token, codes_for
from aspire.train.config import ModelConfig

DEFAULT_TASK = "cocite"


def task_names(cfg) -> list[str]:
    """The training tasks of a whole config in its order (`tasks:`; without them, the co-citation triples
    alone), the first being the one inference uses."""
    return [t.name for t in getattr(cfg, "tasks", ())] or [DEFAULT_TASK]


def check_formats(cfg) -> None:
    """Refuse per-task adapters when a batch can hold several tasks (`mix.mode: mixed`): one forward pass
    runs one adapter. (Task codes go in per paper, so they work in every mode.)"""
    tasks = task_names(cfg)
    if cfg.model.adapter.kind != "none" and cfg.model.adapter.per_task and len(tasks) > 1 and cfg.mix.mode == "mixed":
        raise ConfigError(f"model.adapter.per_task with {len(tasks)} tasks needs mix.mode alternating or sequential "
                          "(a mixed batch holds several tasks, a forward pass runs one adapter)")


def apply_formats(encoder, cfg: ModelConfig, tasks: Sequence[str]) -> None:
    """Add `cfg`'s control codes and adapters to `encoder` (in place), for training `tasks`. An encoder loaded
    with adapters of its own (`model.encoder: aspire-minilm` or a trained checkpoint) trains those, once
    `check_same_adapter` finds them to be the ones `cfg.adapter` describes: a warm start."""
    codes, code = codes_for(cfg.control_codes, tasks)
    if codes:
        encoder.add_codes(codes, code)
    spec = cfg.adapter
    if spec.kind == "none":
        return
    names = [QUERY_ADAPTER] if spec.scope == "query" else list(tasks) if spec.per_task else ["default"]
    if is_adapted(encoder.model):  # model.encoder names an adapted model (aspire-minilm, a checkpoint): go on training it
        check_same_adapter(encoder, spec, names)
        return
    encoder.add_adapters(
        spec.kind, names, scope=spec.scope, r=spec.r, alpha=spec.alpha, dropout=spec.dropout,
        target_modules=spec.target_modules, trainable_tokens=[code_id(encoder.tokenizer, c) for c in codes],
    )


def check_same_adapter(encoder, spec, names: Sequence[str]) -> None:
    """Refuse to continue an encoder's own adapters where `spec` asks for other ones (names, kind, scope,
    targets, LoRA rank, scale or dropout): the run would train something other than its config says (the loaded
    adapters keep their own dropout, so another `model.adapter.dropout` would go unread). Where they
    agree, the loaded adapters (trainable, `adapters.load_adapted`) are the ones trained."""
    found = adapter_settings(encoder.model, encoder.adapter_scope)  # names, kind, scope, as a saved model records them
    first = encoder.model.peft_config[found["names"][0]]
    wanted = {"names": list(names), "kind": spec.kind, "scope": spec.scope}
    if spec.kind == "lora":
        found |= {"r": first.r, "alpha": float(first.lora_alpha), "dropout": float(first.lora_dropout)}
        wanted |= {"r": spec.r, "alpha": float(spec.alpha), "dropout": float(spec.dropout)}
    found["targets"] = sorted(first.target_modules or ())  # ia3's too: other targets went unread
    # no targets given: peft's default targets, whatever the saved adapter used
    wanted["targets"] = sorted(spec.target_modules) if spec.target_modules else found["targets"]
    differ = [f"{k}: encoder {found[k]!r}, config {wanted[k]!r}" for k in wanted if found.get(k) != wanted[k]]
    if differ:
        raise ConfigError(f"model.encoder {encoder.name!r} has its own adapters; model.adapter asks for others "
                          f"({'; '.join(differ)}): name its base as model.encoder for a new adapter")


def use_task(encoder, cfg: ModelConfig, task: str | None) -> None:
    """Switch `encoder` to `task`'s code (task codes) and adapter (per-task adapters); None (a batch of
    several tasks, each paper with its own code) leaves both as they are."""
    if task is None:
        return
    if cfg.control_codes == "task":
        encoder.set_code(code_token(task))
    if cfg.adapter.kind != "none" and cfg.adapter.per_task:
        if task not in encoder.model.peft_config:
            raise ValueError(f"no adapter for task {task!r}; adapters: {list(encoder.model.peft_config)}")
        encoder.model.set_adapter(task)
