"""Weight-space interpolation of a fine-tuned model with the model it started from (WiSE-FT).

Wortsman et al. (CVPR 2022) keep most of a fine-tuned model's gain on its training task and most of the
pre-trained model's robustness elsewhere by averaging the two sets of weights: θ = (1 − α)·θ_base + α·θ_tuned.
The result is one ordinary model (no ensemble at query time), saved like any trained model. α = 0 gives the
base, α = 1 the fine-tuned model; 0.5 is the paper's fixed default.

A model trained with control codes holds embedding rows the base lacks: the shared rows are interpolated,
the code rows kept as trained. An adapted model (peft), the fine-tuned one or the base, is merged first. Any other difference between the
two architectures is an error naming the weight.

Given several models (fine-tuned from one base: seeds of one config, or models of different objectives),
it writes their uniform soup (Wortsman et al., ICML 2022), also one ordinary model; a member may itself be
a soup, and `interpolation.json` records each trained model's share of the result. The record names every model as
any working directory loads it (`aspire.encoders.pretrained.pinned_model`: a short name as given, a folder its absolute
path), so it is read back the same from anywhere. Members of different kinds
(a hybrid model with whole-abstract distilled ones, all fine-tuned from one encoder) make a soup only when asked
(`--mixed-kinds`): the first member's document_model.json then describes it, and the record keeps what differed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from aspire.cliutil import add_common_options, command_parser, run_command, setup_logging
from aspire.encoders.pretrained import check_model
from aspire.io import atomic_folder, finite_dumps, read_json
from aspire.paths import model_folder
from aspire.storage import check_replaceable

if TYPE_CHECKING:
    import torch


EXAMPLES = """\
  python -m aspire.train.interpolate --model runs/multitask_mixed/checkpoint-000500/model --alpha 0.5 --out runs/multitask_mixed/wise-0.5
  python -m aspire.train.interpolate --model runs/lora/checkpoint-000600/model --base minilm --alpha 0.25 --out runs/lora/wise-0.25
  python -m aspire.train.interpolate --model runs/s0 runs/s1 runs/s2 --out runs/soup     # each run's best checkpoint
  python -m aspire.train.interpolate --model runs/soup/hybrid runs/soup/distilled --mixed-kinds --out runs/soup/mixed
