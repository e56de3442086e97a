"""The main job on embedded defaults: encode CSFCube with `minilm` and evaluate it end to end.

    python -m aspire.demo [--model minilm] [--data ../shared/data/csfcube] [--out runs/demo]

Encodes the 4,205 CSFCube abstracts once (contextual sentence vectors; cached), ranks every facet's
pools with single match (min-L2), multi match (OT, τ = 5000, ε = 0.05) and the whole-abstract vector
("title abstract" as one string, as sentence-transformers encodes it),
and prints the test-protocol MAP / NDCG%20 per facet beside SPECTER's published row.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from aspire.evaluate import csfcube
from aspire.evaluate.cache import default_cache_dir

REPO = Path(__file__).resolve().parents[1]
SPECTER = {"background": (43.95, 66.70), "method": (22.44, 37.41), "result": (36.79, 56.67), "all": (34.23, 53.28)}
RUNS = (
    ("contextual min-L2 (single match)", "minl2", {}),
    ("contextual OT, tau=5000 (multi match)", "ot", {"tau": 5000.0}),
    ("whole-abstract vector", "abstract", {}),
)
# the whole-abstract vector as sentence-transformers' encode makes it: one string, L2-normalised,
# cut at the pipeline's word-piece limit
ST_MAX_LENGTH = {"minilm": 256, "mpnet": 384}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aspire.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm", help="minilm (default), mpnet or a local HF directory")
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "csfcube"))
    parser.add_argument("--out", default=str(REPO / "runs" / "demo"))
    parser.add_argument("--cache-dir", default=str(default_cache_dir()), help="sentence-vector cache (default %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not Path(args.data).is_dir():
        print(f"error: CSFCube not found at {args.data} (see ../shared/data/README.md)", file=sys.stderr)
        return 2

    rows = [("SPECTER (published ranked pools)", SPECTER)]
    for label, scorer, options in RUNS:
        print(f"\n== {label}: encoding (cached after the first run) and ranking CSFCube pools", flush=True)
        out = Path(args.out) / scorer
        encode = {}
        if scorer == "abstract":
            encode = {"joiner": " ", "normalize": True}
            if args.model in ST_MAX_LENGTH:
                encode["max_length"] = ST_MAX_LENGTH[args.model]
        results = csfcube.run_csfcube(args.data, args.model, scorer, out, scorer_options=options,
                                      cache_dir=args.cache_dir, encode_options=encode)
        rows.append((f"{args.model} {label}", {g: (results["test"][g]["MAP"], results["test"][g]["NDCG%20"]) for g in SPECTER}))

    print(f"\nCSFCube test protocol, MAP / NDCG%20 (ranked pools and results.json under {args.out}):\n")
    print("| model | background | method | result | all |")
    print("|---|---|---|---|---|")
    for name, vals in rows:
        print(f"| {name} | " + " | ".join(f"{vals[g][0]:.2f} / {vals[g][1]:.2f}" for g in SPECTER) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
