"""Export a model trained with adapters as plain Hugging Face weights: its active adapter merged in; or, with
`--adapter-only BASE`, as its adapters alone over a named base model (how `aspire-minilm` ships in the package:
a few MB instead of the whole encoder). `--rank R` exports a model with no adapter of its own (a full fine-tune,
a weight soup) the same way: each target weight's difference from the base is cut to its best rank-R
approximation (truncated SVD) and stored as a LoRA adapter, with each target's bias difference as the adapter's
bias; what it cannot carry (LayerNorm, embeddings) is reported, and the cost is measured, not assumed.

A model saved with adapters holds the base weights plus `adapter/` (peft format); it needs `peft` to
load. The merged export folds the adapter into the weights (`peft`'s `merge_and_unload`), so
`transformers.AutoModel` alone opens it and gives the adapted model's outputs. The tokenizer (with any
control codes), the encoder settings and a trained model's `document_model.json` (its adapter entry
set to none) are written beside it. A query adapter (`scope: query`) is never merged: it is off for papers,
so folded into the weights it would change every paper vector; export it with `--adapter-only BASE`.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from aspire.cliutil import add_common_options, command_parser, positive_int, run_command, setup_logging
from aspire.encoders.identity import CONFIG_NAMING
from aspire.encoders.pretrained import SETTINGS_FILE, check_model, pinned_model, resolve_model, saved_settings
from aspire.io import atomic_folder, input_under, read_json
from aspire.jsonsafe import dumps
from aspire.paths import model_folder
from aspire.storage import check_replaceable

if TYPE_CHECKING:
    import torch

    from aspire.encoders import ContextualSentenceEncoder

EXAMPLES = """\
  aspire export --model runs/lora_aspire/checkpoint-000048/model --out runs/lora_aspire/merged
  aspire export --model runs/hybrid_aspire/checkpoint-000060/model --adapter-only minilm --out aspire/models/aspire-minilm
  python -m aspire.train.export --model runs/query_adapter/checkpoint-000250/model --adapter-only runs/negatives/in_batch/checkpoint-000050/model --out runs/query_adapter/exported  # a query adapter: never merged
  aspire export --model runs/soup/hybrid_all11 --adapter-only minilm --rank 16 --out runs/soup/hybrid_all11-r16
