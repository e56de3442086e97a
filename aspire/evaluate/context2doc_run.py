"""Score context2doc (`aspire.benchmarks.context2doc`) with BM25, a model of the project, or their fusion.

Dense: the queries (one citing sentence each, encoded as a one-sentence paper with an empty title)
and the candidates are encoded through the vector cache; the scorer compares every query with every
candidate (sentence scorers match the query's sentence against the candidate's sentences; the
`abstract` scorer compares one vector each). BM25 (`aspire.scoring.lexical`) indexes each candidate's
title and abstract. With both, per-query z-scored scores are summed with weight `alpha` on the dense
run (`aspire.evaluate.fuse.fuse_scores`). The run (top `depth` of each query) is written as a TREC
run file beside the qrels, and the metrics are computed from that file's ranking. Given `rerank`
(`aspire.retrieval.crossencoder.RerankOptions`), a cross-encoder re-scores each query's top N of that
ranking, mixed with its scores by a weight (`aspire.scoring.crossencoder`); its speed is recorded.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from aspire.benchmarks.context2doc import Context2Doc
from aspire.benchmarks.reviewers import some_ids
from aspire.benchmarks.runs import invocation, mean_scores, per_query, write_qrels, write_run
from aspire.benchmarks.stats import UnitScores, table_row
from aspire.config import is_whole
from aspire.data.papers import Paper
from aspire.evaluate.options import EvalOptions, Stages
from aspire.io import write_json
from aspire.retrieval.crossencoder import RerankOptions, rerank_texts
from aspire.scoring.chunked import score_chunked

METRICS = ("MRR", "nDCG@10", "R@100", "MAP", "MAP@20")
DEEPEST = max(int(m.partition("@")[2]) for m in METRICS if "@" in m)  # 100: R@100 needs 100 documents a query


def check_depth(bench: Context2Doc, depth: int) -> None:
    """ValueError unless `depth` documents a query reach `DEEPEST`, the deepest cutoff reported (all the candidates
    when there are fewer): a shallower run would report R@100 at its own depth under R@100's name. A depth that is not a
    whole number (12.5, "100", None) is a ValueError naming it too (a float passed here and failed only after encoding,
    in `to_run`; a string or None was a bare TypeError)."""
    if not is_whole(depth):  # its range is checked below
        raise ValueError(f"context2doc depth must be a whole number, got {depth!r}")
    need = min(DEEPEST, len(bench.candidates))  # a smaller candidate set is ranked whole
    if depth < need:
        deepest = next(m for m in METRICS if m.endswith(f"@{DEEPEST}"))
        raise ValueError(f"context2doc depth {depth} is below {need}, the depth {deepest} is reported at: "
                         f"give a depth of {need} or more")


def dense_scores(bench: Context2Doc, model: str, scorer_name: str, options: EvalOptions | None = None,
                 chunk: int = 16) -> tuple[np.ndarray, dict]:
    """(Q, N) similarities of the queries (in `bench.queries` order) to the candidates, and what the results record
    of the encoder: the checkpoint a training run's folder loaded (its `loaded_checkpoint`) and `encoder_fingerprint`;
    `options` (`aspire.evaluate.options.EvalOptions`): the encoding, the scorer's and encoder's options (e.g.
    `backend="onnx"`, `quantize="int8"`), the cache, batch size and device."""
    from aspire.encoders import load_encoder
    from aspire.evaluate.encode import encode_papers
    from aspire.evaluate.rank import get_eval_scorer

    # the encoding as the other benchmarks run it (`EvalOptions.checked`): `pass` stays the contextual pass's vector
    # (once read as `abstract`, a separate encoding, while the results recorded `pass`)
    options = (options or EvalOptions()).checked(scorer_name, faceted=False)
    device, cache_dir, batch_size = options.device, options.cache_dir, options.batch_size
    # the scorer's options as given: `abstract` takes none (ValueError), where they were once dropped unsaid and
    # recorded in results.json as if applied
    scorer = get_eval_scorer(scorer_name, **options.scorer_options)
    enc = options.encoding
    opts = None if enc in ("contextual", "pass") else options.encode_options
    encoder = load_encoder(model, **options.encoder_options)
    if device:
        encoder.to(device)
    queries = [Paper(qid, "", [text]) for qid, text in bench.queries.items()]
    with encoder.query_side():  # a query adapter, if the model has one, encodes the citing sentences
        qb, _ = encode_papers(encoder, queries, enc, cache_dir, batch_size, opts)
    cb, _ = encode_papers(encoder, bench.candidates, enc, cache_dir, batch_size, opts)
    dev = torch.device(device) if device else encoder.device
    qb, cb = qb.to(dev), cb.to(dev)
    out = np.zeros((len(queries), len(bench.candidates)), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, len(queries), chunk):
            rows = list(range(start, min(start + chunk, len(queries))))
            out[rows] = score_chunked(scorer, qb.index(rows), cb).float().cpu().numpy()
    return out, {**encoder.loaded_checkpoint, "encoder_fingerprint": encoder.fingerprint()}


def bm25_scores(bench: Context2Doc, k1: float = 1.25, b: float = 0.75) -> np.ndarray:
    """(Q, N) BM25 scores of the queries to the candidates' title + abstract."""
    from aspire.scoring.lexical import BM25Index, paper_text

    index = BM25Index([paper_text(p) for p in bench.candidates], [p.paper_id for p in bench.candidates], k1, b)
    return index.scores(list(bench.queries.values()))


