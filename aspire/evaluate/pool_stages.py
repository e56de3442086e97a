"""The search pipeline's stages on judged pools (CSFCube): BM25, its fusion with a model's run, a cross-encoder rerank.

Each stage writes its ranked files (`test-pid2pool-NAME-EXP-FACET-ranked.json`, similarities best first) into
the run's folder, and the next stage reads them, so every stage can also be scored or fused on its own:

    BM25        `bm25_rankings`: bm25s (k1, b) over title + abstract (`aspire.scoring.lexical`), one index over
                every paper of the pool set, so the IDF is the whole corpus's (for CSFCube its 4,205 papers), as
                in a search index; each query's pool is read off its scores (experiment name `bm25`)
    fusion      a model's run and BM25's, per query over the pool: z-scores, weight alpha on the model
                (`aspire.evaluate.fuse.fuse_pool_set`, the code of `aspire evaluate fuse`)
    rerank      each pool's top N re-scored by a cross-encoder and mixed with the previous stage's scores
                (`aspire.retrieval.crossencoder.rerank_texts`, the context2doc hook's code)

Query text, read by BM25 and the cross-encoder (`query_texts`): a facet query's selected sentences, those of
its abstract whose label maps to the facet (the sentences the contextual scorers match and `aspire search`
reads), joined by spaces; in a set without facets, the query's title and abstract. Candidate text: title and
abstract joined by spaces (`aspire.scoring.lexical.paper_text`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from aspire.benchmarks.pools import PoolSet, existing_ranked_path, query_key, ranked_path, write_ranked
from aspire.data.papers import Paper
from aspire.evaluate.options import BM25_EXP, Stages

Scored = dict[str, dict[str, list[tuple[str, float]]]]  # {facet: {query_pid: [(cand_pid, score), ...]}}


def query_texts(pool_set: PoolSet, papers: Mapping[str, Paper],
                label_to_facet: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """`{facet: {query_pid: text}}`: the query's facet sentences joined by spaces (the whole paper's text in a
    set without facets); a query with no sentence of its facet is an error naming it."""
    from aspire.evaluate.facets import facet_positions
    from aspire.scoring.lexical import paper_text

    out: dict[str, dict[str, str]] = {}
    for facet, pools in pool_set.pools.items():
        out[facet] = {}
        for qid in pools:
            paper = papers[qid]
            if not facet:
                out[facet][qid] = paper_text(paper)
                continue
            chosen = facet_positions(paper, len(paper.sentences), facet, label_to_facet)
            if not chosen:
                raise ValueError(f"query {qid}: no sentence of facet {facet!r} to read as query text")
            out[facet][qid] = " ".join(paper.sentences[j] for j in chosen)
    return out


def bm25_rankings(pool_set: PoolSet, papers: Mapping[str, Paper], label_to_facet: Mapping[str, str],
                  k1: float = 1.25, b: float = 0.75) -> Scored:
    """Every pool ranked by the BM25 score of its query's text (`query_texts`) against each candidate's title
    and abstract; the index (and its IDF) covers every paper of the pool set. Ties keep pool order."""
    import numpy as np

    from aspire.scoring.lexical import BM25Index, paper_text

    ids = sorted(pool_set.paper_ids())
    index = BM25Index([paper_text(papers[p]) for p in ids], ids, k1, b)
    column = {p: j for j, p in enumerate(ids)}
    out: Scored = {}
    for facet, texts in query_texts(pool_set, papers, label_to_facet).items():
        qids = list(texts)
        scores = index.scores([texts[q] for q in qids])  # (Q, N)
        out[facet] = {}
        for qid, row in zip(qids, scores):
            pool = list(pool_set.pools[facet][qid])
            values = row[[column[c] for c in pool]]
            order = np.argsort(-values, kind="stable")
            out[facet][qid] = [(pool[j], float(values[j])) for j in order]
    return out


def read_scored_pool_set(pool_set: PoolSet, folder: str | Path, exp: str) -> Scored:
    """`{facet: {query: [(cand, similarity), ...]}}` from the ranked files of `exp` in `folder`; a file that does not
    rank exactly the pool set's queries, each over exactly its pool (another pool set's, or a stale run's), is a
    ValueError naming the file and a query."""
    from aspire.evaluate.fuse import read_scored

    out: Scored = {}
    for facet in pool_set.facets:
        path = existing_ranked_path(folder, pool_set.name, exp, facet)
        scored = read_scored(path)
        pools = pool_set.pools[facet]
        if set(scored) != set(pools):  # once a query missing from the file was dropped from the run unsaid
            missing, extra = sorted(set(pools) - set(scored)), sorted(set(scored) - set(pools))
            raise ValueError(f"{path}: ranks other queries than the pool set {pool_set.name!r}"
                             f"{' (' + facet + ')' if facet else ''}: missing {missing[:5]}, not pooled {extra[:5]}")
        for qid, pool in pools.items():
            if set(scored[qid]) != set(pool):
                missing, extra = sorted(set(pool) - set(scored[qid])), sorted(set(scored[qid]) - set(pool))
                raise ValueError(f"{path}: query {qid}: ranks other candidates than its pool: missing {missing[:5]}, "
                                 f"not pooled {extra[:5]}")
        out[facet] = {q: list(s.items()) for q, s in scored.items()}
    return out


def write_scored(pool_set: PoolSet, folder: str | Path, exp: str, rankings: Scored) -> None:
    for facet in pool_set.facets:
        write_ranked(ranked_path(folder, pool_set.name, exp, facet), rankings[facet])


def rerank_rankings(pool_set: PoolSet, papers: Mapping[str, Paper], label_to_facet: Mapping[str, str],
                    rankings: Scored, options, out: Path | None = None) -> tuple[Scored, dict]:
    """Each pool's top `options.top_n` re-scored by the cross-encoder (`aspire.retrieval.crossencoder.RerankOptions`)
    and mixed; returns the rankings and the record of settings and speed. With `out`, the logits are written to
    `out/crossencoder_scores.json`, keyed by query key (`pid_facet`)."""
    from aspire.retrieval.crossencoder import rerank_texts
    from aspire.scoring.lexical import paper_text

    where = {query_key(q, f): (f, q) for f in pool_set.facets for q in rankings[f]}
    texts = query_texts(pool_set, papers, label_to_facet)
    queries = {key: texts[f][q] for key, (f, q) in where.items()}
    flat = {key: rankings[f][q] for key, (f, q) in where.items()}
    docs = {c: paper_text(papers[c]) for ranked in flat.values() for c, _ in ranked}
    mixed, record = rerank_texts(queries, docs, flat, options, out)
    out_rankings: Scored = {f: {} for f in pool_set.facets}
    for key, ranked in mixed.items():
        facet, qid = where[key]
        out_rankings[facet][qid] = ranked
    return out_rankings, record


def check_stage_names(exp: str, dense_exp: str | None, stages: Stages) -> None:
    """ValueError when `exp`, the name the last stage is written under, is the name of an earlier stage's ranked
    files (the model's `dense_exp`, `bm25`, their fusion), which would then hold another stage's ranking."""
    earlier = {dense_exp: "the model's run"} if dense_exp is not None else {}
    if stages.bm25:
        earlier[BM25_EXP] = "the BM25 stage"
        if dense_exp is not None:
            earlier[Stages(bm25=True, alpha=stages.alpha).exp(dense_exp)] = "the fusion stage"
    if stages.rerank is None:  # no rerank: the last of these is the last stage, written under both names
        earlier.pop(replace(stages, rerank=None).exp(dense_exp), None)
    if exp in earlier:
        raise ValueError(f"experiment name {exp!r} is the name of {earlier[exp]}'s ranked files, which the last "
                         "stage would overwrite; choose another --exp")


def run_stages(pool_set: PoolSet, papers: Mapping[str, Paper], label_to_facet: Mapping[str, str], out: Path,
               exp: str, dense_exp: str | None, stages: Stages) -> tuple[dict[str, dict[str, list[str]]], dict]:
    """Compose the stages over `out`'s ranked files: the model's (`dense_exp`, already written there), BM25,
    their fusion (weight `stages.alpha` on the model) and the cross-encoder rerank; the last stage is written as
    `exp` (`check_stage_names`: not an earlier stage's name). Returns `({facet: {query: [cand, ...]}}, run info)`."""
    from aspire.evaluate.fuse import fuse_pool_set

    stages.checked(dense_exp is not None)
    check_stage_names(exp, dense_exp, stages)
    bm25, alpha, k1, b, rerank = stages.bm25, stages.alpha, stages.k1, stages.b, stages.rerank
    info: dict = {}
    current = dense_exp
    if bm25:
        write_scored(pool_set, out, BM25_EXP, bm25_rankings(pool_set, papers, label_to_facet, k1, b))
        from aspire.scoring.lexical import default_settings

        info["bm25"] = {**default_settings(k1, b), "idf": f"every paper of the pool set ({len(pool_set.paper_ids())})",
                        "query_text": "the facet's sentences" if pool_set.facets != [""] else "title + abstract",
                        "candidate_text": "title + abstract"}
        current = BM25_EXP
        if dense_exp is not None:
            current = Stages(bm25=True, alpha=alpha).exp(dense_exp)
            fuse_pool_set(pool_set, [(out, dense_exp), (out, BM25_EXP)], out, current, [alpha, 1.0 - alpha])
            info["fusion"] = {"method": "z", "alpha_dense": alpha, "runs": [dense_exp, BM25_EXP]}
    scored = read_scored_pool_set(pool_set, out, current)
    if rerank is not None:
        scored, info["rerank"] = rerank_rankings(pool_set, papers, label_to_facet, scored, rerank, out)
        info["rerank"]["first_stage"] = current
    write_scored(pool_set, out, exp, scored)
    return {f: {q: [c for c, _ in r] for q, r in scored[f].items()} for f in pool_set.facets}, info
