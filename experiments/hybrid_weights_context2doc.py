"""The hybrid scorer's one weighting, chosen on a non-CSFCube dev set: context2doc dev (issue 43, item 2).

The shipped aspect model needs a single weighting (CSFCube's two-fold protocol picks one per fold). Every term of
`HybridScorer` (whole, facet, minl2, ot) is computed once for each (citing sentence, candidate) pair of context2doc's
dev and test splits; the calibration is `experiments/aspect_model.py`'s (the same seeded ACL sample, no benchmark
paper; or, as there, the papers of `--calibration-file`: such a sample written once by `aspect_model.py
--write-calibration-sample`, for a machine without the ACL data, so both scripts calibrate on one file); every
weighting of its grid is scored on dev, the best by dev MRR (ties: fewer terms, then the grid's order) is the choice,
and the test split is scored once with it, beside the default whole + facet and the whole term alone, with bootstrap
intervals and paired tests. The CSFCube figure of the chosen weighting (no two-fold choice: the one weighting on all
50 test queries) is read from that model's `aspect_model.py` report when given.

    python experiments/hybrid_weights_context2doc.py --model aspire-minilm \
        --csfcube-report experiments/results/aspect_model_aspire_minilm.json \
        --out experiments/results/hybrid_weights_context2doc.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aspect_model import GRID, calibration_sample, fit_calibration, label  # noqa: E402

from aspire.benchmarks.context2doc import load_context2doc  # noqa: E402
from aspire.benchmarks.runs import mean_scores, per_query  # noqa: E402
from aspire.benchmarks.stats import UnitScores, paired_test  # noqa: E402
from aspire.data.papers import Paper  # noqa: E402
from aspire.encoders import load_encoder  # noqa: E402
from aspire.evaluate.cache import default_cache_dir  # noqa: E402
from aspire.evaluate.encode import encode_papers  # noqa: E402
from aspire.io import write_json  # noqa: E402
from aspire.paths import DATA  # noqa: E402
from aspire.scoring.scorers import DEFAULT_HYBRID_WEIGHTS, HybridScorer  # noqa: E402

log = logging.getLogger("hybrid_weights")
METRICS = ("MRR", "nDCG@10")


def split_terms(encoder, split: str, cache_dir, chunk: int = 16) -> tuple[object, dict[str, torch.Tensor]]:
    """The split's benchmark and {term: (Q, N) raw similarities} of its queries to its candidates."""
    bench = load_context2doc(DATA / "cocite-acl", split)
    queries = [Paper(qid, "", [text]) for qid, text in bench.queries.items()]
    with encoder.query_side():
        qb, _ = encode_papers(encoder, queries, "contextual", cache_dir)
    cb, _ = encode_papers(encoder, bench.candidates, "contextual", cache_dir)
    qb, cb = qb.to(encoder.device), cb.to(encoder.device)
    scorer, parts = HybridScorer(), []
    with torch.no_grad():
        for start in range(0, len(queries), chunk):
            parts.append(scorer.term_scores(qb.index(range(start, min(start + chunk, len(queries)))), cb))
    return bench, {t: torch.cat([p[t].float().cpu() for p in parts]) for t in parts[0]}


def scored(bench, terms: dict, weights: dict, calibration: dict | None) -> dict[str, dict[str, float]]:
    """{metric: {qid: value}} of ranking every candidate by the weighted (calibrated) terms; calibration None: the
    raw similarities summed, as the scorer does with its default weights."""
    score = sum(w * ((terms[t] - calibration[t][0]) / calibration[t][1] if calibration else terms[t])
                for t, w in weights.items() if w)
    order = torch.argsort(-score, dim=1, stable=True)[:, :100].numpy()
    ids = np.array([p.paper_id for p in bench.candidates])
    run = {qid: [(pid, float(-r)) for r, pid in enumerate(ids[order[i]])] for i, qid in enumerate(bench.queries)}
    return per_query(bench.qrels, run, METRICS)


