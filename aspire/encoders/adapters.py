"""Adapters on the encoder's transformer (SPECTER2's per-task adapters), with `peft`.

`attach_adapters(model, "lora", ["default"])` wraps a transformers model in a `peft.PeftModel`: the base
weights are frozen and only the adapters train. Kinds: `lora` (low-rank updates of the attention
projections, `peft.LoraConfig`) and `ia3` (learned rescaling vectors, `peft.IA3Config`; peft's default targets
scale the keys and values and the input of every `output.dense`: the feed-forward layer's inner activations and,
on BERT, whose attention output projection is named so too, the attention's output). peft has no Houlsby-style
bottleneck adapter (a small MLP inserted after each sub-layer); IA3 is its closest light-weight alternative, so
`ia3` stands in for the "bottleneck" option.

Several named adapters (one per task) live in one model; `PeftModel.set_adapter(name)` switches the
active one, and only the active adapter trains. A saved model records which one was active where it is not the
first (`adapter_settings`' `active`), and is loaded with it active (a settings file without `active`: the first).

On disk (`save_adapted`): the base weights in plain Hugging Face format at the model directory (the
adapter layers taken out, so `AutoModel.from_pretrained(dir)` opens the unadapted model), and the adapters
under `dir/adapter/` in peft's format: `PeftModel.from_pretrained(AutoModel.from_pretrained(dir),
dir/"adapter")` opens the adapted one (an adapter not named `default` is in `adapter/NAME/`).
`merged(model)` folds the active adapter into the weights for a model plain `transformers` opens alone.

Scope (`ADAPTER_SCOPES`): an `all` adapter is on for every text. A `query` adapter (SPECTER2's ad-hoc
query adapter) is on only for the query side of an asymmetric task (the citing sentence of context2doc):
papers are encoded with it switched off (`set_enabled`), so with a frozen base a query adapter leaves
every paper vector, and every paper-to-paper benchmark, exactly as the base model scores them.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from pathlib import Path
from typing import Sequence

from torch import nn

log = logging.getLogger(__name__)
ADAPTER_DIR = "adapter"
ADAPTER_KINDS = ("lora", "ia3")
ADAPTER_SCOPES = ("all", "query")  # on for every text | only for queries (papers encoded without it)
QUERY_ADAPTER = "query"  # the one adapter of scope query
# target modules for model types peft has no default for: kind -> model type -> (targets, feed-forward targets)
EXTRA_TARGETS = {
    "lora": {"mpnet": (["q", "v"], [])},
    "ia3": {"mpnet": (["k", "v", "output.dense"], ["output.dense"])},
}


@contextlib.contextmanager
def peft_wrapping():
    """Where peft wraps a model: its read of transformers' deprecated `is_gradient_checkpointing` warns (a
    FutureWarning about peft's code that a user can do nothing about, on every load of an adapted model); that
    warning alone is ignored."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


LORA_DEFAULTS = {"r": 8, "alpha": 16.0, "dropout": 0.0}  # `adapter_config`'s, as `model.adapter`'s defaults


def adapter_config(kind: str, model_type: str, r: int = LORA_DEFAULTS["r"], alpha: float = LORA_DEFAULTS["alpha"],
                   dropout: float = LORA_DEFAULTS["dropout"], target_modules: Sequence[str] = (),
                   trainable_tokens: Sequence[int] = ()):
    """The peft config of an adapter `kind` for a transformers `model_type` (peft's default targets
    unless `target_modules` are given). `r`, `alpha` and `dropout` are LoRA's: IA3 has none, and an ia3 adapter
    given other values than their defaults (`LORA_DEFAULTS`) logs a warning naming them, left unused.
    `trainable_tokens`: vocabulary ids whose input embeddings train beside a LoRA adapter (the control
    codes, added after the base model was trained; peft's `trainable_token_indices`)."""
    from peft import IA3Config, LoraConfig

    if kind not in ADAPTER_KINDS:
        raise ValueError(f"unknown adapter kind {kind!r}; valid: {list(ADAPTER_KINDS)}")
    targets, feed_forward = EXTRA_TARGETS[kind].get(model_type, (None, None))
    targets = list(target_modules) or targets  # None: peft's default for the model type
    if kind == "lora":
        return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
                          trainable_token_indices=list(trainable_tokens) or None)
    if trainable_tokens:
        raise ValueError("ia3 adapters cannot train token embeddings (control codes): use lora, or no codes")
    given = {"r": r, "alpha": alpha, "dropout": dropout}
    if unused := {k: v for k, v in given.items() if v != LORA_DEFAULTS[k]}:
        log.warning("ia3 adapters have no rank, scale or dropout (LoRA's): %s (model.adapter.%s) not used; use kind "
                    "lora, or leave them at their defaults %s", unused, ", model.adapter.".join(unused), LORA_DEFAULTS)
    if target_modules:  # given targets are all scaled at their output (none treated as feed-forward)
        feed_forward = []
    return IA3Config(target_modules=targets, feedforward_modules=feed_forward)


