"""Train a document model (tsAspire, otAspire, ts+otAspire, ablations) from a YAML config.

`python -m aspire.train --config configs/NAME.yaml [section.key=value ...] [--resume]`; under
`torchrun --nproc_per_node N -m aspire.train ...` the same command trains with DDP.
Unknown config keys are errors (`aspire.config.ConfigError`), and so is, before a model loads or any data is read,
a missing input path or a `train.out_dir` that is a file (`aspire.train.trainer.run`). The final metrics are
printed as JSON (`aspire.train.trainer.end_summary`: the last logged figures of an earlier step than the end's, after
`train.stop_after`, under `last_logged` with their step), then (stderr) the model the run folder stands for: its best
checkpoint's (else its last), which `--model RUN_FOLDER` loads in every command (`aspire.paths.run_model`).
"""

from __future__ import annotations

import logging
import os
import sys

from aspire.cliutil import (
    OVERRIDES_HELP,
    add_common_options,
    command_parser,
    device_or_auto,
    normalize_overrides,
    print_json,
    run_command,
    setup_logging,
)
from aspire.config import ConfigError, load_config
from aspire.encoders.pretrained import check_model
from aspire.paths import BEST, run_model
from aspire.train.config import Config

log = logging.getLogger("aspire.train")

EXAMPLES = """\
  aspire train --config configs/ts_aspire.yaml train.max_steps=200 train.out_dir=runs/ts
  aspire train --config configs/ot_aspire.yaml data.hard_negatives=runs/cc/hard_citation/hard_negatives.jsonl
  aspire train --config configs/ot_aspire.yaml train.out_dir=runs/ot --resume
  torchrun --nproc_per_node 2 -m aspire.train --config configs/ot_aspire.yaml     # DDP
"""


def main(argv: list[str] | None = None, prog: str = "python -m aspire.train") -> int:
    parser = command_parser(prog, __doc__, EXAMPLES)
    parser.add_argument("--config", required=True, help="configs/NAME.yaml (each extends configs/base.yaml)")
    parser.add_argument("--resume", action="store_true", help="continue from train.out_dir/latest")
    add_common_options(parser, device=device_or_auto, batch_size=True,
                       device_help="auto, cpu, cuda, cuda:N or mps; sets train.device (default: the config's, auto)",
                       batch_size_help="pairs per micro-batch on each rank; sets train.batch_size (default: the "
                                       "config's)")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help=OVERRIDES_HELP)
    args, extra = parser.parse_known_args(argv)  # `--section.key=value` (old style) and overrides after an option
    bad = [o for o in extra if "=" not in o or (o.startswith("-") and not o.startswith("--"))]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)}")
    try:
        overrides = normalize_overrides(args.overrides + extra)
    except ValueError as err:  # an override without `=`, refused as the other argument errors are
        parser.error(str(err))
    overrides += [f"train.{key}={value}" for key, value in (("device", args.device), ("batch_size", args.batch_size))
                  if value is not None]
    if args.quiet:
        overrides.append("train.progress=false")
    try:
        cfg = load_config(Config, args.config, overrides)
    except ConfigError as err:
        parser.error(str(err))
    setup_logging(args)
    return run_command(lambda: _train(cfg, args.resume), args)


def _train(cfg: Config, resume: bool) -> int:
    if not resume:  # a mistyped model.encoder before torch loads (a resumed run loads its checkpoint's model)
        check_model(cfg.model.encoder)
    from aspire.train.trainer import run

    print_json(run(cfg, resume=resume))
    model = run_model(cfg.train.out_dir) if os.environ.get("RANK", "0") == "0" else None
    if model is not None:
        which = "lowest dev loss" if (model.parents[1] / BEST).is_file() else "last checkpoint"
        log.info("model (%s): %s; --model %s loads it", which, model, cfg.train.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
