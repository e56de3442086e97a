"""Reviewer matching with a model of the project: encode every paper once, score, aggregate, write.

Every submission and every archive paper of every draw is encoded once (through the vector cache,
keyed by the encoder's fingerprint). For each draw and reviewer, the scorer compares the
reviewer's rated submissions with their archive papers, (R, A) similarities, aggregated over the
archive by `max`, `mean` or `topk:K` (mean of the K best, or of all of a shorter archive). Several
scorers are fused by per-reviewer z-scored predictions, weighted (`fuse_predictions`).

The search pipeline's stages, as on the other benchmarks: BM25 (`bm25_similarity`: a submission's title and
abstract as the query against each archive paper's, one bm25s index over every paper of the set, so its IDF is
the whole set's), aggregated over the archive like a model's similarities, alone or fused with the model's
predictions (weight `alpha` on the model); and a cross-encoder rerank (`cross_rerank`): each reviewer's top N
submissions re-scored by the logits of (submission, archive paper) pairs, aggregated the same way, mixed with
the previous stage by `aspire.scoring.crossencoder.mix_rerank`.

Its hooks in the suite's runner table (`aspire.evaluate.suite.RUNNERS`): `suite_rows` (one model),
`ensemble_rows` (members fused per draw and reviewer over the rated submissions) and `compare_runs` (two
results folders, or published predictions `FOLDER:EXP`).

Abstracts are split into sentences by the project's default splitter. A paper with an empty
abstract is encoded from its title alone (counted as `empty_abstract`); one with neither title nor
abstract cannot be encoded: an archive paper is left out of its reviewer's profile, a submission
gets no prediction and its pairs are skipped (both counted in the results).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Container, Mapping, Sequence

import numpy as np
import torch

from aspire.benchmarks.reviewers import (
    ReviewerSet,
    left_out,
    parse_aggregate,
    prediction_files,
    reviewer_units,
    skipped,
    summarize,
    unscored,
)
from aspire.benchmarks.runs import invocation
from aspire.benchmarks.stats import table_row
from aspire.data.papers import Paper
from aspire.evaluate.encode import encode_papers
from aspire.evaluate.options import ENCODE_OPTIONS, ENCODINGS, SCORERS, EvalOptions, Stages, check_encode_options
from aspire.evaluate.rank import get_eval_scorer, run_record
from aspire.io import write_json
from aspire.scoring.chunked import score_chunked
from aspire.scoring.fusion import fuse_ranked


def aggregate(sims: torch.Tensor, spec: str) -> torch.Tensor:
    """(R, A) similarities -> (R,): the max, the mean or the mean of the K largest over A (of all A when A < K)."""
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


def predict(rset: ReviewerSet, known: Container[str], sims: Callable[[list[str], list[str]], torch.Tensor],
            agg: str) -> list[dict[str, dict[str, float]]]:
    """`{reviewer: {submission: similarity}}` for every draw: `sims(submissions, archive)` gives the (R, A)
    similarities of a reviewer's rated submissions to their archive papers, aggregated over A by `agg`;
    papers not in `known` (no text) are left out."""
    out = []
    with torch.no_grad():
        for draw in rset.draws:
            pred = {}
            for reviewer, rated in rset.ratings.items():
                subs = [p for p, _ in rated if p in draw.submissions and p in known]
                arch = [pid for pid, _, _ in draw.archives[reviewer] if pid in known]
                if not subs or not arch:
                    continue
                pred[reviewer] = dict(zip(subs, aggregate(sims(subs, arch).float(), agg).tolist()))
            out.append(pred)
    return out


def dense_similarity(batch, scorer) -> Callable[[list[str], list[str]], torch.Tensor]:
    """`sims` for `predict` from an encoded `batch` of every paper and a scorer (all pairs, (R, A))."""
    row = {pid: i for i, pid in enumerate(batch.paper_ids)}

    def sims(subs: list[str], arch: list[str]) -> torch.Tensor:
        return score_chunked(scorer, batch.index([row[p] for p in subs]), batch.index([row[p] for p in arch]))

    return sims


def bm25_similarity(papers: Sequence[Paper], k1: float = 1.25, b: float = 0.75):
    """`sims` for `predict`: BM25 of a submission's title and abstract against each archive paper's, from one
    index over every paper of `papers` (its IDF); a submission's scores are computed once and kept."""
    from aspire.scoring.lexical import BM25Index, paper_text

    texts = {p.paper_id: paper_text(p) for p in papers}
    index = BM25Index(list(texts.values()), list(texts), k1, b)
    column = {pid: j for j, pid in enumerate(texts)}
    rows: dict[str, np.ndarray] = {}

    def sims(subs: list[str], arch: list[str]) -> torch.Tensor:
        new = [p for p in subs if p not in rows]
        for pid, scores in zip(new, index.scores([texts[p] for p in new]) if new else ()):
            rows[pid] = scores
        cols = [column[a] for a in arch]
        return torch.from_numpy(np.stack([rows[p][cols] for p in subs]))

    return sims


