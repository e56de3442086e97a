"""`python -m aspire.train --config configs/NAME.yaml [--section.key=value ...] [--resume]`.

Under `torchrun --nproc_per_node N -m aspire.train ...` the same command trains with DDP.
Unknown config keys are errors (`aspire.config.ConfigError`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from aspire.config import ConfigError, load_config
from aspire.train.config import Config
from aspire.train.trainer import run


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m aspire.train", description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--config", required=True, help="configs/NAME.yaml")
    parser.add_argument("--resume", action="store_true", help="continue from train.out_dir/latest")
    args, overrides = parser.parse_known_args(argv)
    bad = [o for o in overrides if not (o.startswith("--") and "=" in o)]
    if bad:
        parser.error(f"overrides must look like --section.key=value, got {bad}")
    try:
        cfg = load_config(Config, args.config, overrides)
    except ConfigError as err:
        parser.error(str(err))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = run(cfg, resume=args.resume)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