"""
RECORD_FILE = "interpolation.json"


def blend(name: str, base: torch.Tensor | None, tuned: torch.Tensor, alpha: float) -> torch.Tensor:
    """(1 − α)·base + α·tuned for one weight; word-embedding rows only the tuned model has (its added
    tokens) are kept as they are. A non-float buffer (position ids) must be equal in both and is kept; one that is
    float in one model and not in the other is an error naming the weight and both dtypes (interpolating it
    would turn ids 0, 1, 2 into 0.5, 1.5, 2.5)."""
    import torch  # here, not at the top: `aspire interpolate --help` loads no torch

    if base is None:
        raise ValueError(f"weight {name!r} of the fine-tuned model is not in the base model")
    if base.is_floating_point() != tuned.is_floating_point():
        raise ValueError(f"weight {name!r} is {tuned.dtype} in the fine-tuned model, {base.dtype} in the base: "
                         "a float weight cannot be blended with an integer buffer")
    if not tuned.is_floating_point():
        if not torch.equal(base, tuned):
            raise ValueError(f"weight {name!r}: non-float buffers differ between base and fine-tuned model")
        return tuned
    if base.shape != tuned.shape:
        added_rows = (name.endswith("word_embeddings.weight") and base.dim() == tuned.dim() == 2
                      and base.shape[1] == tuned.shape[1] and base.shape[0] < tuned.shape[0])
        if not added_rows:
            raise ValueError(f"weight {name!r}: shape {tuple(tuned.shape)} in the fine-tuned model, "
                             f"{tuple(base.shape)} in the base")
        out = tuned.clone()
        out[: base.shape[0]] = torch.lerp(base.to(tuned.dtype), tuned[: base.shape[0]], alpha)
        return out
    return torch.lerp(base.to(tuned.dtype), tuned, alpha)


def start_weights(base: str | Path) -> dict[str, torch.Tensor]:
    """The weights of the model `base` names as the package encodes with it: a model saved with adapters (a
    trained checkpoint's model, a shipped adapter-only model such as `aspire-minilm`) with its active adapter
    merged in, as a model trained from it started; a plain Hugging Face folder as `AutoModel` opens it."""
    from transformers import AutoModel

    from aspire.encoders.pretrained import read_settings, resolve_model
    from aspire.train.export import plain_weights

    path = resolve_model(base)
    if "adapter" in read_settings(path):  # AutoModel would open its base weights alone, or nothing (adapters only)
        return plain_weights(path)[1]
    return AutoModel.from_pretrained(path).state_dict()


def interpolate(model: str | Path, alpha: float, out: str | Path, base: str | None = None) -> Path:
    """Write to `out` the model `model` with its weights moved back toward `base` (default: the encoder
    it was trained from, as its document_model.json records) — (1 − α)·base + α·model. A base whose tokenizer puts a
    token on another embedding row than the model's is an error naming the token. The record (`RECORD_FILE`) names the
    model and the base as any working directory loads them (`pinned_model`: a short name as given, a local folder its
    absolute path, a training run's folder its checkpoint's model folder, the one interpolated with)."""
    import torch

    from aspire.encoders.pretrained import pinned_model
    from aspire.train.document_model import MODEL_FILE
    from aspire.train.export import check_not_input, plain_weights, read_meta, write_plain_meta

    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    model, out = model_folder(model), Path(out)
    check_not_input(out, model, *([base] if base is not None else []))
    meta = read_meta(model)
    if base is None:
        if meta is None:
            raise ValueError(f"{model} has no {MODEL_FILE} naming its base encoder: give --base")
        base = meta["model"]["encoder"]
    base = pinned_model(str(base))  # once: the weights blended and the record's name are one folder's
    tuned, tuned_weights = plain_weights(model)
    base_weights = start_weights(base)
    _check_base_tokens(tuned.tokenizer.get_vocab(), base)
    extra = sorted(set(base_weights) - set(tuned_weights))
    if extra:
        raise ValueError(f"the base model {base!r} has weights the fine-tuned model lacks: {extra[:5]}")
    with torch.no_grad():
        tuned.model.load_state_dict({name: blend(name, base_weights.get(name), weight, alpha)
                                     for name, weight in tuned_weights.items()})
    record = {"model": pinned_model(str(model)), "base": str(base), "alpha": alpha}  # as read from any folder
    with atomic_folder(out) as staged:  # an earlier interpolation's files (its document_model.json) go with it
        tuned.save_pretrained(staged)
        if meta is not None:
            write_plain_meta(meta, staged)
        (staged / RECORD_FILE).write_text(finite_dumps(record, f"cannot write {out / RECORD_FILE}:", indent=2))
    return out


def _check_base_tokens(mine: dict[str, int], base: str) -> None:
    """ValueError naming the token unless every token of `base`'s vocabulary has the same id in the fine-tuned
    model's (`mine`) and the tokens only it has (control codes) come after them: a shared row of the word
    embeddings is blended with the same row of the base, so it must stand for one token in both."""
    from transformers import AutoTokenizer

    from aspire.encoders import ContextualSentenceEncoder
    from aspire.encoders.pretrained import read_settings, resolve_model

    path = resolve_model(base)
    theirs = AutoTokenizer.from_pretrained(ContextualSentenceEncoder.weights_folder(path, read_settings(path), {},
                                                                                    "the base")).get_vocab()
    odd = sorted(t for t in mine.keys() | theirs.keys()
                 if mine.get(t) != theirs.get(t) and (t in theirs or mine[t] < len(theirs)))
    if odd:
        raise ValueError(f"token {odd[0]!r} has id {mine.get(odd[0])} in the fine-tuned model, {theirs.get(odd[0])} "
                         f"in the base {base!r}: interpolation blends each embedding row, which must be one token in both")


def soup(models: Sequence[str | Path], out: str | Path, mixed_kinds: bool = False) -> Path:
    """Write to `out` the uniform soup of `models`: every weight the mean of theirs. The first model's
    document_model.json goes with it, and the record names each member with its own record (so a soup
    of soups keeps its history) and each trained model's weight in it (`leaf_weights`); a model whose
    `model` or `abstract` section, weights (names, shapes), vocabulary (a token on another embedding row: task
    codes in another order), control code or encoder settings (max_length, ...) differ from the first's, or a model
    given twice, is an error naming it and the key. The record names each member as any working directory loads it
    (`pinned_model`: a folder its absolute path, a training run's folder its checkpoint's model folder, the one
    averaged), in its `soup`, `members`, `weights` and `mixed` alike.
    With `mixed_kinds` the sections and encoder settings may differ (kind, max_length, ...) but for the base encoder
    and control code; the soup encodes with the first's; the record lists each member's differing section keys under
    `mixed`."""
    import torch

    from aspire.encoders.pretrained import pinned_model
    from aspire.train.document_model import MODEL_FILE
    from aspire.train.export import check_not_input, plain_weights, read_meta, write_plain_meta

    models, out = [model_folder(m) for m in models], Path(out)
    if len(models) < 2:
        raise ValueError(f"a soup needs at least two models, got {len(models)}")
    check_not_input(out, *models)
    where = [m.resolve() for m in models]
    twice = [(m, models[where.index(w)]) for i, (m, w) in enumerate(zip(models, where)) if w in where[:i]]
    if twice:  # its record names each member once: a repeat would weigh more than the record says
        raise ValueError(f"{twice[0][0]}: the same model as {twice[0][1]}; a soup's models must differ")
    metas = [read_meta(model) for model in models]
    odd = [model for model, meta in zip(models, metas) if (meta is None) != (metas[0] is None)]
    if odd:
        raise ValueError(f"{odd[0]}: {MODEL_FILE} is in only one of it and {models[0]}")
    pinned = {model: pinned_model(str(model)) for model in models}  # the record's: as read from any folder
    first = _settings(metas[0])
    mixed = {}
    for model, meta in zip(models[1:], metas[1:]):
        section = _settings(meta)
        differ = sorted(k for k in section.keys() | first.keys() if section.get(k) != first.get(k)
                        and not (k == "encoder" and _same_folder(section.get(k), first.get(k))))
        refused = [k for k in differ if not mixed_kinds or k == "encoder"]
        if refused:
            hint = "" if mixed_kinds or refused[0] == "encoder" else \
                " (give --mixed-kinds to soup models of different kinds)"
            key = refused[0] if refused[0].startswith("abstract.") else f"model.{refused[0]}"
            raise ValueError(f"{model}: {key} is {section.get(refused[0])!r}, "
                             f"{first.get(refused[0])!r} in {models[0]}{hint}")
        if differ:
            mixed[pinned[model]] = {k: section.get(k) for k in differ}
    encoder, mean = plain_weights(models[0])
    for k, model in enumerate(models[1:], start=2):
        member, weights = plain_weights(model)
        _check_same_tokens(member, encoder, model, models[0])
        mine, theirs = member.settings(), encoder.settings()  # the soup encodes with the first's alone
        unlike = sorted(s for s in mine.keys() | theirs.keys() if mine.get(s) != theirs.get(s))
        if unlike and not mixed_kinds:
            raise ValueError(f"{model}: encoder setting {unlike[0]} is {mine.get(unlike[0])!r}, "
                             f"{theirs.get(unlike[0])!r} in {models[0]} (give --mixed-kinds to soup models of "
                             "different kinds; the first's settings then describe the soup)")
        names = set(weights) ^ set(mean)
        if names:
            raise ValueError(f"{model}: weight {sorted(names)[0]!r} is in only one of it and {models[0]}")
        with torch.no_grad():
            for name, weight in weights.items():
                if weight.shape != mean[name].shape:
                    raise ValueError(f"{model}: weight {name!r} has shape {tuple(weight.shape)}, "
                                     f"{tuple(mean[name].shape)} in {models[0]}")
                if weight.is_floating_point() != mean[name].is_floating_point():  # an id buffer is not averaged
                    raise ValueError(f"{model}: weight {name!r} is {weight.dtype}, {mean[name].dtype} in {models[0]}")
                mean[name] = blend(name, mean[name], weight, 1.0 / k)  # running mean
    with torch.no_grad():
        encoder.model.load_state_dict(mean)
    members = {pinned[m]: _record(m) for m in models}
    record = {"soup": list(members), "members": members}
    if mixed:
        record["mixed"] = mixed
    record["weights"] = leaf_weights(record)
    with atomic_folder(out) as staged:  # an earlier soup's files (its document_model.json) go with it
        encoder.save_pretrained(staged)
        if metas[0] is not None:
            write_plain_meta(metas[0], staged)
        (staged / RECORD_FILE).write_text(finite_dumps(record, f"cannot write {out / RECORD_FILE}:", indent=2))
    return out


def _settings(meta: dict | None) -> dict:
    """The settings of a document_model.json that say how a model encodes, compared across a soup's members: its
    `model` section (adapters merged) and kind `abstract`'s text settings as `abstract.KEY`."""
    from aspire.train.export import plain_meta

    if meta is None:
        return {}
    return {**plain_meta(meta)["model"], **{f"abstract.{k}": v for k, v in (meta.get("abstract") or {}).items()}}


def _same_folder(a, b) -> bool:
    """Whether two recorded `model.encoder`s load one folder: a model trained with `model.encoder=base` recorded
    `base` as typed (earlier) or its absolute folder (now), and the two must soup; names that do not load here
    compare as text."""
    from aspire.encoders.pretrained import resolve_model

    try:
        return resolve_model(str(a)).resolve() == resolve_model(str(b)).resolve()
    except (ValueError, OSError, TypeError):
        return False


def _check_same_tokens(member, first, model: Path, first_model: Path) -> None:
    """ValueError naming `model` unless its tokenizer gives every piece the id `first`'s does and both put the
    same control code before every paper: a row of the word embeddings is averaged with the same row of the
    others, so each row must stand for one token in all of them (task codes are added in the order of a run's
    tasks)."""
    mine, theirs = member.tokenizer.get_vocab(), first.tokenizer.get_vocab()
    odd = sorted(t for t in mine.keys() | theirs.keys() if mine.get(t) != theirs.get(t))
    if odd:
        raise ValueError(f"{model}: token {odd[0]!r} has id {mine.get(odd[0])} in it, {theirs.get(odd[0])} in "
                         f"{first_model}: a soup averages each embedding row, which must be one token in every model")
    if member.code != first.code:
        raise ValueError(f"{model}: every paper gets the control code {member.code!r} in it, {first.code!r} in "
                         f"{first_model}")


def _record(model: Path) -> dict | None:
    """The interpolation record a model was written with, or None for a trained model (a bare `NaN` / `Infinity` in
    it, which `interpolate` and `soup` never write, is a ValueError naming the file)."""
    path = model / RECORD_FILE
    return read_json(path, "interpolation record", mapping=True, finite=True) if path.is_file() else None


def leaf_weights(record: dict) -> dict[str, float]:
    """Weight of each trained model in a soup, nested soups flattened: a soup of a three-seed soup and a
    two-seed soup gives each of the first three 1/6 and each of the other two 1/4. A member without a
    soup record of its own (a trained model, a WiSE-FT interpolation) is a leaf."""
    weights: dict[str, float] = {}
    members = record.get("members", {})
    for model in record["soup"]:
        inner = members.get(model)
        parts = leaf_weights(inner) if inner is not None and "soup" in inner else {model: 1.0}
        for leaf, w in parts.items():
            weights[leaf] = weights.get(leaf, 0.0) + w / len(record["soup"])
    return weights


def main(argv: list[str] | None = None, prog: str = "python -m aspire.train.interpolate") -> int:
    parser = command_parser(prog, __doc__, EXAMPLES)
    parser.add_argument("--model", required=True, nargs="+",
                        help="a fine-tuned model directory (a checkpoint's model/); several: their uniform soup")
    parser.add_argument("--alpha", type=float, default=None,
                        help="weight of the fine-tuned model, 0..1 (one --model only)")
    parser.add_argument("--base", default=None,
                        help="the model it started from (default: the encoder its document_model.json names)")
    parser.add_argument("--mixed-kinds", action="store_true",
                        help="soup models of different kinds fine-tuned from one encoder; the first describes the soup")
    parser.add_argument("--out", required=True, help="output directory for the interpolated model: new, empty, or an "
                        "earlier interpolation's (its files replaced)")
    add_common_options(parser)
    args = parser.parse_args(argv)
    setup_logging(args)

    def write() -> int:
        # a run folder or another model given as --out would get these model files among its own
        check_replaceable(args.out, RECORD_FILE, "an earlier interpolation's folder")
        for model in [*args.model, *([args.base] if args.base else [])]:  # by name, before torch loads
            check_model(model)
        if len(args.model) > 1:
            if args.alpha is not None or args.base is not None:
                raise ValueError("--alpha and --base interpolate one model; a soup of several takes neither")
            print(f"wrote {soup(args.model, args.out, args.mixed_kinds)}")
            return 0
        if args.alpha is None:
            raise ValueError("--alpha is required with one --model")
        if args.mixed_kinds:
            raise ValueError("--mixed-kinds is for a soup of several models")
        print(f"wrote {interpolate(args.model[0], args.alpha, args.out, args.base)}")
        return 0

    return run_command(write, args)


if __name__ == "__main__":
    sys.exit(main())