def _rerank_lists(rset: ReviewerSet, known: Container[str], preds, top_n: int) -> list[tuple]:
    """Per draw and reviewer: (draw index, reviewer, first stage best first, its top `top_n`, archive papers)."""
    lists = []
    for g, (draw, pred) in enumerate(zip(rset.draws, preds)):
        for reviewer, scores in pred.items():
            ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
            arch = [pid for pid, _, _ in draw.archives[reviewer] if pid in known]
            lists.append((g, reviewer, ranked, [s for s, _ in ranked[:top_n]], arch))
    return lists


def mix_logits(rset: ReviewerSet, known: Container[str], preds: Sequence[Mapping[str, Mapping[str, float]]],
               logits: Mapping[str, Mapping[str, float]], top_n: int, weight: float, agg: str) -> list[dict]:
    """`preds` with each reviewer's top `top_n` submissions mixed (`mix_rerank`, weight `weight`) with the
    cross-encoder's `logits` (`{submission: {archive paper: logit}}`) aggregated over the archive by `agg`;
    a missing pair is an error naming it."""
    from aspire.scoring.crossencoder import mix_rerank

    out: list[dict] = [{} for _ in rset.draws]
    for g, reviewer, ranked, head, arch in _rerank_lists(rset, known, preds, top_n):
        missing = [(s, a) for s in head for a in arch if a not in logits.get(s, {})]
        if missing:
            raise ValueError(f"reviewer {reviewer}: no cross-encoder logit for {len(missing)} pairs, e.g. {missing[0]}")
        table = torch.tensor([[logits[s][a] for a in arch] for s in head])  # (N, A)
        cross = dict(zip(head, aggregate(table, agg).tolist()))
        out[g][reviewer] = dict(mix_rerank(ranked, cross, top_n, weight))
    return out


