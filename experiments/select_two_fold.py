"""Choose among CSFCube runs by the two-fold protocol and report the choice's test figures.

CSFCube's folds are two halves of one query set: `fold1_dev` is `fold2_test` and `fold2_dev` is
`fold1_test`. The evaluator's `dev` figure (the fold1_dev mean, as in the published script) thus
scores half of the test queries, and choosing on it chooses on test. Here the run best on
`foldK_dev` is scored on `foldK_test`, for each K; the test figure is the mean of the two folds'
test means, each from the run chosen on its own fold's dev half (the two choices may differ).

    python experiments/select_two_fold.py --candidate 'runs/csfcube/sweep-abstract-*/w*' --candidate runs/csfcube/X
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

from aspire.evaluate.csfcube import GROUPS, format_table

FOLDS = ("fold1", "fold2")


def load(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "results.json").read_text(encoding="utf-8"))


def select_two_fold(candidates: dict[str, dict], group: str = "all", metric: str = "MAP") -> dict:
    """{fold: chosen label} and the cross-fitted test figures {group: {metric: value}}."""
    if not candidates:
        raise ValueError("no candidate runs to choose from")
    chosen = {fold: max(candidates, key=lambda name: candidates[name]["folds"][group][f"{fold}_dev"][metric])
              for fold in FOLDS}
    test = {g: {m: sum(candidates[chosen[fold]]["folds"][g][f"{fold}_test"][m] for fold in FOLDS) / len(FOLDS)
                for m in ("MAP", "NDCG%20")} for g in GROUPS}
    return {"chosen": chosen, "test": test}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--candidate", action="append", required=True,
                    help="a folder holding results.json, or a glob of such folders")
    ap.add_argument("--select", default="all:MAP", help="GROUP:METRIC of each dev fold to maximise")
    ap.add_argument("--out", type=Path, help="write the choice and figures here as JSON")
    args = ap.parse_args()
    folders = sorted({f for spec in args.candidate for f in (glob.glob(spec) or [spec])})
    missing = [f for f in folders if not (Path(f) / "results.json").is_file()]
    if missing:
        ap.error(f"no results.json in {', '.join(missing)}")
    group, _, metric = args.select.partition(":")
    result = select_two_fold({f: load(f) for f in folders}, group, metric)
    print(f"{len(folders)} candidates; chosen on fold1_dev: {result['chosen']['fold1']}; "
          f"on fold2_dev: {result['chosen']['fold2']}")
    print("test (mean of the two folds' test halves, each with its own fold's choice), MAP / NDCG%20:")
    print(format_table(result, "test"))
    if args.out:
        args.out.write_text(json.dumps({"candidates": folders, "select": args.select, **result}, indent=1),
                            encoding="utf-8")


if __name__ == "__main__":
    main()