def attach_adapters(model: nn.Module, kind: str, names: Sequence[str], **options) -> nn.Module:
    """`model` wrapped in a PeftModel holding one adapter per name (the first active); the base is frozen.
    `names`: a list of distinct non-empty strings without a "." (a bare string would be read as its letters, one
    adapter each; a "." is refused by torch as a module name, once the first adapter was in the model)."""
    from peft import get_peft_model

    if (isinstance(names, str) or not names or not all(isinstance(n, str) and n for n in names)
            or len(set(names)) != len(names)):
        raise ValueError(f"adapter names must be a list of distinct non-empty strings, at least one, got {names!r}")
    if dotted := [n for n in names if "." in n]:  # checked before peft changes `model`'s layers in place
        raise ValueError(f"adapter names cannot contain '.' (a module name): {dotted} in {list(names)}")
    config = adapter_config(kind, model.config.model_type, **options)  # its own errors say what is wrong
    try:
        with peft_wrapping():
            adapted = get_peft_model(model, config, adapter_name=names[0])
    except ValueError as err:  # peft: no default targets for this model type
        raise ValueError(f"{kind} adapter on a {model.config.model_type!r} model: {err} "
                         "(set model.adapter.target_modules)") from None
    for name in names[1:]:
        adapted.add_adapter(name, copy.deepcopy(config))
    adapted.set_adapter(names[0])
    return adapted


def is_adapted(model: nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def adapter_settings(model: nn.Module, scope: str = "all") -> dict:
    """What the saved settings record of an adapted model: adapter names, kind and scope, and the active adapter
    where it is not the first (the one a load activates without it)."""
    names = list(model.peft_config)
    active = {} if model.active_adapter == names[0] else {"active": model.active_adapter}
    return {"kind": model.peft_config[names[0]].peft_type.value.lower(), "names": names, "scope": scope, **active}


def set_enabled(model: nn.Module, on: bool) -> None:
    """Switch the adapter layers of `model` (a PeftModel) on (the active adapter applies) or off (the
    base model's own forward pass). Which weights train stays as it was: peft's switch also freezes an
    adapter it turns off, which would cut the gradient of a query pass made before the papers' pass."""
    trains = {name: p.requires_grad for name, p in model.named_parameters()}
    if on:
        model.base_model.enable_adapter_layers()
    else:
        model.base_model.disable_adapter_layers()
    for name, p in model.named_parameters():
        p.requires_grad_(trains[name])


def adapter_path(root: Path, name: str) -> Path:
    """Where peft's `save_pretrained(root)` puts adapter `name`."""
    return root if name == "default" else root / name


def base_state_dict(model: nn.Module) -> dict:
    """The adapted model's base weights under their original names (adapter layers left out)."""
    prefix = model.base_model.prefix  # "lora_", "ia3_"
    wrappers = ("base_layer", "token_adapter")  # peft's wrapping modules around a base layer
    out = {}
    for key, value in model.get_base_model().state_dict().items():
        parts = key.split(".")
        if any(p.startswith(prefix) or p == "trainable_tokens_delta" for p in parts):
            continue
        out[".".join(p for p in parts if p not in wrappers)] = value
    return out


def save_adapted(model: nn.Module, path: Path) -> None:
    """Base weights (plain HF format) at `path`, every adapter under `path/adapter` (peft format)."""
    base = model.get_base_model()
    base.save_pretrained(path, state_dict=base_state_dict(model))
    # the resized embeddings are in the base weights already: the adapter keeps only the codes' deltas
    model.save_pretrained(path / ADAPTER_DIR, selected_adapters=list(model.peft_config), save_embedding_layers=False)


def check_adapter_settings(settings, where: str) -> list[str]:
    """The adapter names of a settings file's `adapter` entry (`adapter_settings`' form), or ValueError naming
    `where` and the key that is missing or wrong: names (distinct strings without a ".", at least one), kind, scope and active
    (one of the names, when given)."""
    if not isinstance(settings, dict):
        raise ValueError(f"{where}: 'adapter' holds {settings!r}, not an object with names, kind and scope")
    names = settings.get("names")
    if (not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names)
            or len(set(names)) != len(names)):
        raise ValueError(f"{where}: adapter 'names' must be a list of distinct adapter names, got {names!r}")
    if dotted := [n for n in names if "." in n]:
        raise ValueError(f"{where}: adapter 'names' cannot contain '.' (a module name): {dotted} in {names}")
    if settings.get("kind", ADAPTER_KINDS[0]) not in ADAPTER_KINDS:
        raise ValueError(f"{where}: adapter 'kind' {settings['kind']!r} is unknown; valid: {list(ADAPTER_KINDS)}")
    if settings.get("scope", "all") not in ADAPTER_SCOPES:
        raise ValueError(f"{where}: adapter 'scope' {settings['scope']!r} is unknown; valid: {list(ADAPTER_SCOPES)}")
    if settings.get("active", names[0]) not in names:
        raise ValueError(f"{where}: adapter 'active' {settings['active']!r} is none of its names {names}")
    return names


