"""Self-training of the cross-encoder reranker on unlabelled citing sentences, round after round.

Each round labels queries with the current pipeline — the first stage (`aspire.evaluate.context2doc_rerank`)
with its top `shortlist` reranked by the current cross-encoder at weight `rerank_weight` (round 1: by
`start_model` when `label_with_start`, else the first stage alone) — taking the top `positives` as pseudo
positives and `negatives` documents drawn from ranks `band_from`..`band_to` (1-based, inclusive) as
pseudo negatives (the published setting: top 3 / bottom 15 of a shortlist of 20). The model is then
trained on those pairs (`aspire.train.crossencoder.fit_cross_encoder`, the `train` section's settings),
saved as `OUT/round-R/model`, and measured on the context2doc dev split. Every round's dev metrics, and
the share of pseudo positives that the train split's real labels confirm (a diagnostic only: the labels
are never used for training), are logged to `OUT/rounds.json`.

Queries: the citing sentences of context2doc's train split, their labels dropped (`max_queries` of them,
seeded). Test sentences are never read. With `acl_queries`, that many ACL Anthology abstracts (title and
abstract as the query text, `acl_path`; `read_acl`'s sample, the same papers whatever `seed`) join them as unlabelled queries; every benchmark paper
(`aspire.benchmarks.heldout.excluded_papers` under `benchmarks_dir`: by normalised title, paper id or abstract
text) and every candidate (the cited abstracts the queries are matched against; by the same three keys) is removed
first, and the counts are logged.

    python -m aspire.train.self_training --config configs/self_training.yaml --out runs/self-training [key=value ...]
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from aspire.config import ConfigError, ranged, save_config, to_dict
from aspire.io import write_json
from aspire.train.crossencoder import CrossEncoderConfig, config_cli, dev_check, fit_cross_encoder, labelled_pairs

UNREAD_TRAIN_KEYS = ("base_model", "negatives", "negative_depth", "max_queries")  # `train` keys of labelled training


@dataclass
class SelfTrainingConfig:
    start_model: str = "minilm"  # the cross-encoder of round 1: a trained directory, or minilm (fresh head)
    label_with_start: bool = False  # round 1 labels with start_model's rerank (else with the first stage alone)
    max_queries: int = ranged(200, ge=1)  # unlabelled train-split citing sentences, seeded sample
    rounds: int = ranged(2, ge=1)
    shortlist: int = ranged(20, ge=2)  # pipeline depth the labels come from
    positives: int = ranged(3, ge=1)  # top k of the shortlist: pseudo positives
    band_from: int = ranged(6, ge=2)  # pseudo negatives: ranks band_from..band_to of the shortlist (1-based)
    band_to: int = ranged(20, ge=2)
    negatives: int = ranged(3, ge=0)  # drawn per query from the band (0 = the whole band)
    rerank_weight: float = ranged(1.0, ge=0, le=1)  # cross-encoder weight in the labelling pipeline
    seed: int = ranged(7, ge=0)
    acl_queries: int = ranged(0, ge=0)  # ACL Anthology abstracts added as unlabelled queries (0 = none)
    acl_path: str = "../shared/data/acl-anthology/papers.jsonl.gz"
    benchmarks_dir: str | None = "../shared/data"  # benchmark papers removed from the ACL queries (None: not removed)
    train: CrossEncoderConfig = field(default_factory=CrossEncoderConfig)

    def check(self) -> SelfTrainingConfig:
        """Raise ConfigError unless positives < band_from <= band_to <= shortlist and `negatives` <= the band's width,
        where `rerank_weight` is set but no round reranks (one round, labelled by the first stage alone), and where a
        `train` key that only a cross-encoder's own training reads (its start model and its labelled pairs) is set:
        here `start_model` and the rounds' pseudo labels take their place, so the key would be ignored."""
        unread = [f"train.{f.name}" for f in fields(CrossEncoderConfig) if f.name in UNREAD_TRAIN_KEYS
                  and getattr(self.train, f.name) != getattr(CrossEncoderConfig(), f.name)]
        if unread:
            raise ConfigError(f"self-training does not read {', '.join(unread)} (its cross-encoder starts from "
                              "start_model and learns from the pseudo labels of max_queries, positives, band_from, "
                              "band_to and negatives); remove them")
        if not self.label_with_start and self.rounds == 1 and self.rerank_weight != SelfTrainingConfig().rerank_weight:
            raise ConfigError(f"rerank_weight={self.rerank_weight} is never read: one round labelled by the first "
                              "stage alone reranks nothing (set label_with_start=true or rounds >= 2, or remove it)")
        if not self.positives < self.band_from:
            raise ConfigError(f"band_from ({self.band_from}) must come after the {self.positives} positives")
        if not self.band_from <= self.band_to:
            raise ConfigError(f"band_from ({self.band_from}) must be <= band_to ({self.band_to})")
        if not self.band_to <= self.shortlist:
            raise ConfigError(f"band_to ({self.band_to}) must be within the shortlist ({self.shortlist})")
        width = self.band_to - self.band_from + 1
        if self.negatives > width:  # every query would get the band's `width` alone, said nowhere
            raise ConfigError(f"negatives={self.negatives} per query, but the band {self.band_from}..{self.band_to} "
                              f"holds {width} documents; lower negatives (0 = the whole band) or widen the band")
        return self