"""
log = logging.getLogger(__name__)
LOW_RANK_TARGETS = ("query", "key", "value", "dense")  # every linear layer of a BERT encoder
LOW_RANK_REPORT = "low_rank.json"
# a linear difference this large against the base's own weights (relative Frobenius norm) is no fine-tune of it: a
# base of the same architecture that is not the model's (another checkpoint, a random init) gives ~1.0 or more
FOREIGN_BASE_NORM = 0.5
INTERPOLATION_RECORD = "interpolation.json"  # `aspire.train.interpolate.RECORD_FILE` (it imports this module)


def check_not_input(out: Path, *inputs: str | Path) -> None:
    """ValueError when the output folder `out` is one of the folders a command reads, or holds one: writing it
    would replace the very model (or models) it was made from, or the base an adapter export names."""
    model = input_under(out, inputs)
    if model is not None:
        raise ValueError(f"--out {out} would replace the model {model} it reads; choose another folder")


def export_merged(model: str | Path, out: str | Path) -> Path:
    """Write `model` (a directory with adapters) to `out` with its active adapter merged into the weights; `out` is
    filled beside it and replaces an earlier export whole (FileExistsError, before anything loads, for an `out` that
    is no earlier export: a file, a link, or a folder without its settings file, as `check_replaceable` says)."""
    from aspire.encoders import ContextualSentenceEncoder, adapters

    model, out = model_folder(model), Path(out)
    check_replaceable(out, SETTINGS_FILE, "an exported model's folder")  # it is replaced whole below
    check_not_input(out, model)
    encoder = ContextualSentenceEncoder.from_pretrained(model)
    if not adapters.is_adapted(encoder.model):  # was "merged(): this encoder has no adapters"
        raise ValueError(f"{model} has no adapter to merge: it is a plain model already, which opens as it is; to "
                         "store its difference from a base as an adapter give --adapter-only BASE --rank R")
    meta = read_meta(model)
    with atomic_folder(out) as staged:
        encoder.merged().save_pretrained(staged)
        if meta is not None:
            write_plain_meta(meta, staged)
    return out


def export_adapter(model: str | Path, out: str | Path, base: str) -> tuple[Path, str]:
    """Write `model`'s adapters, settings and document_model.json to `out`, its settings naming `base` as the
    model that gives the weights -> (out, fingerprint). Refused (ValueError) when `base`'s weights, model config or
    tokenizer are not the model's own base's (`encoding_differences`): the export must load as the very model that
    was trained. It is written beside `out`
    first and moved into place only once it loads as that model, so a refused export leaves `out` as it was. A short
    name (`minilm`) is written as given, a local folder as its absolute path (`pinned_model`): a relative one was
    read against the working directory of each later load."""
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.encoders.adapters import ADAPTER_DIR
    model, out, base = model_folder(model), Path(out), pinned_model(str(base))
    check_replaceable(out, SETTINGS_FILE, "an exported model's folder")  # it is replaced whole below
    # the base too: an export over the folder it names replaced the base's weights by adapters naming themselves
    check_not_input(out, model, resolve_model(base))
    settings = (read_json(model / SETTINGS_FILE, "encoder settings", mapping=True)
                if (model / SETTINGS_FILE).is_file() else {})
    if "adapter" not in settings:  # a plain folder has no settings file at all
        raise ValueError(f"{model} has no adapter (no 'adapter' in a {SETTINGS_FILE}); export the whole model, or "
                         "store its difference from the base as a low-rank adapter with --rank R")
    lacking = [c for c in settings.get("codes") or [] if c not in (saved_settings(base).get("codes") or [])]
    if lacking:  # the export's tokenizer and embeddings are the base's: these codes would be out of its vocabulary
        raise ValueError(f"{model} has control codes {lacking} that the base {base!r} lacks: their vocabulary entries "
                         "and embedding rows are in the model's own tokenizer and weights, not in its adapters; "
                         "export it merged instead (without --adapter-only)")
    trained_encoder = ContextualSentenceEncoder.from_pretrained(model)
    trained = trained_encoder.fingerprint()
    with atomic_folder(out) as staged:
        shutil.copytree(model / ADAPTER_DIR, staged / ADAPTER_DIR,
                        ignore=shutil.ignore_patterns("README.md"))  # peft's empty model card, naming a local path
        for config in (staged / ADAPTER_DIR).rglob("adapter_config.json"):  # the base as the settings name it (pinned), not the trained model's own path
            config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": base}, indent=2))
        (staged / SETTINGS_FILE).write_text(json.dumps({**settings, "base": base}, indent=2))
        meta = read_meta(model)
        if meta is not None:
            from aspire.train.document_model import MODEL_FILE

            (staged / MODEL_FILE).write_text(json.dumps(meta, indent=2))
        try:  # the adapters and settings loaded over the model's own base: a failure here is the base's
            exported_encoder = ContextualSentenceEncoder.from_pretrained(staged)
        except (ValueError, RuntimeError) as err:  # it named the staged folder, gone once refused, not the base
            raise ValueError(f"{base!r} is not the base {model} was trained on: its adapters do not load over it "
                             f"({err}); nothing written") from None
        differ = encoding_differences(trained_encoder, exported_encoder)  # first: it names what differs
        if differ:
            raise ValueError(f"{base!r} is not the base {model} was trained on: its {differ[0]} differs from the "
                             f"model's ({len(differ)} difference(s)), so the export would encode otherwise; nothing "
                             "written")
        exported = exported_encoder.fingerprint()
        if exported != trained:
            raise ValueError(f"{base!r} is not the base {model} was trained on (fingerprints {exported} != "
                             f"{trained}); nothing written")
    return out, exported


TOKENIZER_CALL = ("padding", "truncation", "version")  # the last call's padding and truncation, not the tokenizer's own
# the tokenizer's own call settings that change what the model sees, kept outside its Rust pipeline: the side cut
# (which pieces a text cut at the limit, or a window, keeps), the side padded (position ids), the inputs it returns
# (no token_type_ids: zeros) and whether special tokens' text is split into word pieces
TOKENIZER_SETTINGS = ("model_input_names", "padding_side", "split_special_tokens", "truncation_side")


def encoding_differences(a: ContextualSentenceEncoder, b: ContextualSentenceEncoder) -> list[str]:
    """What, besides the weights and the encoder settings, makes `a` and `b` encode differently, wider than the
    fingerprint's fields (`aspire.encoders.identity`): each model config key but the naming ones (`CONFIG_NAMING`),
    as `config hidden_act`, and tokenizer part (`tokenizer model`: the vocabulary, `tokenizer
    normalizer`, ...) or call setting (`tokenizer truncation_side`, `TOKENIZER_SETTINGS`) whose values differ; []
    where none does."""
    ca, cb = a.model.config.to_dict(), b.model.config.to_dict()
    out = [f"config {k}" for k in sorted(set(ca) | set(cb)) if k not in CONFIG_NAMING and ca.get(k) != cb.get(k)]
    ta, tb = _tokenizer_parts(a.tokenizer), _tokenizer_parts(b.tokenizer)
    return out + [f"tokenizer {k}" for k in sorted(set(ta) | set(tb)) if ta.get(k) != tb.get(k)]


def _tokenizer_parts(tokenizer) -> dict:
    """A tokenizer's parts that decide its word pieces: a fast tokenizer's serialised pipeline (vocabulary,
    normaliser, pre-tokeniser, post-processor, added tokens), or a slow one's vocabulary, and its call settings
    (`TOKENIZER_SETTINGS`)."""
    settings = {k: getattr(tokenizer, k, None) for k in TOKENIZER_SETTINGS}
    settings["model_input_names"] = list(settings["model_input_names"] or [])
    settings["split_special_tokens"] = bool(settings["split_special_tokens"])
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return {"vocabulary": tokenizer.get_vocab(), **settings}
    return {**{k: v for k, v in json.loads(backend.to_str()).items() if k not in TOKENIZER_CALL}, **settings}


def plain_weights(model: Path) -> tuple[ContextualSentenceEncoder, dict[str, torch.Tensor]]:
    """(encoder, its state dict) of a saved model, an adapted one merged first."""
    from aspire.encoders import ContextualSentenceEncoder, adapters

    encoder = ContextualSentenceEncoder.from_pretrained(model)
    if adapters.is_adapted(encoder.model):
        encoder = encoder.merged()
    return encoder, encoder.model.state_dict()


def export_low_rank(model: str | Path, out: str | Path, base: str, rank: int,
                    targets: tuple[str, ...] = LOW_RANK_TARGETS, half: bool = False) -> tuple[Path, str, dict]:
    """Write `model`, fine-tuned from `base` by any means, to `out` as a LoRA adapter of rank `rank` over `base`
    -> (out, fingerprint, report). Each linear layer named by `targets` gets the truncated SVD of its weight's
    difference from the base (the best rank-`rank` approximation in Frobenius norm; scaling 1) and its bias
    difference as the adapter's bias. The report (also `out/low_rank.json`, strict JSON: a norm made NaN by a
    model's NaN weight is null there, named under "non_finite") gives, per kind of weight, the relative norm of the
    difference and of what the adapter leaves out of it (0.0 where nothing differs); a kind whose base weights are all
    zero (the biases of a freshly initialised base) has no relative difference once the model moved them: null, with
    the reason and the difference's own norm under "undefined". `half` stores the adapter in
    float16 (half the bytes, so twice the rank fits a size); its values are rounded so before anything is
    measured (one too small for float16 becomes 0, counted in what the adapter leaves out), and it loads as float32
    (peft upcasts); one beyond float16's range (65504) is refused, naming the weight (`_check_fits_half`), before
    anything is written. A model whose weights differ from the base in names or shapes is refused, naming the
    weight; so is a NaN or an infinity in a weight or bias that the adapter carries, in
    the model or in the base (`_check_carried_finite`), before any SVD. A linear difference above `FOREIGN_BASE_NORM`
    of the base's norm (the report's `relative_norms.linear.difference`: a base that is not the model's gives ~1.0 or
    more; an all-zero one, null there, counts as infinitely far) is warned about;
    so is a `base` that the model's records contradict (`_recorded_bases`: its document_model.json encoder, its
    settings' or interpolation.json's base, its adapters' base, or those models' own records and so on, must
    include `base`; a recorded name that does not resolve here is not checked), and the two together are refused
    before anything is written, naming both."""
    import warnings

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    from aspire.encoders import ContextualSentenceEncoder
    from aspire.encoders.adapters import ADAPTER_DIR, peft_wrapping

    model, out = model_folder(model), Path(out)
    check_not_input(out, model, resolve_model(base))  # before the SVDs (`export_adapter` checks again)
    if rank < 1:
        raise ValueError(f"rank must be at least 1, got {rank}")
    recorded = _recorded_bases(model)
    contradicted = bool(recorded) and resolve_model(base).resolve() not in {path for path, _ in recorded.values()}
    tuned, tuned_weights = plain_weights(model)
    plain = AutoModel.from_pretrained(resolve_model(base))
    base_weights = plain.state_dict()
    odd = sorted(set(tuned_weights) ^ set(base_weights)) or sorted(
        n for n in tuned_weights if tuned_weights[n].shape != base_weights[n].shape)
    if odd:
        raise ValueError(f"{model}: weight {odd[0]!r} is not as in the base {base!r} (name or shape)")
    widths = [min(w.shape) for n, w in base_weights.items()
              if w.ndim == 2 and any(n.endswith(f"{t}.weight") for t in targets)]
    if widths and rank > min(widths):  # past it the SVD has no more to give: the rest would be stored zeros
        log.warning("rank %d is above the adapted weights' smallest side (%d): stored at rank %d, which is exact",
                    rank, min(widths), min(widths))
        rank = min(widths)
    with peft_wrapping():
        adapted = get_peft_model(plain, LoraConfig(r=rank, lora_alpha=float(rank), target_modules=list(targets),
                                                   lora_bias=True))
    layers = {name: layer for name, layer in adapted.base_model.model.named_modules() if hasattr(layer, "lora_A")}
    _check_carried_finite(layers, tuned_weights, base_weights, model, base)
    carried, norms = set(), {}  # kind -> [difference², base², left out²]

    def add(kind: str, diff: torch.Tensor, base_w: torch.Tensor, left: torch.Tensor) -> None:
        acc = norms.setdefault(kind, [0.0, 0.0, 0.0])
        acc[0] += float(diff.double().square().sum())
        acc[1] += float(base_w.double().square().sum())
        acc[2] += float(left.double().square().sum())

    with torch.no_grad():
        for name, layer in layers.items():
            diff = (tuned_weights[f"{name}.weight"] - base_weights[f"{name}.weight"]).double()
            u, s, vh = torch.linalg.svd(diff, full_matrices=False)
            k = min(rank, s.numel())
            up, down = (u[:, :k] * s[:k]).float(), vh[:k].float()
            bias = (tuned_weights[f"{name}.bias"] - base_weights[f"{name}.bias"]).float()
            if half:  # `down`'s rows are singular vectors (norm 1): only `up` (u·s) and the bias can overflow
                _check_fits_half(model, {f"{name}.weight": up, f"{name}.bias": bias})
                up, down = up.half().float(), down.half().float()
            layer.lora_B["default"].weight.zero_()[:, :k] = up
            layer.lora_A["default"].weight.zero_()[:k] = down
            stored = bias.half().float() if half else bias
            layer.lora_B["default"].bias.copy_(stored)
            add("linear", diff, base_weights[f"{name}.weight"], diff - up.double() @ down.double())
            add("bias", bias, base_weights[f"{name}.bias"], bias - stored)
            carried |= {f"{name}.weight", f"{name}.bias"}
        for name, weight in tuned_weights.items():
            if name in carried or not weight.is_floating_point():
                continue
            diff = weight - base_weights[name]
            kind = "layer_norm" if "LayerNorm" in name else "embeddings" if "embeddings" in name else "other"
            add(kind, diff, base_weights[name], diff)
    report = {"model": str(model), "base": base, "rank": rank, "targets": list(targets),
              "dtype": "float16" if half else "float32",
              "relative_norms": {kind: {"difference": (d / b) ** 0.5 if b else None if d else 0.0,
                                        "left_out_of_difference": (left / d) ** 0.5 if d else 0.0}
                                 for kind, (d, b, left) in sorted(norms.items())}}
    undefined = {f"relative_norms.{kind}.difference": f"the base's {kind} weights are all zero; the difference's own "
                 f"norm is {d ** 0.5:.6g}" for kind, (d, b, _) in sorted(norms.items()) if d and not b}
    if undefined:  # a freshly initialised base's biases: any move of them is infinitely many times their norm
        report["undefined"] = undefined
    moved = report["relative_norms"].get("linear", {}).get("difference", 0.0)
    moved = float("inf") if moved is None else moved  # all-zero linear weights are no base a model was tuned from
    said = f"{model} differs from the base {base!r} by {moved:.3g} of the base's linear weights"
    if contradicted and moved > FOREIGN_BASE_NORM:  # its record and its weights both say another base
        first, (_, record) = next(iter(recorded.items()))
        raise ValueError(f"{said} (above {FOREIGN_BASE_NORM:.2g}), and its records ({record}) say it was trained "
                         f"from {first!r}, not from {base!r}: give the base it was fine-tuned from")
    if contradicted:  # the chain of records may stop short of the base (a start folder without its own record)
        first, (_, record) = next(iter(recorded.items()))
        log.warning("%s records it was trained from %r (%s), not from the base %r given; the difference, %.3g of "
                    "the base's linear weights, is a fine-tune's", model, first, record, base, moved)
    elif moved > FOREIGN_BASE_NORM:
        log.warning("%s (above %.2g): %r is likely not the base it was fine-tuned from", said, FOREIGN_BASE_NORM, base)
    encoder = ContextualSentenceEncoder(adapted, tuned.tokenizer, name=str(model), **tuned.settings())
    meta = read_meta(model)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent if out.parent.exists() else None) as tmp:
        with warnings.catch_warnings():  # peft reads any 1-D LoRA tensor as an ungathered shard; lora_B's bias is 1-D
            warnings.filterwarnings("ignore", message=r"Adapter '\w+': \d+ LoRA tensor\(s\) have invalid shape: "
                                                      r"[\w.]+\.lora_B\.bias:")
            encoder.save_pretrained(tmp)
        if half:
            _to_half(Path(tmp) / ADAPTER_DIR / "adapter_model.safetensors")
        if meta is not None:
            from aspire.train.document_model import MODEL_FILE

            # one shared adapter, `default`, for every task: a per-task entry sent DocumentModel looking for the
            # first task's own adapter, which the export does not have (the model did not load)
            adapter = {**meta["model"].get("adapter", {}), "kind": "lora", "r": rank, "alpha": float(rank),
                       "dropout": 0.0, "target_modules": list(targets), "per_task": False, "scope": "all"}
            (Path(tmp) / MODEL_FILE).write_text(json.dumps({**meta, "model": {**meta["model"], "adapter": adapter}},
                                                           indent=2))
        out, fingerprint = export_adapter(tmp, out, base)
    (out / LOW_RANK_REPORT).write_text(dumps(report, indent=2))
    return out, fingerprint, report


def _check_carried_finite(layers, tuned_weights: dict, base_weights: dict, model: Path, base: str) -> None:
    """ValueError naming the first weight or bias of the adapted layers `layers` (names) that holds a NaN or an
    infinity, and whether it is the fine-tuned model's or the base's: with a NaN its difference has no SVD (torch's
    LinAlgError names no weight), with an infinity one of NaNs (an adapter of NaNs, written unsaid)."""
    for name in layers:
        for part in (f"{name}.weight", f"{name}.bias"):
            for whose, weights in ((f"the fine-tuned model {model}", tuned_weights), (f"the base {base!r}", base_weights)):
                bad = weights[part].numel() - int(weights[part].isfinite().sum())
                if bad:
                    raise ValueError(f"{whose}: weight {part!r} holds {bad} non-finite value(s) (NaN or inf), so "
                                     "its difference has no low-rank adapter; nothing written")


def _check_fits_half(model: Path, values: dict) -> None:
    """ValueError naming the first of `values` ({weight name: what its adapter stores for it}) holding a value beyond
    float16's range, and its largest magnitude: stored in float16 (`half`) it would be infinity, which loads as inf
    and NaN weights. Values too small for float16 round to 0 instead; that loss is measured in the report."""
    import torch

    top = torch.finfo(torch.float16).max
    for part, stored in values.items():
        if not bool(stored.half().isfinite().all()):  # not `> top`: up to 65520 rounds down to 65504, not to inf
            raise ValueError(f"{model}: the adapter of weight {part!r} holds {float(stored.abs().max()):.6g}, beyond "
                             f"float16's largest value ({top:.0f}), so stored in float16 it would be infinity; export "
                             "it without half (--half), in float32; nothing written")


def _recorded_bases(model: Path) -> dict[str, tuple[Path, str]]:
    """The models `model`'s records name as its start or base, followed through each one's own records ->
    {name as recorded: (resolved directory, the record naming it)}; only those that resolve here ({} where none is
    recorded, or none of them resolves: then nothing can be checked by name). A folder's records: its
    document_model.json "model.encoder", its encoder settings' "base" (an adapter export), its interpolation.json
    "base" (`aspire.train.interpolate`) and each adapter_config.json's "base_model_name_or_path"."""
    out: dict[str, tuple[Path, str]] = {}
    queue, seen = [model.resolve()], {model.resolve()}
    while queue:
        folder = queue.pop(0)
        for name, record in _records(folder):
            try:
                path = resolve_model(name).resolve()
            except ValueError:  # a name or path not found here (a hub name, a deleted run): not checked
                continue
            if path in seen:
                continue
            seen.add(path)
            out.setdefault(name, (path, f"{folder.name}/{record}"))
            queue.append(path)
    return out