def cross_rerank(rset: ReviewerSet, papers: Sequence[Paper], preds: Sequence[Mapping[str, Mapping[str, float]]],
                 options, agg: str, out: Path | None = None) -> tuple[list[dict], dict]:
    """Each draw's reviewers' top `options.top_n` submissions (by `preds`) re-scored by a cross-encoder
    (`aspire.retrieval.crossencoder.RerankOptions`) and mixed with `preds` (`mix_logits`, weight `options.weight`).

    A submission's cross-encoder score for a reviewer is its (submission, archive paper) logits aggregated over
    the archive by `agg`, as the first stage's similarities are; the texts are title and abstract joined by spaces.
    Each distinct pair is scored once (the draws share papers); with `out`, the logits are written to
    `out/crossencoder_scores.json` as `{submission: {archive paper: logit}}` (`mix_logits` mixes them again).
    Returns the new predictions and a record of the settings and speed."""
    from dataclasses import asdict

    from aspire.retrieval.crossencoder import reranked_depth
    from aspire.scoring.lexical import paper_text

    texts = {p.paper_id: paper_text(p) for p in papers}
    lists = _rerank_lists(rset, texts, preds, options.top_n)
    pairs = sorted({(s, a) for _, _, _, head, arch in lists for s in head for a in arch})
    reranker = options.reranker()
    logits: dict[str, dict[str, float]] = {}
    for (s, a), value in zip(pairs, reranker.score_pairs([(texts[s], texts[a]) for s, a in pairs]).tolist()):
        logits.setdefault(s, {})[a] = value
    if out is not None:
        write_json(Path(out) / "crossencoder_scores.json", logits, indent=None)
    speed = reranker.speed()
    speed["ms_per_list"] = round(1000 * speed["seconds"] / max(len(lists), 1), 1)
    mixed = mix_logits(rset, texts, preds, logits, options.top_n, options.weight, agg)
    # a reviewer's list is the few submissions they rated (3-10 in the real set): the default top 50 re-scores each
    # whole, as meant: that is said at debug (the record holds it), not at every run
    depth = reranked_depth((len(ranked) for _, _, ranked, _, _ in lists), options.top_n, logging.DEBUG)
    return mixed, {**asdict(options), **depth, "aggregate": agg, "lists": len(lists), "distinct_pairs": len(pairs),
                   "speed": speed}


def fuse_predictions(preds: Sequence[Sequence[Mapping]], weights: Sequence[float]) -> list[dict]:
    """Per draw, the weighted sum of each reviewer's z-scored predictions (`aspire.scoring.fusion.fuse_ranked`,
    method `z`; only the order matters). Runs of different numbers of draws are a ValueError naming the counts
    (`zip` once cut them to the shortest, silently)."""
    lengths = [len(pred) for pred in preds]
    if len(set(lengths)) > 1:
        raise ValueError(f"fused runs must predict the same draws; they predict {lengths} draws")
    fused = []
    for per_draw in zip(*preds):
        reviewers = list(dict.fromkeys(r for pred in per_draw for r in pred))
        fused.append({r: dict(fuse_ranked([pred.get(r, {}) for pred in per_draw], weights, "z")) for r in reviewers})
    return fused


def scorer_kwargs(scorers: Sequence[str], scorer_options: Mapping) -> dict[str, dict]:
    """`{scorer: the scorer options it takes}`: fused scorers share the options, and each is built with those its
    class's signature names (`--scorer minl2,ot --eps 0.1`: `eps` for `ot`; minl2, built with it, once failed with a
    TypeError after the model had loaded). ValueError naming an option no scorer of the run takes, or a bad value
    (each scorer is built once with its options here, before any model loads)."""
    import inspect

    from aspire.scoring.scorers import SCORERS as CLASSES

    taken: dict[str, dict] = {}
    for name in scorers:
        if name == "abstract":  # VectorCosine: no options
            taken[name] = {}
            continue
        init = CLASSES[name].__init__
        own = init is not torch.nn.Module.__init__  # minl2 defines none: it takes no option
        params = list(inspect.signature(init).parameters.values())[1:] if own else []
        names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        taken[name] = {k: v for k, v in scorer_options.items() if k in names}
    unread = sorted(set(scorer_options) - {key for kw in taken.values() for key in kw})
    if unread:
        raise ValueError(f"scorer options {({k: scorer_options[k] for k in unread})} are read by no scorer of {list(scorers)}"
                         + (" (scorer 'abstract' takes none)" if "abstract" in scorers else ""))
    for name, kw in taken.items():
        if kw:
            get_eval_scorer(name, **kw)  # the values together
    return taken