def pseudo_labels(ranked: Mapping[str, Sequence[str]], positives: int, band: tuple[int, int], negatives: int,
                  seed: int) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per query, the top `positives` documents and `negatives` drawn (seeded) from ranks band[0]..band[1].

    Ranks are 1-based and inclusive; `negatives` 0 takes the whole band. A query ranking fewer than
    band[0] documents gets no negatives; fewer than `positives` is an error naming it."""
    lo, hi = band
    if not 1 <= positives < lo <= hi:
        raise ValueError(f"need 1 <= positives ({positives}) < band start ({lo}) <= band end ({hi})")
    rng = random.Random(seed)
    pos, neg = {}, {}
    for qid, docs in ranked.items():
        if len(docs) < positives:
            raise ValueError(f"query {qid}: {len(docs)} ranked documents, fewer than {positives} positives")
        pos[qid] = list(docs[:positives])
        pool = list(docs[lo - 1:hi])
        neg[qid] = pool if negatives == 0 else rng.sample(pool, min(negatives, len(pool)))
    return pos, neg


def label_precision(pos: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> float:
    """Share of pseudo positives that are really cited (a diagnostic; labels never reach training)."""
    total = sum(len(d) for d in pos.values())
    return sum(1 for q, docs in pos.items() for d in docs if qrels[q].get(d, 0) > 0) / max(total, 1)


def add_acl_queries(bench, cfg: SelfTrainingConfig) -> dict:
    """Add `cfg.acl_queries` ACL Anthology papers to `bench.queries` as `acl:ID` (title and abstract), none a
    benchmark paper (`excluded_papers`) nor a candidate (by normalised title, paper id or abstract, as benchmark
    papers are left out); returns the counts read, removed and used."""
    from aspire.benchmarks.heldout import excluded_papers
    from aspire.data.acl import HeldOut, abstract_key, normalise_title, read_acl
    from aspire.scoring.lexical import paper_text

    held_out, counts = excluded_papers(cfg.benchmarks_dir, "benchmarks_dir")  # None: a warning, as the tasks give
    # a candidate is left out by title, id or abstract, as a benchmark paper is: by title alone, a candidate with an
    # empty title (two context2doc papers have one) came back as a query
    candidates = HeldOut(frozenset(normalise_title(p.title) for p in bench.candidates),
                         frozenset(p.paper_id for p in bench.candidates),
                         frozenset(abstract_key(p.sentences) for p in bench.candidates))
    papers, stats = read_acl(cfg.acl_path, held_out.union(candidates), cfg.acl_queries)
    bench.queries.update({f"acl:{p.paper_id}": paper_text(p) for p in papers})
    return {**stats, "excluded_titles": {"candidates": len(bench.candidates), **counts}}


def self_train(data_dir, out_dir, cfg: SelfTrainingConfig, split_file=None) -> list[dict]:
    """Run `cfg.rounds` rounds (see the module docstring); returns the rounds' log, also in `OUT/rounds.json`."""
    from aspire.benchmarks.context2doc import SPLIT_FILE, load_context2doc
    from aspire.evaluate.context2doc_rerank import cross_scores, first_stage_scores
    from aspire.evaluate.context2doc_run import candidate_texts, to_run
    from aspire.retrieval.crossencoder import rerank_run
    from aspire.scoring.crossencoder import CrossEncoderReranker, load_cross_encoder

    cfg.check()
    out_dir = Path(out_dir)
    bench = load_context2doc(data_dir, "train", split_file or SPLIT_FILE)
    keep = sorted(random.Random(cfg.seed).sample(sorted(bench.queries), min(cfg.max_queries, len(bench.queries))))
    bench.queries = {q: bench.queries[q] for q in keep}
    qrels, bench.qrels = {q: bench.qrels[q] for q in keep}, {}  # kept apart: only label_precision reads them
    acl_stats = add_acl_queries(bench, cfg) if cfg.acl_queries else None
    keep = list(bench.queries)
    texts = candidate_texts(bench)
    first = to_run(bench, first_stage_scores(bench, cfg.train.alpha, cfg.train.first_stage_model), cfg.shortlist)
    model = load_cross_encoder(cfg.start_model, cfg.train.max_length, seed=cfg.seed)  # a fresh head: from the seed
    labeller = model if cfg.label_with_start else None
    log: list[dict] = []
    save_config(cfg, out_dir / "self_training.yaml")
    for r in range(1, cfg.rounds + 1):
        ranked = first
        if labeller is not None:
            reranker = CrossEncoderReranker(labeller, cfg.train.max_length)
            ranked = rerank_run(first, cross_scores(bench, first, reranker, cfg.shortlist), cfg.shortlist,
                                cfg.rerank_weight)
        pos, neg = pseudo_labels({q: [d for d, _ in ranked[q]] for q in keep}, cfg.positives,
                                 (cfg.band_from, cfg.band_to), cfg.negatives, cfg.seed + r)
        round_dir = out_dir / f"round-{r}"
        fit = fit_cross_encoder(model, labelled_pairs(bench.queries, pos, neg, texts), round_dir, cfg.train)
        model.save_pretrained(str(round_dir / "model"))
        entry = {"round": r, "labelled_by": "first stage" if labeller is None else "cross-encoder rerank",
                 "queries": len(keep), **({"acl": acl_stats} if acl_stats else {}),
                 "pseudo_positive_precision": label_precision({q: pos[q] for q in qrels}, qrels),
                 **{k: v for k, v in fit.items() if k != "loss_history"}}
        if cfg.train.dev_top_n:
            entry["dev"] = dev_check(model, data_dir, cfg.train, split_file=split_file)
        log.append(entry)
        write_json(out_dir / "rounds.json", {"config": to_dict(cfg), "rounds": log})
        labeller = model
    return log


def main(argv: list[str] | None = None, prog: str = "python -m aspire.train.self_training") -> int:
    return config_cli(argv, prog, __doc__, SelfTrainingConfig,
                      "rounds=3 positives=3 band_from=6 train.max_steps=30", self_train, EXAMPLES)


EXAMPLES = """\
  aspire self-train --config configs/self_training.yaml --out runs/self-training
  python -m aspire.train.self_training --config configs/self_training.yaml --out runs/st-short rounds=1
"""


if __name__ == "__main__":
    raise SystemExit(main())