def _records(folder: Path) -> list[tuple[str, str]]:
    """(model name, the record naming it) for each base or start `folder`'s own files record (`_recorded_bases`)."""
    from aspire.encoders.adapters import ADAPTER_DIR

    found = []
    meta = read_meta(folder)
    if meta is not None:
        found.append(((meta.get("model") or {}).get("encoder"), "document_model.json model.encoder"))
    if (folder / SETTINGS_FILE).is_file():
        found.append((read_json(folder / SETTINGS_FILE, "encoder settings", mapping=True).get("base"),
                      f"{SETTINGS_FILE} base"))
    if (folder / INTERPOLATION_RECORD).is_file():
        found.append((read_json(folder / INTERPOLATION_RECORD, INTERPOLATION_RECORD, mapping=True, finite=True).get("base"),
                      f"{INTERPOLATION_RECORD} base"))
    if (folder / ADAPTER_DIR).is_dir():
        for config in sorted((folder / ADAPTER_DIR).rglob("adapter_config.json")):
            found.append((read_json(config, "adapter config", mapping=True).get("base_model_name_or_path"),
                          f"{config.relative_to(folder)} base_model_name_or_path"))
    return [(name, record) for name, record in found if isinstance(name, str) and name]


def _to_half(path: Path) -> None:
    """Rewrite a safetensors file with its float32 tensors as float16 (metadata kept)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file({k: t.half() if t.dtype.is_floating_point else t for k, t in tensors.items()}, str(path), metadata=meta)


def read_meta(model: Path) -> dict | None:
    """A trained model's document_model.json, or None for a plain encoder directory without one (a bare `NaN` /
    `Infinity` in it, which `DocumentModel.save_pretrained` never writes, is a ValueError naming the file)."""
    from aspire.train.document_model import MODEL_FILE

    path = model / MODEL_FILE
    return read_json(path, MODEL_FILE, mapping=True, finite=True) if path.is_file() else None


def plain_meta(meta: dict) -> dict:
    """A copy of document_model.json `meta` with its adapter entry set to none, as it reads once the adapter is
    folded into the weights."""
    model = meta["model"]
    return {**meta, "model": {**model, "adapter": {**model.get("adapter", {}), "kind": "none"}}}


def write_plain_meta(meta: dict, out: Path) -> None:
    """Write a trained model's document_model.json `meta` beside plain weights in `out` (`plain_meta`)."""
    from aspire.train.document_model import MODEL_FILE

    (out / MODEL_FILE).write_text(json.dumps(plain_meta(meta), indent=2))


