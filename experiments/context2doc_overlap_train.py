"""What the co-citation pairs that context2doc test sentences also cite are worth: training folders without them.

    python experiments/context2doc_overlap_train.py --examples OUT/5_examples --out runs/overlap [--seed 0]

Writes two copies of the examples folder under `--out`, each with the same dev split, abstracts and co-cited
sets (so in-batch partners are masked alike), and fewer train examples:
- `without_overlap`: less every train pair that some context2doc test sentence cites together
  (`context2doc_overlap.overlap_pairs`: 194 of the 1,065 of today's `run-all`);
- `without_random`: less as many train pairs drawn (seeded) from the others: the control for training on fewer pairs.
Training the same recipe on the full folder and on each copy, and scoring each on context2doc's test split,
separates the overlap's worth from the loss of data (experiments/results/context2doc_overlap.md).
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
from pathlib import Path

from aspire.benchmarks.context2doc import load_context2doc
from aspire.io import read_jsonl, write_json, write_jsonl
from aspire.paths import DATA


def overlap_pairs(data: Path) -> set[tuple[str, str]]:
    """The (sorted) pairs of papers some context2doc test sentence cites together."""
    bench = load_context2doc(data, "test")
    return {pair for rel in bench.qrels.values() for pair in itertools.combinations(sorted(rel), 2)}


def pair_of(example: dict) -> tuple[str, str]:
    return tuple(sorted((example["query_id"], example["positive_id"])))


def write_without(examples: Path, out: Path, drop: set[tuple[str, str]]) -> dict:
    """A copy of `examples` whose train split leaves out the examples of the `drop` pairs; returns its counts."""
    if out.exists():
        raise FileExistsError(f"{out} exists: give a new --out")
    shutil.copytree(examples, out)
    train = read_jsonl(examples / "examples.train.jsonl")
    kept = [e for e in train if pair_of(e) not in drop]
    write_jsonl(out / "examples.train.jsonl", kept)
    return {"folder": str(out), "train_examples": len(kept), "left_out": len(train) - len(kept)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", required=True, type=Path, help="a run-all output's 5_examples folder")
    p.add_argument("--data", type=Path, default=DATA / "cocite-acl", help="the co-citation data folder")
    p.add_argument("--out", required=True, type=Path, help="a new folder for the two copies")
    p.add_argument("--seed", type=int, default=0, help="draws the control's pairs")
    args = p.parse_args()
    test_pairs = overlap_pairs(args.data)
    train_pairs = sorted({pair_of(e) for e in read_jsonl(args.examples / "examples.train.jsonl")})
    overlapping = {pair for pair in train_pairs if pair in test_pairs}
    others = [pair for pair in train_pairs if pair not in test_pairs]
    control = set(random.Random(args.seed).sample(others, len(overlapping)))
    args.out.mkdir(parents=True, exist_ok=False)
    report = {"examples": str(args.examples), "train_pairs": len(train_pairs), "overlapping_pairs": len(overlapping),
              "seed": args.seed,
              "without_overlap": write_without(args.examples, args.out / "without_overlap", overlapping),
              "without_random": write_without(args.examples, args.out / "without_random", control)}
    write_json(args.out / "report.json", report)
    print(report)


if __name__ == "__main__":
    main()