def summary(values: dict) -> dict:
    means = mean_scores(values)
    return {m: {"mean": means[m], "ci95": list(UnitScores.means(values[m]).bootstrap(2000))} for m in METRICS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="aspire-minilm")
    parser.add_argument("--calibration-papers", type=int, help="ACL papers to calibrate on (default 200)")
    parser.add_argument("--calibration-file", type=Path, help="papers JSONL to calibrate on instead of an ACL sample "
                                                              "(aspect_model.py --write-calibration-sample)")
    parser.add_argument("--csfcube-report", type=Path, help="the model's aspect_model.py report (every weighting's "
                                                            "CSFCube test figure)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.calibration_file is not None and args.calibration_papers is not None:  # the file's papers are the sample
        parser.error("--calibration-papers sizes the ACL sample; --calibration-file gives the sample itself: give one")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cache_dir, t0 = default_cache_dir(), time.perf_counter()
    encoder = load_encoder(args.model)
    n_papers = 200 if args.calibration_papers is None else args.calibration_papers
    calibration = fit_calibration(encoder, calibration_sample(n_papers, papers_file=args.calibration_file), cache_dir)
    (dev, dev_terms), (test, test_terms) = (split_terms(encoder, s, cache_dir) for s in ("dev", "test"))
    seconds_terms = time.perf_counter() - t0

    every = {}
    for values in itertools.product(*GRID.values()):
        weights = dict(zip(GRID, values))
        if any(values):
            every[label(weights)] = (weights, mean_scores(scored(dev, dev_terms, weights, calibration)))
    # the best dev MRR; ties to fewer terms, then the grid's order
    chosen = max(every, key=lambda k: (round(every[k][1]["MRR"], 12), -sum(1 for w in every[k][0].values() if w)))
    weights = every[chosen][0]
    rows = {
        f"chosen on dev ({chosen})": scored(test, test_terms, weights, calibration),
        "default (whole + facet, raw cosines)": scored(test, test_terms, DEFAULT_HYBRID_WEIGHTS, None),
        "whole term alone": scored(test, test_terms, {"whole": 1.0}, None),
    }
    names = list(rows)
    report = {
        "model": args.model,
        "fingerprint": encoder.fingerprint(),
        "calibration": calibration,
        "calibration_sample": str(args.calibration_file) if args.calibration_file else f"{n_papers} ACL papers (seed 0)",
        "grid": GRID,
        "seconds_encoding_and_terms": round(seconds_terms, 1),
        "n_queries": {"dev": len(dev.queries), "test": len(test.queries)},
        "n_candidates": {"dev": len(dev.candidates), "test": len(test.candidates)},
        "chosen": chosen,
        "dev_of_chosen": every[chosen][1],
        "dev_of_default": mean_scores(scored(dev, dev_terms, DEFAULT_HYBRID_WEIGHTS, None)),
        "test": {name: summary(values) for name, values in rows.items()},
        "paired_test": {f"{a} vs {b}": {m: paired_test(UnitScores.means(rows[a][m]), UnitScores.means(rows[b][m]))
                                        for m in METRICS}
                        for a, b in ((names[0], names[1]), (names[0], names[2]), (names[1], names[2]))},
        "every_weighting_dev": {k: v[1] for k, v in every.items()},
    }
    if args.csfcube_report:
        csf = json.loads(args.csfcube_report.read_text())
        keys = ((f"chosen ({chosen})", chosen), ("whole=1 facet=1 (calibrated)", "whole=1 facet=1"),
                ("whole=1", "whole=1"))
        report["csfcube_test_all"] = {name: csf["every_weighting_test_all"].get(key) for name, key in keys}
    write_json(args.out, report, indent=1)
    print(json.dumps({k: report[k] for k in ("chosen", "dev_of_chosen", "dev_of_default", "test", "paired_test",
                                             *(("csfcube_test_all",) if args.csfcube_report else ()))},
                     indent=1, default=str))


if __name__ == "__main__":
    main()