def to_run(bench: Context2Doc, scores: np.ndarray, depth: int) -> dict[str, list[tuple[str, float]]]:
    """Top `depth` candidates of each query by score (ties: candidate order). `scores`: (Q, N), one row a query
    of `bench.queries` and one column a candidate; ValueError for another shape, a NaN score (naming the query
    and candidates: a NaN has no place in an order) or a `depth` that is not a whole number >= 1 (-1 once kept all
    but the last candidate, 0 ranked nothing)."""
    if not is_whole(depth, 1):
        raise ValueError(f"context2doc run depth must be a whole number >= 1, got {depth!r}")
    ids = [p.paper_id for p in bench.candidates]
    scores = np.asarray(scores)
    if scores.shape != (len(bench.queries), len(ids)):
        raise ValueError(f"context2doc scores are {scores.shape}, expected one row a query and one column a candidate "
                         f"({len(bench.queries)}, {len(ids)})")
    run = {}
    for qid, row in zip(bench.queries, scores):
        nan = np.flatnonzero(np.isnan(row))
        if len(nan):
            raise ValueError(f"query {qid}: NaN scores for {len(nan)} of {len(ids)} candidates: "
                             f"{[ids[j] for j in nan[:10]]} (NaN vectors from the encoder, or a numerical overflow)")
        order = np.argsort(-row, kind="stable")[:depth]
        run[qid] = [(ids[j], float(row[j])) for j in order]
    return run


def fuse_dense_bm25(bench: Context2Doc, dense: np.ndarray, lexical: np.ndarray, alpha: float) -> np.ndarray:
    """alpha * z(dense) + (1 - alpha) * z(bm25), z-scored per query over all candidates -> (Q, N) float64; `dense` and
    `lexical` (Q, N) each, one row a query of `bench.queries` and one column a candidate, else ValueError."""
    from aspire.evaluate.fuse import fuse_scores

    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"fusion weight alpha must be in [0, 1], got {alpha}")
    ids = [p.paper_id for p in bench.candidates]
    dense, lexical = np.asarray(dense), np.asarray(lexical)
    for name, m in (("dense", dense), ("bm25", lexical)):  # zip once cut a longer matrix to the queries and candidates
        if m.shape != (len(bench.queries), len(ids)):
            raise ValueError(f"context2doc {name} scores are {m.shape}, expected ({len(bench.queries)}, {len(ids)}), "
                             "one row a query and one column a candidate: they score different candidates or queries")
    runs = [{q: dict(zip(ids, row.tolist())) for q, row in zip(bench.queries, m)} for m in (dense, lexical)]
    fused = fuse_scores(runs, [alpha, 1 - alpha], "z", ["dense", "bm25"])
    col = {c: j for j, c in enumerate(ids)}
    out = np.zeros(np.shape(dense), dtype=np.float64)  # float32 once merged close fused scores into candidate-order ties
    for i, q in enumerate(bench.queries):
        for c, s in fused[q]:
            out[i, col[c]] = s
    return out


