"""Reviewer matching with a model of the project: encode every paper once, score, aggregate, write.

Every submission and every archive paper of every draw is encoded once (through the vector cache,
keyed by the encoder's fingerprint). For each draw and reviewer, the scorer compares the
reviewer's rated submissions with their archive papers, (R, A) similarities, aggregated over the
archive by `max`, `mean` or `topk:K` (mean of the K best). Several scorers are fused by per-reviewer
z-scored predictions, weighted (`fuse_predictions`).

Abstracts are split into sentences by the project's default splitter. A paper with an empty
abstract is encoded from its title alone (counted as `empty_abstract`); one with neither title nor
abstract cannot be encoded: an archive paper is left out of its reviewer's profile, a submission
gets no prediction and its pairs are skipped (both counted in the results).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from aspire.data.papers import Paper
from aspire.evaluate.pools import write_json_atomic
from aspire.evaluate.rank import encode_papers, get_eval_scorer
from aspire.evaluate.reviewers import ReviewerSet, prediction_files, reviewer_units, summarize
from aspire.evaluate.runs import invocation
from aspire.scoring.chunked import score_chunked

_TOPK = re.compile(r"^topk:(\d+)$")


def parse_aggregate(spec: str) -> tuple[str, int]:
    """`max` | `mean` | `topk:K` (K >= 1) -> (kind, K)."""
    if spec in ("max", "mean"):
        return spec, 0
    m = _TOPK.match(spec)
    if m and int(m.group(1)) >= 1:
        return "topk", int(m.group(1))
    raise ValueError(f"unknown aggregate {spec!r}; valid: max, mean, topk:K (K >= 1)")


def aggregate(sims: torch.Tensor, spec: str) -> torch.Tensor:
    """(R, A) similarities -> (R,): the max, the mean or the mean of the K largest over A."""
    kind, k = parse_aggregate(spec)
    if kind == "max":
        return sims.max(dim=1).values
    if kind == "mean":
        return sims.mean(dim=1)
    return sims.topk(min(k, sims.shape[1]), dim=1).values.mean(dim=1)


def reviewer_papers(rset: ReviewerSet, splitter=None) -> tuple[list[Paper], dict]:
    """Every distinct paper of the set as a `Paper` (sorted by id), and counts of empty texts.

    Raises ValueError naming the paper when one id carries two different texts.
    """
    from aspire.data.sentences import DEFAULT_SPLITTER, resolve_splitter

    split = resolve_splitter(splitter or DEFAULT_SPLITTER)
    texts: dict[str, tuple[str, str]] = {}
    for draw in rset.draws:
        records = [(pid, *text) for pid, text in draw.submissions.items()]
        records += [rec for papers in draw.archives.values() for rec in papers]
        for pid, title, abstract in records:
            if texts.setdefault(pid, (title, abstract)) != (title, abstract):
                raise ValueError(f"paper {pid} has two different texts in {rset.root}")
    papers, empty_abstract, empty = [], [], []
    for pid in sorted(texts):
        title, abstract = texts[pid]
        if not abstract:
            (empty_abstract if title else empty).append(pid)
        if title or abstract:
            papers.append(Paper(pid, title, split.split(abstract) if abstract else []))
    return papers, {"papers": len(texts), "empty_abstract": len(empty_abstract), "empty_abstract_ids": empty_abstract,
                    "no_text": len(empty), "no_text_ids": empty}


def predict(rset: ReviewerSet, batch, scorer, agg: str) -> list[dict[str, dict[str, float]]]:
    """`{reviewer: {submission: similarity}}` for every draw, from the encoded `batch`."""
    row = {pid: i for i, pid in enumerate(batch.paper_ids)}
    out = []
    with torch.no_grad():
        for draw in rset.draws:
            pred = {}
            for reviewer, rated in rset.ratings.items():
                subs = [p for p, _ in rated if p in draw.submissions and p in row]
                arch = [pid for pid, _, _ in draw.archives[reviewer] if pid in row]
                if not subs or not arch:
                    continue
                sims = score_chunked(scorer, batch.index([row[p] for p in subs]), batch.index([row[p] for p in arch]))
                pred[reviewer] = dict(zip(subs, aggregate(sims.float(), agg).tolist()))
            out.append(pred)
    return out


def fuse_predictions(preds: Sequence[Sequence[Mapping]], weights: Sequence[float]) -> list[dict]:
    """Per draw, the weighted sum of each reviewer's z-scored predictions (only order matters)."""
    fused = []
    for per_draw in zip(*preds):
        out: dict[str, dict[str, float]] = {}
        for pred, w in zip(per_draw, weights):
            for reviewer, scores in pred.items():
                vals = np.array(list(scores.values()))
                sd = vals.std() or 1.0
                acc = out.setdefault(reviewer, {})
                for paper, v in scores.items():
                    acc[paper] = acc.get(paper, 0.0) + w * (v - vals.mean()) / sd
        fused.append(out)
    return fused


