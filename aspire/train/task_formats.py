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
    runs one adapter. (Task codes go in per paper, so they work in every mode.) Two tasks of one name, which per-task
    adapters would name alike, are refused for every config when it loads (`aspire.train.config.tasks_problem`)."""
    tasks = task_names(cfg)
    per_task = cfg.model.adapter.kind != "none" and cfg.model.adapter.per_task
    if per_task and len(tasks) > 1 and cfg.mix.mode == "mixed":
        raise ConfigError(f"model.adapter.per_task with {len(tasks)} tasks needs mix.mode alternating or sequential "
                          "(a mixed batch holds several tasks, a forward pass runs one adapter)")


def apply_formats(encoder, cfg: ModelConfig, tasks: Sequence[str]) -> None:
    """Add `cfg`'s control codes and adapters to `encoder` (in place), for training `tasks`. An encoder loaded
    with adapters of its own (`model.encoder: aspire-minilm` or a trained checkpoint) trains those, once
    `check_same_adapter` finds them to be the ones `cfg.adapter` describes: a warm start. Such an encoder is refused
    (ConfigError) where `cfg.adapter.kind` is none (its adapters alone would train, not the whole encoder) or where
    `cfg` asks for control codes its adapters do not train (`check_codes_train`)."""
    codes, code = codes_for(cfg.control_codes, tasks)
    spec = cfg.adapter
    adapted = is_adapted(encoder.model)  # model.encoder names an adapted model (aspire-minilm, a checkpoint)
    if adapted and spec.kind == "none":  # its adapters trained alone, the base frozen: not the full fine-tune asked for
        found = adapter_settings(encoder.model, encoder.adapter_scope)
        raise ConfigError(f"model.encoder {encoder.name!r} has adapters of its own ({found['kind']} {found['names']}) "
                          "and model.adapter.kind is none: its adapters alone would train, the base frozen; set "
                          "model.adapter to its adapters to go on training them, or name a merged export (aspire "
                          "export) or its base as model.encoder to train the whole encoder")
    if adapted and codes:
        check_codes_train(encoder, cfg.control_codes, codes)
    if codes:
        encoder.add_codes(codes, code)
    if spec.kind == "none":
        return
    names = [QUERY_ADAPTER] if spec.scope == "query" else list(tasks) if spec.per_task else ["default"]
    if adapted:  # go on training its own adapters
        check_same_adapter(encoder, spec, names)
        return
    encoder.add_adapters(
        spec.kind, names, scope=spec.scope, r=spec.r, alpha=spec.alpha, dropout=spec.dropout,
        target_modules=spec.target_modules, trainable_tokens=[code_id(encoder.tokenizer, c) for c in codes],
    )


def check_codes_train(encoder, mode: str, codes: Sequence[str]) -> None:
    """Refuse control `codes` (of `model.control_codes` `mode`) that the adapters `encoder` was loaded with do not
    train: a code it lacks would get a new embedding row outside its adapters, frozen at its start (or, beside an
    adapter that trains other codes, a TypeError from inside transformers), and a code it holds is trained only
    where its adapters were made with it (peft's `trainable_token_indices`)."""
    trained: set[int] = set()
    for config in encoder.model.peft_config.values():
        indices = getattr(config, "trainable_token_indices", None) or []  # a list, or {layer: list}
        trained.update(i for ids in (indices.values() if isinstance(indices, dict) else [indices]) for i in ids)
    untrained = [c for c in codes if c not in encoder.codes or code_id(encoder.tokenizer, c) not in trained]
    if untrained:
        raise ConfigError(f"model.control_codes={mode}: model.encoder {encoder.name!r} has adapters of its own, which "
                          f"do not train the code(s) {untrained} (its codes: {list(encoder.codes) or 'none'}); they "
                          "would stay as they start: choose the codes it was trained with, or name its base as "
                          "model.encoder for a new adapter")


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