def check_reviewer_options(scorers: Sequence[str], options: EvalOptions) -> dict[str, str]:
    """`{scorer: the encoding it runs with}` (the abstract scorer: its own encoding, or the contextual pass's
    whole-abstract vector); ValueError naming what `options` give that no scorer of the run reads: encode options
    of an encoding no scorer uses (`max_length` with a contextual `minl2` only: once recorded, never applied),
    scorer options no scorer of the run takes (`scorer_kwargs`), or a facet option (the reviewer set has no
    facets); and an unknown encoding."""
    for what, value, default in (("query text", options.query_text, "abstract"),
                                 ("candidate sentences", options.cand_sentences, "all")):
        if value != default:
            raise ValueError(f"{what} {value!r} needs a faceted pool set; the reviewer set has no facets")
    if options.facet_code not in ("auto", "none"):
        raise ValueError(f"facet code {options.facet_code!r} chooses the code of a facet's queries; the reviewer set "
                         "has no facets")
    if options.encoding not in ENCODINGS:  # a sentence scorer's typo once failed only at encoding, the model loaded
        raise ValueError(f"unknown encoding {options.encoding!r}; valid: {list(ENCODINGS)}")
    encodings = {}
    for name in scorers:
        if name not in SCORERS:
            raise ValueError(f"unknown scorer {name!r}; valid: {list(SCORERS)}")
        checked = options.checked(name, faceted=False) if name == "abstract" else None
        if name != "abstract" and options.encoding in ("abstract", "pass"):  # as `EvalOptions.checked` refuses it
            raise ValueError(f"encoding {options.encoding!r} only goes with scorer 'abstract', not {name!r}")
        encodings[name] = checked.encoding if checked is not None else options.encoding
    scorer_kwargs(scorers, options.scorer_options)
    used = set(encodings.values())
    read = {key for enc in used for key in ENCODE_OPTIONS.get(enc, ())}
    unread = sorted(set(options.encode_options) - read)
    if unread:
        raise ValueError(f"encode options {unread} are read by no scorer of {list(scorers)} (encodings "
                         f"{sorted(used)}; {', '.join(f'{e}: {list(k)}' for e, k in ENCODE_OPTIONS.items())})")
    for enc in used & set(ENCODE_OPTIONS):
        check_encode_options(enc, {k: v for k, v in options.encode_options.items() if k in ENCODE_OPTIONS[enc]})
    return encodings