def run_reviewers(rset: ReviewerSet, model: str, scorers: Sequence[str], out, exp: str, agg: str = "max",
                  weights: Sequence[float] | None = None, encoding: str = "contextual",
                  scorer_options: dict | None = None, cache_dir=None, batch_size: int = 32,
                  device: str | None = None, encode_options: dict | None = None, n_boot: int = 2000,
                  encoder_options: dict | None = None) -> dict:
    """Predict with `model` and each of `scorers` (fused when several), score, write predictions and results.
    `encoder_options` go to `load_encoder` (e.g. `backend="onnx"`, `quantize="int8"`)."""
    from aspire.encoders import load_encoder

    parse_aggregate(agg)
    if weights is not None and len(weights) != len(scorers):
        raise ValueError(f"{len(weights)} weights for {len(scorers)} scorers")
    papers, counts = reviewer_papers(rset)
    t0 = time.perf_counter()
    encoder = load_encoder(model, **dict(encoder_options or {}))
    if device:
        encoder.to(device)
    runs, batches = [], {}
    for name in scorers:
        scorer = get_eval_scorer(name, **({} if name == "abstract" else dict(scorer_options or {})))
        enc = "abstract" if name == "abstract" else encoding
        if enc not in batches:
            opts = encode_options if (enc != "contextual") else None
            batches[enc], _ = encode_papers(encoder, papers, enc, cache_dir, batch_size, opts)
        runs.append(predict(rset, batches[enc].to(torch.device(device) if device else encoder.device), scorer, agg))
    preds = runs[0] if len(runs) == 1 else fuse_predictions(runs, weights or [1.0] * len(runs))
    units, unit_counts = reviewer_units(rset, preds)
    results = {
        "benchmark": "reviewer-matching",
        "experiment": exp,
        "model": str(model),
        "encoder_fingerprint": encoder.fingerprint(),
        "scorers": list(scorers),
        "weights": list(weights or [1.0] * len(scorers)),
        "aggregate": agg,
        "encoding": encoding,
        "scorer_options": dict(scorer_options or {}),
        "encode_options": dict(encode_options or {}),
        "encoder_options": dict(encoder_options or {}),
        **summarize(units, unit_counts, n_boot),
        "texts": counts,
        "seconds": time.perf_counter() - t0,
        "command": invocation(),
    }
    out = Path(out)
    for path, pred in zip(prediction_files(out / "predictions", exp, rset), preds):
        write_json_atomic(path, pred)
    write_json_atomic(out / "results.json", results)
    return results


def format_result(results: dict) -> str:
    """`loss 0.2689 [0.2121, 0.3298] over N reviewers, D draws`."""
    lo, hi = results["ci95"]
    return f"loss {results['loss']:.4f} [{lo:.4f}, {hi:.4f}] over {results['n_reviewers']} reviewers, " \
           f"{results['n_draws']} draws"
