"""Export a model trained with adapters as plain Hugging Face weights: its active adapter merged in.

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
    parser.add_argument("--out", required=True, help="output directory for the merged model")
    add_common_options(parser)
    args = parser.parse_args(argv)
    setup_logging(args)

    def export() -> int:
        print(f"wrote {export_merged(args.model, args.out)}")
        return 0

    return run_command(export, args)


if __name__ == "__main__":
    sys.exit(main())