def run_reviewers(rset: ReviewerSet, model: str | None, scorers: Sequence[str], out, exp: str, agg: str = "max",
                  weights: Sequence[float] | None = None, options: EvalOptions | None = None,
                  stages: Stages | None = None, n_boot: int = 2000) -> dict:
    """Predict with `model` and each of `scorers` (fused when several), score, write predictions and results.
    `options` (`aspire.evaluate.options.EvalOptions`): the encoding, the scorers' and encoder's options, the
    cache. `stages` (`aspire.evaluate.options.Stages`): BM25, alone (no model) or fused with the model's
    predictions at weight `alpha` on the model, then a cross-encoder rerank of each reviewer's top N
    (`cross_rerank`)."""
    options, stages = options or EvalOptions(), stages or Stages()
    parse_aggregate(agg)
    if (model is None) != (not scorers):
        raise ValueError("give a model and its scorers, BM25, or both")
    stages.checked(model is not None)
    if weights is not None and len(weights) != len(scorers):
        raise ValueError(f"{len(weights)} weights for {len(scorers)} scorers")
    encodings = check_reviewer_options(scorers, options) if model is not None else {}
    kwargs = scorer_kwargs(scorers, options.scorer_options) if model is not None else {}
    device, alpha = options.device, stages.alpha
    papers, counts = reviewer_papers(rset)
    known = {p.paper_id for p in papers}
    t0 = time.perf_counter()
    info: dict = {"model": None if model is None else str(model)}
    ran = []  # each stage's predictions
    if model is not None:
        from aspire.encoders import load_encoder

        encoder = load_encoder(model, **options.encoder_options)
        info.update(encoder.loaded_checkpoint)  # a training run's folder: the checkpoint it loaded
        if device:
            encoder.to(device)
        runs, batches, encoded = [], {}, []
        for name in scorers:
            scorer = get_eval_scorer(name, **kwargs[name])
            enc = encodings[name]
            if enc not in batches:
                opts = {k: v for k, v in options.encode_options.items() if k in ENCODE_OPTIONS.get(enc, ())}
                batches[enc], _ = encode_papers(encoder, papers, enc, options.cache_dir, options.batch_size, opts,
                                                encoded)
            batch = batches[enc].to(torch.device(device) if device else encoder.device)
            runs.append(predict(rset, known, dense_similarity(batch, scorer), agg))
        ran.append(runs[0] if len(runs) == 1 else fuse_predictions(runs, weights or [1.0] * len(runs)))
        info.update(encoder_fingerprint=encoded[0]["fingerprint"], scorers=list(scorers),
                    weights=list(weights or [1.0] * len(scorers)), encodings=encodings,
                    encoding=next((encodings[n] for n in scorers if n != "abstract"), encodings[scorers[0]]),
                    scorer_options=dict(options.scorer_options), encode_options=dict(options.encode_options),
                    encoder_options=dict(options.encoder_options),
                    run_record=run_record(encoder, batch.emb.device, options.batch_size, options.cache_dir, encoded))
    if stages.bm25:
        ran.append(predict(rset, known, bm25_similarity(papers, stages.k1, stages.b), agg))
        from aspire.scoring.lexical import default_settings

        info["bm25"] = {**default_settings(stages.k1, stages.b), "idf": f"every paper of the set ({len(papers)})",
                        "text": "title + abstract (submission: the query; archive papers: the documents)"}
    preds = ran[0] if len(ran) == 1 else fuse_predictions(ran, [alpha, 1.0 - alpha])
    if len(ran) == 2:
        info["fusion"] = {"method": "z", "per": "reviewer", "alpha_dense": alpha}
    out = Path(out)
    if stages.rerank is not None:
        preds, info["rerank"] = cross_rerank(rset, papers, preds, stages.rerank, agg, out)
    return write_reviewer_results(rset, out, exp, preds, {**info, "aggregate": agg}, counts, t0, n_boot)


def write_reviewer_results(rset: ReviewerSet, out: Path, exp: str, preds: list[dict], info: dict, counts: dict,
                           t0: float, n_boot: int = 2000) -> dict:
    """Score `preds` (one `{reviewer: {submission: similarity}}` a draw), write them as `out/predictions/EXP_*`
    and `out/results.json` (with `info`, the text counts and the seconds since `t0`), and return the results."""
    units, unit_counts = reviewer_units(rset, preds)
    results = {
        "benchmark": "reviewer-matching",
        "experiment": exp,
        **info,
        **summarize(units, unit_counts, n_boot),
        "texts": counts,
        "seconds": time.perf_counter() - t0,
        "command": invocation(),
    }
    for path, pred in zip(prediction_files(Path(out) / "predictions", exp, rset), preds):
        write_json(path, pred, indent=None)
    write_json(Path(out) / "results.json", results, indent=None)
    return results


def format_result(results: dict) -> str:
    """`loss 0.2689 [0.2121, 0.3298] over N reviewers, D draws`, which rated reviewers every draw or some draws
    left out (`aspire.benchmarks.reviewers.left_out`), the rated pairs skipped and their papers (`skipped`) and what
    the predictions held that was not scored (`unscored`)."""
    lo, hi = results["ci95"]
    notes = "".join(f"; {note}" for note in (left_out(results), skipped(results), unscored(results)) if note)
    return f"loss {results['loss']:.4f} [{lo:.4f}, {hi:.4f}] over {results['n_reviewers']} reviewers, " \
           f"{results['n_draws']} draws" + notes


