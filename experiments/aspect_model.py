"""The hybrid aspect model on CSFCube: one encoder pass a paper, four terms, weights chosen by the two-fold protocol.

Each term of `aspire.scoring.scorers.HybridScorer` (whole, facet, minl2, ot) is computed once for every
(facet query, pooled candidate) pair from the contextual pass (`DocBatch.whole` is the pass's whole-abstract
vector). The calibration (each term's mean and standard deviation) is fitted, without labels, on pairs of
ACL Anthology papers that are in no benchmark. Every weighting of the grid is then scored with CSFCube's
protocol; the two-fold choice takes the weighting best on each fold's dev half and reports its test half
(`aspire.evaluate.two_fold.select_two_fold`: one weighting a fold for every facet), and the paired test compares
the chosen weighting's per-query figures with the whole-abstract term alone (`aspire.benchmarks.stats`).

    python experiments/aspect_model.py --model minilm --out experiments/results/aspect_model_minilm.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import time
from pathlib import Path

import torch

from aspire.benchmarks.csfcube import (
    ABSTRACTS_FILE,
    FACETS,
    LABEL_TO_FACET,
    evaluate_csfcube_rankings,
    load_csfcube,
    test_units,
)
from aspire.benchmarks.heldout import excluded_titles
from aspire.benchmarks.stats import paired_test
from aspire.data.acl import normalise_title, read_acl
from aspire.data.papers import read_paper_map, write_papers
from aspire.encoders import load_encoder
from aspire.evaluate.cache import default_cache_dir
from aspire.evaluate.encode import encode_papers
from aspire.evaluate.facets import facet_queries
from aspire.evaluate.two_fold import load_per_query, select_two_fold
from aspire.io import write_json
from aspire.paths import DATA
from aspire.scoring.scorers import HYBRID_TERMS, HybridScorer

log = logging.getLogger("aspect_model")
GRID = {"whole": (0.0, 1.0), "facet": (0.0, 0.5, 1.0, 2.0), "minl2": (0.0, 0.5, 1.0), "ot": (0.0, 0.5, 1.0, 2.0)}


def calibration_sample(n: int, seed: int = 0, papers_file: Path | None = None):
    """`n` ACL Anthology papers in no benchmark (their titles left out as training leaves them out); or the
    papers of `papers_file` (such a sample written once, for a machine without the ACL data)."""
    if papers_file is not None:
        return list(read_paper_map(papers_file).values())
    exclude, _ = excluded_titles(DATA, "calibration")
    papers, _ = read_acl(DATA / "acl-anthology" / "papers.jsonl.gz", exclude, 0)
    rng = random.Random(seed)
    return rng.sample([p for p in papers if normalise_title(p.title) not in exclude and len(p.sentences) >= 2], n)


def fit_calibration(encoder, sample, cache_dir) -> dict:
    """{term: (mu, sigma)} of every term over the pairs of the sample's first half with its second half; ValueError
    where a term's mu or sigma is not a finite number (a sample of 2 papers gives one pair, whose spread is NaN: every
    calibrated weighting then ranked by NaN scores and the two-fold choice was made among them, silently)."""
    batch = encode_papers(encoder, sample, "contextual", cache_dir)[0].to(encoder.device)
    half = len(sample) // 2
    terms = HybridScorer().term_scores(batch.index(range(half)), batch.index(range(half, len(sample))))
    calibration = HybridScorer.calibrate({t: v.cpu() for t, v in terms.items()})
    try:
        HybridScorer(calibration=calibration)  # the scorer's own check: finite (mu, sigma), sigma > 0
    except ValueError as err:
        raise ValueError(f"calibration on {len(sample)} papers ({half} x {len(sample) - half} pairs) is not usable: "
                         f"{err}; calibrate on more papers (default 200)") from None
    return calibration


def term_tables(encoder, papers, pool_set, cache_dir) -> dict:
    """{facet: {query: {term: (P,) similarities}}} for every pooled candidate, in pool order."""
    ordered = [papers[pid] for pid in sorted(pool_set.paper_ids())]
    batch, _ = encode_papers(encoder, ordered, "contextual", cache_dir)
    batch = batch.to(encoder.device)
    row = {pid: i for i, pid in enumerate(batch.paper_ids)}
    scorer = HybridScorer()
    tables: dict = {}
    for facet in FACETS:
        pools = pool_set.pools[facet]
        queries = facet_queries(batch.index([row[q] for q in pools]), papers, facet, LABEL_TO_FACET)
        tables[facet] = {}
        for i, (qid, pool) in enumerate(pools.items()):
            cands = batch.index([row[c] for c in pool])
            terms = scorer.term_scores(queries.index([i]), cands)
            tables[facet][qid] = {t: s[0].float().cpu() for t, s in terms.items()}
    return tables


def rank(tables: dict, pool_set, weights: dict, calibration: dict) -> dict:
    out: dict = {}
    for facet, per_query in tables.items():
        out[facet] = {}
        for qid, terms in per_query.items():
            score = sum(w * (terms[t] - calibration[t][0]) / calibration[t][1] for t, w in weights.items() if w)
            order = torch.sort(-score, stable=True).indices.tolist()
            pool = list(pool_set.pools[facet][qid])
            out[facet][qid] = [pool[j] for j in order]
    return out


def label(weights: dict) -> str:
    return " ".join(f"{t}={w:g}" for t, w in weights.items() if w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--calibration-papers", type=int, help="ACL papers to calibrate on (default 200)")
    parser.add_argument("--calibration-file", type=Path, help="papers JSONL to calibrate on instead of an ACL sample")
    parser.add_argument("--write-calibration-sample", type=Path, help="write the ACL sample as papers JSONL and stop")
    parser.add_argument("--device", help="torch device (default: the model's)")
    parser.add_argument("--baseline", type=Path, action="append", default=[],
                        help="a CSFCube results folder (with its *-perq.csv) to test the chosen weighting against; "
                             "repeatable (e.g. the untrained base's whole-abstract run)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.calibration_file is not None and args.calibration_papers is not None:  # the file's papers are the sample
        parser.error("--calibration-papers sizes the ACL sample; --calibration-file gives the sample itself: give one")
    n_papers = 200 if args.calibration_papers is None else args.calibration_papers
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cache_dir = default_cache_dir()
    root = DATA / "csfcube"
    t0 = time.perf_counter()
    if args.write_calibration_sample:
        write_papers(args.write_calibration_sample, calibration_sample(n_papers))
        return
    encoder = load_encoder(args.model)
    if args.device:
        encoder.to(args.device)
    sample = calibration_sample(n_papers, papers_file=args.calibration_file)
    calibration = fit_calibration(encoder, sample, cache_dir)
    log.info("calibration %s", calibration)
    pool_set = load_csfcube(root)
    papers = read_paper_map(root / ABSTRACTS_FILE)
    tables = term_tables(encoder, papers, pool_set, cache_dir)
    t_terms = time.perf_counter() - t0

    candidates, per_query = {}, {}
    for values in itertools.product(*GRID.values()):
        weights = dict(zip(GRID, values))
        if not any(values):
            continue
        results, pq = evaluate_csfcube_rankings(root, rank(tables, pool_set, weights, calibration))
        candidates[label(weights)], per_query[label(weights)] = results, pq
    choice = select_two_fold(candidates)
    base = "whole=1"
    # cross-fitted per-query figures: each test query ranked by the weighting chosen on its fold's dev half
    crossed = {k: per_query[choice["chosen"][fold]][k]
               for fold in ("fold1", "fold2") for k in pool_set.splits[f"all/{fold}_test"]}
    tests = {group: {metric: paired_test(test_units(pool_set, crossed, metric, group),
                                         test_units(pool_set, per_query[base], metric, group))
                     for metric in ("MAP", "NDCG%20")} for group in (*FACETS, "all")}
    baselines = {}
    for folder in args.baseline:  # the same cross-fitted per-query figures against another run's
        other = {k: {m: v[m] / 100.0 for m in ("MAP", "NDCG%20")} for k, v in load_per_query(folder).items()}
        baselines[str(folder)] = {group: {metric: paired_test(test_units(pool_set, crossed, metric, group),
                                                             test_units(pool_set, other, metric, group))
                                         for metric in ("MAP", "NDCG%20")} for group in (*FACETS, "all")}
    report = {
        "model": args.model,
        "fingerprint": encoder.fingerprint(),
        "calibration": calibration,
        "grid": GRID,
        "seconds_encoding_and_terms": round(t_terms, 1),
        "two_fold": choice,
        "whole_alone": candidates[base]["test"],
        "single_terms": {t: candidates[f"{t}=1"]["test"]["all"] for t in HYBRID_TERMS},
        "single_terms_by_facet": {t: candidates[f"{t}=1"]["test"] for t in HYBRID_TERMS},
        "whole_facet_calibrated_by_facet": candidates["whole=1 facet=1"]["test"],
        "paired_vs_whole": tests,
        "paired_vs_baselines": baselines,
        "two_fold_per_query": {k: {m: crossed[k][m] for m in ("MAP", "NDCG%20")} for k in sorted(crossed)},
        "every_weighting_test_all": {k: v["test"]["all"] for k, v in candidates.items()},
        "every_weighting_dev": {k: {f: v["folds"]["all"][f"{f}_dev"] for f in ("fold1", "fold2")} for k, v in candidates.items()},
    }
    write_json(args.out, report, indent=1)
    print(json.dumps({"two_fold": choice, "whole": candidates[base]["test"]["all"], "tests": tests, "baselines": baselines}, indent=1, default=str))


if __name__ == "__main__":
    main()