def score_and_write(bench: Context2Doc, run: Mapping, out: Path, exp: str, info: dict, n_boot: int = 2000) -> dict:
    """Write run + qrels, compute the metrics from the run with bootstrap 95% intervals over queries. A judged paper
    that is not a candidate (no run can rank it) stays in the qrels and counts as a miss in every metric; such
    papers are counted in the results (`relevant_not_candidates`: `{"n": papers, "queries": qids}`), present only when
    there are any, where they once lowered the metrics unsaid. `split` records the split scored: its name, the split
    file's checksum and source SHA-256 (`Context2Doc.provenance`) and the queries left out of it (`left_out`)."""
    write_run(out / "run.trec", run, exp)
    write_qrels(out / "qrels.trec", bench.qrels)
    values = per_query(bench.qrels, run, METRICS)
    intervals = {m: UnitScores.means(v).bootstrap(n_boot) for m, v in values.items()}
    ids = {p.paper_id for p in bench.candidates}
    unrankable = {q: sorted(d for d, g in docs.items() if g > 0 and d not in ids) for q, docs in bench.qrels.items()}
    unrankable = {q: docs for q, docs in unrankable.items() if docs}
    if unrankable:
        info = {**info, "relevant_not_candidates": {"n": sum(map(len, unrankable.values())),
                                                    "queries": sorted(unrankable)}}
    results = {
        "benchmark": f"context2doc-{bench.split}",
        "experiment": exp,
        **info,
        "split": {"name": bench.split, **bench.provenance, "left_out": list(bench.left_out)},
        "n_queries": len(bench.queries),
        "n_candidates": len(bench.candidates),
        "metrics": mean_scores(values),
        "ci95": {m: list(ci) for m, ci in intervals.items()},
        "per_query": values,
        "command": invocation(),
    }
    write_json(out / "results.json", results, indent=None)
    return results


def run_context2doc(bench: Context2Doc, out, exp: str, model: str | None = None, scorer: str | None = None,
                    options: EvalOptions | None = None, stages: Stages | None = None, depth: int = 100) -> dict:
    """BM25 alone (`stages.bm25`, no model), a model alone, or both fused with weight `stages.alpha` on the
    model; then, given `stages.rerank` (a `RerankOptions`), its top N re-scored by a cross-encoder. `options`
    (`aspire.evaluate.options.EvalOptions`): how the model encodes and scores. `depth` (documents kept a query)
    must reach `DEEPEST`, the deepest cutoff reported (R@100; all candidates when fewer), else ValueError before any encoding."""
    options, stages = options or EvalOptions(), stages or Stages()
    check_depth(bench, depth)
    if (model is None) != (scorer is None):
        raise ValueError("a model needs a scorer and a scorer a model")
    stages.checked(model is not None)
    t0 = time.perf_counter()
    info: dict = {"depth": depth}  # MAP and MRR have no cutoff: the depth decides them too
    dense = lexical = None
    if model is not None:
        dense, encoded = dense_scores(bench, model, scorer, options)  # with the checkpoint a run's folder loaded
        # the options as the scorer ran with them (`--scorer abstract` recorded encoding contextual)
        info.update(model=str(model), **encoded, scorer=scorer,
                    **options.checked(scorer, faceted=False).record())
    if stages.bm25:
        lexical = bm25_scores(bench, stages.k1, stages.b)
        from aspire.scoring.lexical import default_settings

        info["bm25"] = {**default_settings(stages.k1, stages.b), "text": "title + abstract"}
    if dense is not None and lexical is not None:
        scores = fuse_dense_bm25(bench, dense, lexical, stages.alpha)
        info["fusion"] = {"method": "z", "alpha_dense": stages.alpha}
    else:
        scores = dense if dense is not None else lexical
    run = to_run(bench, scores, depth)
    if stages.rerank is not None:
        run, info["rerank"] = apply_rerank(bench, run, stages.rerank, Path(out))
    info["seconds"] = time.perf_counter() - t0
    return score_and_write(bench, run, Path(out), exp, info)