def suite_rows(bench, data: Path, model: str, scorer: str, out: Path, settings: dict,
               options: EvalOptions | None = None) -> tuple[list[dict], None]:
    """The suite's runner: `run_reviewers` with the suite's aggregate (`settings["aggregate"]`)."""
    from aspire.benchmarks.reviewers import load_reviewer_set

    aggregate = settings["aggregate"]
    exp = f"{Path(model).name}-{scorer}-{aggregate.replace(':', '')}"
    res = run_reviewers(load_reviewer_set(data), model, [scorer], out, exp, aggregate, options=options)
    note = f"aggregate {aggregate}; {res['texts']['empty_abstract']} empty abstracts (title only)"
    return [table_row(bench.title, bench.metrics[0], res["loss"], res["ci95"], res["n_reviewers"], note)], None


def ensemble_rows(bench, data: Path, members, out: Path, settings: dict, fuse) -> list[dict]:
    """The ensemble suite's runner: each member (`aspire.evaluate.options.Member`) run into
    `out/members/NAME/reviewers`, their predictions fused by `fuse` per draw and reviewer."""
    from aspire.benchmarks.reviewers import load_reviewer_set, read_predictions

    rset, aggregate = load_reviewer_set(data), settings["aggregate"]
    per_member = []
    for m in members:
        folder = out / "members" / m.name / "reviewers"
        run_reviewers(rset, m.model, [m.scorer], folder, m.name, aggregate, options=m.options)
        per_member.append([read_predictions(p) for p in prediction_files(folder / "predictions", m.name, rset)])
    preds = []
    for draw in zip(*per_member):  # each member's {reviewer: {submission: score}} of one draw
        runs = [{r: sorted(s.items(), key=lambda kv: -kv[1]) for r, s in pred.items()} for pred in draw]  # best first
        for m, run in zip(members[1:], runs[1:]):
            if set(run) != set(runs[0]):
                odd = sorted(set(run) ^ set(runs[0]))
                raise ValueError(f"ensemble members {members[0].name} and {m.name} predicted for different reviewers "
                                 f"(e.g. {odd[:3]})")
        preds.append({r: dict(ranked) for r, ranked in fuse(runs).items()})
    for path, pred in zip(prediction_files(out / "reviewers" / "predictions", "ensemble", rset), preds):
        write_json(path, pred, indent=None)
    res = summarize(*reviewer_units(rset, preds))
    write_json(out / "reviewers" / "results.json", {"benchmark": "reviewer-matching", "experiment": "ensemble",
                                                    "aggregate": aggregate, **res, "command": invocation()},
               indent=None)
    note = f"aggregate {aggregate}; members " + ", ".join(m.name for m in members)
    return [table_row(bench.title, bench.metrics[0], res["loss"], res["ci95"], res["n_reviewers"], note)]


FIGURES = ("loss",)  # what `compare_runs` compares two runs on


def prediction_spec(spec: str, docs: Mapping[str, dict | None] | None = None) -> tuple[Path, str] | None:
    """(predictions folder, experiment) of a reviewer-matching run given as a results folder (its
    `results.json` names the experiment; its predictions are in `predictions/`, or, for a folder written by
    `evaluate reviewers --predictions`, in the source folder it records) or as `FOLDER:EXP` for files
    `EXP_d_20_N_ta.json` (the published predictions); None for anything else. ValueError naming the folder
    when a results folder has neither, and naming the file when its `results.json` cannot be read
    (`aspire.evaluate.fuse.results_doc`) or names no experiment. `docs`: `{spec: results_doc(spec)}` where the
    caller has read it (else read here)."""
    from aspire.evaluate.fuse import results_doc

    meta = docs[spec] if docs is not None and spec in docs else results_doc(spec)
    if meta is not None:
        if meta.get("benchmark") != "reviewer-matching":
            return None
        exp = meta.get("experiment")
        if not isinstance(exp, str) or not exp:  # once a KeyError 'experiment', naming no file
            raise ValueError(f"{Path(spec) / 'results.json'}: a reviewer-matching results file names its experiment "
                             f"(a non-empty string 'experiment'), got {exp!r}")
        own = Path(spec) / "predictions"
        if own.is_dir() or not meta.get("predictions"):
            if not own.is_dir():
                raise ValueError(f"{spec}: a reviewer-matching results folder without its predictions (no "
                                 f"{own}, and its results.json records no source predictions)")
            return own, exp
        source = Path(meta["predictions"])
        if not source.is_dir():
            raise ValueError(f"{spec}: its results.json scores the predictions in {source}, which is not a folder "
                             "(a relative path is read from the current folder)")
        return source, exp
    folder, sep, exp = spec.rpartition(":")
    return (Path(folder), exp) if sep and Path(folder).is_dir() else None


