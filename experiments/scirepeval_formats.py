"""Collect the SciRepEval-format results of several models into one table with paired tests (issue 42).

    python experiments/scirepeval_formats.py --run minilm=runs/scirepeval/minilm --run mpnet=runs/scirepeval/mpnet \
        --run cocite_author=runs/scirepeval/cocite_author_eval --base minilm \
        --out experiments/results/scirepeval_formats.json

Each DIR is a suite folder (`aspire evaluate suite --benchmarks venue year same-author --out DIR`) holding
`venue/`, `year/`, `same-author/` with their `results.json`. Every model other than the base is compared with
the base, paired over the test papers (venue, year) or queries (same-author): `aspire.evaluate.probes.compare_probe_results`.
A format a model has no results for is listed as missing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aspire.evaluate.probes import FORMATS, METRICS, compare_probe_results
from aspire.io import write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", action="append", required=True, metavar="TAG=DIR")
    parser.add_argument("--base", required=True, help="the TAG every other run is compared with")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    runs = parse_runs(parser, args.run, args.base)
    table: dict = {}
    for tag, folder in runs.items():
        for fmt in FORMATS:
            path = Path(folder) / fmt / "results.json"
            if not path.is_file():
                table.setdefault(tag, {})[fmt] = {"missing": str(path)}
                continue
            res = json.loads(path.read_text(encoding="utf-8"))
            entry = {"fingerprint": res["encoder_fingerprint"], "seconds": res["seconds"],
                     **{k: res[k] for k in ("sizes", "pool", "n_queries") if k in res}, "representations": {}}
            for rep, r in res["representations"].items():
                entry["representations"][rep] = {"metrics": r["metrics"], "ci95": r["ci95"],
                                                 **({"chosen": r["chosen"]} if "chosen" in r else {})}
            base_path = Path(runs[args.base]) / fmt / "results.json"
            if tag != args.base and base_path.is_file():
                entry["vs_base"] = compare_probe_results(path, base_path)
            table.setdefault(tag, {})[fmt] = entry
    write_json(args.out, {"base": args.base, "runs": runs, "table": table})
    for rep in ("abstract", "sentences"):
        heads = [f"{fmt} {m}" for fmt in FORMATS for m in METRICS[fmt]]
        print(f"\n{rep}\n| model | " + " | ".join(heads) + " |\n|---|" + "---|" * len(heads))
        for tag, fmts in table.items():
            print(f"| {tag} | " + " | ".join(_cell(fmts[fmt], rep, m) for fmt in FORMATS for m in METRICS[fmt]) + " |")


def parse_runs(parser: argparse.ArgumentParser, specs: list[str], base: str) -> dict[str, str]:
    """`{TAG: DIR}` of the `--run TAG=DIR` specs; a parser error for a spec without `=`, a tag given twice or a
    `--base` that names no run."""
    runs: dict[str, str] = {}
    for spec in specs:
        tag, sep, folder = spec.partition("=")
        if not sep or not tag or not folder:
            parser.error(f"--run {spec!r}: expected TAG=DIR")
        if tag in runs:
            parser.error(f"--run: tag {tag!r} given twice ({runs[tag]} and {folder})")
        runs[tag] = folder
    if base not in runs:
        parser.error(f"--base {base!r} names no --run; tags: {sorted(runs)}")
    return runs


def _cell(entry: dict, rep: str, metric: str) -> str:
    """`value [lo, hi]`, and the paired difference to the base with its p-value; "not run" when missing."""
    if "missing" in entry:
        return "not run"
    r = entry["representations"][rep]
    lo, hi = r["ci95"][metric]
    cell = f"{r['metrics'][metric]:.3f} [{lo:.3f}, {hi:.3f}]"
    if "vs_base" in entry:
        t = entry["vs_base"][f"{rep}/{metric}"]
        cell += f"; Δ {t['delta']:+.3f} (p {t['p_value']:.3f})"
    return cell

if __name__ == "__main__":
    main()