def apply_rerank(bench: Context2Doc, run: Mapping[str, Sequence[tuple[str, float]]], options: RerankOptions,
                 out: Path | None = None) -> tuple[dict, dict]:
    """`run` with each query's top N reranked, and a record of the settings and speed (pairs/s, ms a query).

    With `out`, the cross-encoder's logits are written to `out/crossencoder_scores.json` for later mixes."""
    return rerank_texts(bench.queries, candidate_texts(bench), run, options, out)


def candidate_texts(bench: Context2Doc) -> dict[str, str]:
    """`{paper_id: title and abstract}`, the text a cross-encoder reads for each candidate."""
    from aspire.scoring.lexical import paper_text

    return {p.paper_id: paper_text(p) for p in bench.candidates}


def format_result(results: dict) -> str:
    """`MRR 0.331 [0.30, 0.36] · nDCG@10 ...` for the headline metrics."""
    return " · ".join(f"{m} {results['metrics'][m]:.3f} [{results['ci95'][m][0]:.3f}, {results['ci95'][m][1]:.3f}]"
                      for m in METRICS[:4])


def format_summary(exp: str, results: dict) -> str:
    """`context2doc dev (262 queries; 1 left out as a test query's twin: L1317) EXP: MRR ...`: the split, the queries
    scored and those of the split file left out of them (`Context2Doc.left_out`, named: a few, `some_ids`), where the
    count alone once read as a split short of its file's."""
    split = results["split"]
    left = split["left_out"]
    twins = "a test query's twin" if len(left) == 1 else "test queries' twins"
    note = f"; {len(left)} left out as {twins}: {some_ids(left)}" if left else ""
    return f"context2doc {split['name']} ({results['n_queries']} queries{note}) {exp}: {format_result(results)}"


def suite_rows(bench, data: Path, model: str | None, scorer: str | None, out: Path, settings: dict,
               options: EvalOptions | None = None) -> tuple[list[dict], None]:
    """The suite's runner on the test split: the model alone, fused with BM25 at `settings["bm25_alpha"]`, or BM25
    alone (`model` None)."""
    from aspire.benchmarks.context2doc import load_context2doc

    alpha = settings.get("bm25_alpha")
    queries = load_context2doc(data, "test")
    stages = Stages(bm25=model is None or alpha is not None, alpha=alpha)
    exp = stages.exp(None if model is None else f"{Path(model).name}-{scorer}")
    res = run_context2doc(queries, out, exp, model, scorer, options, stages)
    name = bench.title + (" (fused with BM25)" if alpha is not None and model else "")
    return [table_row(name, m, res["metrics"][m], res["ci95"][m], res["n_queries"]) for m in bench.metrics], None


def ensemble_rows(bench, data: Path, members, out: Path, settings: dict, fuse) -> list[dict]:
    """The ensemble suite's runner on the test split: each member (`aspire.evaluate.options.Member`; a `bm25`
    member is the lexical run) ranks every candidate, the runs are fused by `fuse` per query, the top `DEEPEST`
    (100) kept."""
    from aspire.benchmarks.context2doc import load_context2doc
    from aspire.benchmarks.runs import read_run

    test = load_context2doc(data, "test")
    runs = []
    for m in members:
        folder = out / "members" / m.name / "context2doc"
        model, scorer = (None, None) if m.lexical else (m.model, m.scorer)
        run_context2doc(test, folder, m.name, model, scorer, m.options, Stages(bm25=m.lexical),
                        depth=len(test.candidates))
        runs.append(read_run(folder / "run.trec"))
    fused = {q: ranked[:DEEPEST] for q, ranked in fuse(runs).items()}
    res = score_and_write(test, fused, out / "context2doc", "ensemble", {"members": [m.name for m in members],
                                                                         "depth": DEEPEST})
    note = "members " + ", ".join(m.name for m in members)
    return [table_row(bench.title, m, res["metrics"][m], res["ci95"][m], res["n_queries"], note) for m in bench.metrics]