def compare_runs(a: str, b: str, metrics=None, data=None, n_perm: int = 10000, seed: int = 0,
                 docs: Mapping[str, dict | None] | None = None) -> dict:
    """`{"loss": paired test + per-reviewer deltas}` of two reviewer-matching runs (`prediction_spec`), on the
    reviewer set in `data`. `metrics`: figures by name (`FIGURES`; None or empty: all); another name is a
    ValueError listing them. The per-reviewer deltas are those of the reviewers the test counts (a rated pair
    scored in some draw; `n_units` of them). `docs`: `{spec: results_doc(spec)}` where the caller has read them."""
    from aspire.benchmarks.reviewers import load_reviewer_set, read_prediction_set
    from aspire.benchmarks.stats import paired_test

    odd = [m for m in metrics or () if m not in FIGURES]
    if odd:  # once dropped without a word: `compare --metric MRR` printed the loss
        raise ValueError(f"reviewer-matching runs are compared on {', '.join(FIGURES)}, not {odd[0]!r}")
    specs = [prediction_spec(spec, docs) for spec in (a, b)]
    if None in specs:
        raise ValueError("cannot compare reviewer predictions with a ranked run")
    if not data:
        raise ValueError("reviewer predictions need the reviewer-matching folder (--data)")
    rset = load_reviewer_set(data)
    units, absent = [], []
    for folder, exp in specs:
        preds = read_prediction_set(folder, exp, rset)
        scores, counts = reviewer_units(rset, preds)
        units.append(scores)
        absent.append(counts["reviewers_not_predicted"])
    _check_paired(a, b, rset, units, absent)
    test = paired_test(units[0], units[1], n_perm=n_perm, seed=seed)
    den = units[0].den.sum(axis=0)
    scored = den > 0  # a reviewer with no scored pair has no delta (it was listed as 0.0, as if the runs agreed)
    deltas = (units[0].num - units[1].num).sum(axis=0)[scored] / den[scored]
    return {"loss": {**test, "per_unit_delta": dict(zip(np.asarray(units[0].units)[scored].tolist(),
                                                        deltas.tolist()))}}


def _check_paired(a: str, b: str, rset: ReviewerSet, units, absent) -> None:
    """ValueError naming the draws and reviewers whose pairs differ between two runs (a reviewer one run left
    out of a draw, or scored on other pairs), before the paired test refuses them without names."""
    differ = np.argwhere(~np.isclose(units[0].den, units[1].den))
    if not len(differ):
        return
    words = []
    for g, u in differ[:5]:
        reviewer, draw = units[0].units[u], rset.draws[g].name
        why = (f"not predicted by {a}" if reviewer in absent[0][g] else
               f"not predicted by {b}" if reviewer in absent[1][g] else "scored on other pairs")
        words.append(f"{reviewer} in {draw} ({why})")
    more = f" and {len(differ) - 5} more" if len(differ) > 5 else ""
    raise ValueError(f"{a} and {b} do not score the same reviewers and pairs in every draw: "
                     + "; ".join(words) + more)