def load_adapted(base: nn.Module, path: Path, settings: dict, active: str | None = None) -> nn.Module:
    """`base` with the adapters saved under `path/adapter` (trainable, so a run can resume), `active`
    (default: the one the settings record as active, else the first) switched on. Settings that are not
    `adapter_settings`' form, an `active` that is none of their names (listing them), adapters made for a model
    of another width and adapters of another kind than the settings' are ValueErrors naming the file or folder."""
    from peft import PeftModel

    from aspire.encoders.pretrained import SETTINGS_FILE

    names = check_adapter_settings(settings, str(Path(path) / SETTINGS_FILE))
    if active is not None and active not in names:  # peft said only "Adapter X not found.", after loading them all
        raise ValueError(f"{path}: no adapter {active!r} to activate; valid: {names}")
    root = Path(path) / ADAPTER_DIR
    try:
        with peft_wrapping():
            model = PeftModel.from_pretrained(base, adapter_path(root, names[0]), adapter_name=names[0],
                                              is_trainable=True)
        for name in names[1:]:
            model.load_adapter(adapter_path(root, name), adapter_name=name, is_trainable=True)
    except RuntimeError as err:
        if "size mismatch" not in str(err):
            raise
        width = getattr(getattr(base, "config", None), "hidden_size", "?")
        first = next(line.strip() for line in str(err).splitlines() if "size mismatch" in line)
        raise ValueError(f"{path}: its adapters do not fit the base model (hidden size {width}); they were trained on "
                         f"a model of another size: {first}") from None
    kind = settings.get("kind", ADAPTER_KINDS[0])
    for name in names:  # the settings' kind is what the fingerprint and the fast backends read: it must be the one loaded
        on_disk = model.peft_config[name].peft_type.value.lower()
        if on_disk != kind:
            raise ValueError(f"{Path(path) / SETTINGS_FILE}: adapter 'kind' is {kind!r}, but adapter {name!r} in "
                             f"{adapter_path(root, name)} is {on_disk!r}")
    model.set_adapter(active or settings.get("active") or names[0])
    return model


def merged(model: nn.Module) -> nn.Module:
    """A plain transformers model: a copy of `model` with its active adapter folded into the weights."""
    return copy.deepcopy(model).merge_and_unload(adapter_names=[model.active_adapter])
