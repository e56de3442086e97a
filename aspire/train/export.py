"""Export a model trained with adapters as plain Hugging Face weights: its active adapter merged in; or, with
`--adapter-only BASE`, as its adapters alone over a named base model (how `aspire-minilm` ships in the package:
a few MB instead of the whole encoder).

A model saved with adapters holds the base weights plus `adapter/` (peft format); it needs `peft` to
load. The merged export folds the adapter into the weights (`peft`'s `merge_and_unload`), so
`transformers.AutoModel` alone opens it and gives the adapted model's outputs. The tokenizer (with any
control codes), the encoder settings and a trained model's `document_model.json` (its adapter entry
set to none) are written beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aspire.cliutil import add_common_options, command_parser, run_command, setup_logging

EXAMPLES = """\
  aspire export --model runs/lora_aspire/checkpoint-000048/model --out runs/lora_aspire/merged
  aspire export --model runs/hybrid_aspire/checkpoint-000060/model --adapter-only minilm --out aspire/models/aspire-minilm
  python -m aspire.train.export --model runs/query_adapter/checkpoint-000250/model --out runs/query_adapter/merged
"""


def export_merged(model: str | Path, out: str | Path) -> Path:
    """Write `model` (a directory with adapters) to `out` with its active adapter merged into the weights."""
    from aspire.encoders import ContextualSentenceEncoder

    model, out = Path(model), Path(out)
    ContextualSentenceEncoder.from_pretrained(model).merged().save_pretrained(out)
    meta = read_meta(model)
    if meta is not None:
        write_plain_meta(meta, out)
    return out


def export_adapter(model: str | Path, out: str | Path, base: str) -> tuple[Path, str]:
    """Write `model`'s adapters, settings and document_model.json to `out`, its settings naming `base` as the
    model that gives the weights -> (out, fingerprint). Refused (ValueError) when `base`'s weights are not the
    model's own base weights: the export must load as the very model that was trained. It is written beside `out`
    first and moved into place only once it loads as that model, so a refused export leaves `out` as it was."""
    import shutil
    import tempfile

    from aspire.encoders import ContextualSentenceEncoder
    from aspire.encoders.adapters import ADAPTER_DIR
    from aspire.encoders.pretrained import SETTINGS_FILE

    model, out = Path(model), Path(out)
    settings = json.loads((model / SETTINGS_FILE).read_text())
    if "adapter" not in settings:
        raise ValueError(f"{model}: no adapter in its {SETTINGS_FILE}; export the whole model instead")
    trained = ContextualSentenceEncoder.from_pretrained(model).fingerprint()
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        shutil.copytree(model / ADAPTER_DIR, staged / ADAPTER_DIR,
                        ignore=shutil.ignore_patterns("README.md"))  # peft's empty model card, naming a local path
        for config in (staged / ADAPTER_DIR).rglob("adapter_config.json"):  # the base by name, not a local path
            config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": base}, indent=2))
        (staged / SETTINGS_FILE).write_text(json.dumps({**settings, "base": base}, indent=2))
        meta = read_meta(model)
        if meta is not None:
            from aspire.train.document_model import MODEL_FILE

            (staged / MODEL_FILE).write_text(json.dumps(meta, indent=2))
        exported = ContextualSentenceEncoder.from_pretrained(staged).fingerprint()
        if exported != trained:
            raise ValueError(f"{base!r} is not the base {model} was trained on (fingerprints {exported} != "
                             f"{trained}); nothing written")
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)  # gone already when it was moved into place
    return out, exported


def read_meta(model: Path) -> dict | None:
    """A trained model's document_model.json, or None for a plain encoder directory without one."""
    from aspire.train.document_model import MODEL_FILE

    path = model / MODEL_FILE
    return json.loads(path.read_text()) if path.is_file() else None


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
    parser.add_argument("--model", required=True, help="a model directory saved with adapters (MODEL/adapter)")
    parser.add_argument("--out", required=True, help="output directory for the merged model (or the adapters)")
    parser.add_argument("--adapter-only", metavar="BASE",
                        help="write the adapters alone over this base model (a name such as minilm, or a directory)")
    add_common_options(parser)
    args = parser.parse_args(argv)
    setup_logging(args)

    def export() -> int:
        if args.adapter_only:
            out, fingerprint = export_adapter(args.model, args.out, args.adapter_only)
            print(f"wrote {out} (adapters over {args.adapter_only}; fingerprint {fingerprint})")
        else:
            print(f"wrote {export_merged(args.model, args.out)}")
        return 0

    return run_command(export, args)


if __name__ == "__main__":
    sys.exit(main())