def main(argv: list[str] | None = None, prog: str = "python -m aspire.train.export") -> int:
    parser = command_parser(prog, __doc__, EXAMPLES)
    parser.add_argument("--model", required=True, help="a model directory saved with adapters (MODEL/adapter), or its training run's folder")
    parser.add_argument("--out", required=True, help="output directory for the merged model (or the adapters): new, "
                        "empty, or an earlier export's (replaced)")
    parser.add_argument("--adapter-only", metavar="BASE",
                        help="write the adapters alone over this base model (a name such as minilm, or a directory)")
    parser.add_argument("--half", action="store_true",
                        help="with --rank: store the adapter in float16 (half the size; loads as float32)")
    parser.add_argument("--rank", type=positive_int, default=None,
                        help="with --adapter-only, for a model without adapters (a full fine-tune, a soup): "
                             "store its difference from BASE as a LoRA adapter of this rank (truncated SVD)")
    add_common_options(parser)
    args = parser.parse_args(argv)
    setup_logging(args)

    def export() -> int:
        check_replaceable(args.out, SETTINGS_FILE, "an exported model's folder")  # before any model loads
        for model in [args.model, *([args.adapter_only] if args.adapter_only else [])]:
            check_model(model)
        if args.half and args.rank is None:
            raise ValueError("--half stores a low-rank adapter in float16: it needs --rank (and --adapter-only BASE)")
        if args.rank is not None:
            if not args.adapter_only:
                raise ValueError("--rank needs --adapter-only BASE: the base the low-rank adapter goes over")
            out, fingerprint, report = export_low_rank(args.model, args.out, args.adapter_only, args.rank,
                                                       half=args.half)
            left = {kind: round(r["left_out_of_difference"], 4) for kind, r in report["relative_norms"].items()}
            print(f"wrote {out} (rank-{report['rank']} adapter over {args.adapter_only}; fingerprint {fingerprint}; "
                  f"share of each difference left out: {left})")
        elif args.adapter_only:
            out, fingerprint = export_adapter(args.model, args.out, args.adapter_only)
            print(f"wrote {out} (adapters over {args.adapter_only}; fingerprint {fingerprint})")
        else:
            print(f"wrote {export_merged(args.model, args.out)}")
        return 0

    return run_command(export, args)


if __name__ == "__main__":
    sys.exit(main())
