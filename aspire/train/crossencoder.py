"""Train a cross-encoder reranker on context2doc's train split (citing sentence, cited abstract) pairs.

Positives: each train query's cited papers. Negatives: `negatives` papers drawn (seeded) from the first
stage's top `negative_depth` (`aspire.evaluate.context2doc_rerank.first_stage_scores`) minus the positives, so the
model learns to tell apart exactly the near misses it will rerank. sentence-transformers'
`CrossEncoderTrainer` with `BinaryCrossEntropyLoss`, from all-MiniLM-L6-v2's weights and a fresh head drawn from
`seed` (as are the negatives, the order of the pairs and the trainer's dropout: one config, one model).
It trains on the CPU even where a GPU is present (`use_cpu=True`), so that one config gives one model on every
machine; the reranker runs where `load_cross_stage`'s `device` puts it (`aspire.retrieval.crossencoder`).
Only the train split is read for training; the dev split's reranked MRR is measured after training.

    python -m aspire.train.crossencoder --config configs/crossencoder.yaml --out runs/crossencoder [key=value ...]

Writes `OUT/model` (a sentence-transformers CrossEncoder directory), `OUT/crossencoder.yaml` (the resolved
config) and `OUT/report.json` (pairs, seconds, loss history, dev metrics).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aspire.cliutil import check_fresh_out, command_parser, parse_and_run, print_json
from aspire.config import is_whole, load_config, ranged, save_config, to_dict
from aspire.encoders.pretrained import check_model
from aspire.io import write_json
from aspire.paths import DATA


@dataclass
class CrossEncoderConfig:
    base_model: str = "minilm"  # a name of aspire.encoders.pretrained or a directory (a CrossEncoder to continue)
    max_length: int = ranged(128, ge=16)  # word pieces of query + abstract
    negatives: int = ranged(3, ge=0)  # negatives per query
    negative_depth: int = ranged(30, ge=1)  # drawn from the first stage's top this many, positives removed
    max_queries: int = ranged(0, ge=0)  # 0 = every train query
    epochs: float = ranged(1.0, gt=0)
    max_steps: int = ranged(0, ge=0)  # 0 = as the epochs say
    batch_size: int = ranged(16, ge=1)
    learning_rate: float = ranged(2e-5, gt=0)
    warmup: float = ranged(0.1, ge=0, le=1)  # share of the run's steps spent warming the learning rate up
    first_stage_model: str = "minilm"  # first stage: this model's whole-abstract vector z-fused with BM25
    alpha: float = ranged(0.815, ge=0, le=1)  # first stage: weight on the dense z-scores against BM25
    dev_top_n: int = ranged(20, ge=0)  # rerank this many per dev query after training (0 = skip)
    dev_weight: float = ranged(1.0, ge=0, le=1)  # cross-encoder weight in that dev check
    seed: int = ranged(13, ge=0)
    logging_steps: int = ranged(20, ge=1)


def _doc_ids(docs, qid: str, what: str) -> list[str]:
    """A query's documents as a list; a string (read letter by letter, each letter a document) is a TypeError."""
    if isinstance(docs, str):
        raise TypeError(f"query {qid}: {what} is the string {docs!r}, not a sequence of document ids")
    return list(docs)


def labelled_pairs(queries: Mapping[str, str], positives: Mapping[str, Sequence[str]],
                   negatives: Mapping[str, Sequence[str]], texts: Mapping[str, str]) -> list[tuple[str, str, float]]:
    """`[(query, document text, 1.0 | 0.0), ...]`, a query's positives then its negatives, in the order of
    `queries`; a document named but without text, or a query with labels but no text, is an error naming it, as
    is a document labelled twice for one query (both positive and negative, or twice with one label)."""
    stray = [qid for qid in (*positives, *negatives) if qid not in queries]
    if stray:  # its pairs would be left out of training without a word
        raise ValueError(f"query {stray[0]}: labelled documents but no query text ({len(set(stray))} such queries)")
    pairs = []
    for qid, query in queries.items():
        seen: dict[str, float] = {}
        for docs, label in ((positives.get(qid, ()), 1.0), (negatives.get(qid, ()), 0.0)):
            for doc in _doc_ids(docs, qid, "positives" if label else "negatives"):
                if doc in seen:  # a positive also trained as a negative, or one pair trained twice
                    raise ValueError(f"query {qid}: document {doc} is labelled twice "
                                     f"({'positive' if seen[doc] else 'negative'}, then "
                                     f"{'positive' if label else 'negative'})")
                if doc not in texts:
                    raise ValueError(f"query {qid}: document {doc} has no text")
                seen[doc] = label
                pairs.append((query, texts[doc], label))
    return pairs


def sample_negatives(ranked: Mapping[str, Sequence[str]], positives: Mapping[str, Sequence[str]], n: int,
                     depth: int, seed: int) -> dict[str, list[str]]:
    """Per query, `n` distinct documents drawn (seeded) from the top `depth` of `ranked` that are not positives
    (all of them where fewer are left). A ranking that names a document twice is an error naming the query; so is an
    `n` that is not a whole number >= 0 or a `depth` that is not one >= 1 (-1 once left the last document out, 0
    drew nothing)."""
    for name, value, least in (("n (negatives per query)", n, 0), ("depth", depth, 1)):
        if not is_whole(value, least):
            raise ValueError(f"negative sampling {name} must be a whole number >= {least}, got {value!r}")
    n, depth = int(n), int(depth)  # a numpy integer is a whole number too
    rng = random.Random(seed)
    out = {}
    for qid, docs in ranked.items():
        top = _doc_ids(docs, qid, "the ranking")[:depth]
        repeated = sorted({d for d in top if top.count(d) > 1})
        if repeated:  # it would be drawn twice, one negative pair trained twice
            raise ValueError(f"query {qid}: the ranking names document(s) {repeated[:5]} more than once")
        pos = set(_doc_ids(positives.get(qid, ()), qid, "positives"))
        pool = [d for d in top if d not in pos]
        out[qid] = rng.sample(pool, min(n, len(pool)))
    return out


def fit_cross_encoder(model, pairs: Sequence[tuple[str, str, float]], out_dir: Path, cfg: CrossEncoderConfig) -> dict:
    """Train `model` (a CrossEncoder) on labelled pairs with BCE; returns steps, seconds and loss history."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    if not pairs:
        raise ValueError("no training pairs")
    data = Dataset.from_dict({"query": [q for q, _, _ in pairs], "document": [d for _, d, _ in pairs],
                              "label": [y for _, _, y in pairs]})
    # transformers reads a warmup_steps below 1 as a share of the steps but 1.0 as one step: the whole run is
    # given as its step count
    steps = cfg.max_steps or math.ceil(cfg.epochs * math.ceil(len(pairs) / cfg.batch_size))
    args = CrossEncoderTrainingArguments(
        output_dir=str(out_dir / "trainer"), num_train_epochs=cfg.epochs, max_steps=cfg.max_steps or -1,
        per_device_train_batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
        warmup_steps=cfg.warmup if cfg.warmup < 1 else steps,
        seed=cfg.seed, logging_steps=cfg.logging_steps, save_strategy="no", report_to="none", disable_tqdm=True,
        use_cpu=True,
    )
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data.shuffle(seed=cfg.seed),
                                  loss=BinaryCrossEntropyLoss(model))
    start = time.perf_counter()
    result = trainer.train()
    return {"pairs": len(pairs), "positives": sum(1 for p in pairs if p[2] > 0), "steps": result.global_step,
            "train_seconds": round(time.perf_counter() - start, 1), "training_loss_mean": result.training_loss,
            "loss_history": [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h]}


def dev_check(model, data_dir, cfg: CrossEncoderConfig, top_n: int | None = None, split_file=None) -> dict:
    """The dev split's first stage and its rerank of the top `top_n` (default `cfg.dev_top_n`) by `model`."""
    from aspire.benchmarks.context2doc import SPLIT_FILE, load_context2doc
    from aspire.evaluate.context2doc_rerank import cross_scores, first_stage_scores, metrics_of
    from aspire.evaluate.context2doc_run import to_run
    from aspire.retrieval.crossencoder import rerank_run
    from aspire.scoring.crossencoder import CrossEncoderReranker

    top_n = cfg.dev_top_n if top_n is None else top_n
    bench = load_context2doc(data_dir, "dev", split_file or SPLIT_FILE)
    first = to_run(bench, first_stage_scores(bench, cfg.alpha, cfg.first_stage_model), max(100, top_n))
    reranker = CrossEncoderReranker(model, cfg.max_length)
    cross = cross_scores(bench, first, reranker, top_n)
    return {"top_n": top_n, "weight": cfg.dev_weight, "first_stage": metrics_of(bench, first),
            "reranked": metrics_of(bench, rerank_run(first, cross, top_n, cfg.dev_weight)), "speed": reranker.speed()}


def train_on_context2doc(data_dir, out_dir, cfg: CrossEncoderConfig = CrossEncoderConfig()) -> dict:
    """Build the train split's pairs, train from `cfg.base_model`, save, check on dev; returns the report."""
    from aspire.benchmarks.context2doc import load_context2doc
    from aspire.evaluate.context2doc_rerank import first_stage_scores
    from aspire.evaluate.context2doc_run import candidate_texts, to_run
    from aspire.scoring.crossencoder import load_cross_encoder

    out_dir = Path(out_dir)
    bench = load_context2doc(data_dir, "train")
    if cfg.max_queries:
        keep = random.Random(cfg.seed).sample(sorted(bench.queries), min(cfg.max_queries, len(bench.queries)))
        bench.queries = {q: bench.queries[q] for q in sorted(keep)}
        bench.qrels = {q: bench.qrels[q] for q in bench.queries}
    ranked = {q: [d for d, _ in r] for q, r in to_run(bench, first_stage_scores(bench, cfg.alpha, cfg.first_stage_model),
                                                      cfg.negative_depth).items()}
    positives = {q: sorted(rel) for q, rel in bench.qrels.items()}
    negatives = sample_negatives(ranked, positives, cfg.negatives, cfg.negative_depth, cfg.seed)
    pairs = labelled_pairs(bench.queries, positives, negatives, candidate_texts(bench))
    model = load_cross_encoder(cfg.base_model, cfg.max_length, seed=cfg.seed)  # a fresh head: drawn from the seed
    report = {"base_model": cfg.base_model, "train_queries": len(bench.queries), **fit_cross_encoder(model, pairs, out_dir, cfg)}
    model.save_pretrained(str(out_dir / "model"))
    save_config(cfg, out_dir / "crossencoder.yaml")
    if cfg.dev_top_n:
        report["dev"] = dev_check(model, data_dir, cfg)
    report["config"] = to_dict(cfg)
    write_json(out_dir / "report.json", report)
    return report


def config_cli(argv, prog: str, doc: str, config_cls, example: str, run, examples: str) -> int:
    """`prog --data DIR --config YAML --out DIR key=value ...`: load `config_cls`, print `run(data, out, cfg)`'s
    result as (strict) JSON; a user error (bad config or data, a missing file, an --out that already holds files:
    `check_fresh_out`) is one line on stderr and exit status 2 (`run_command`)."""
    parser = command_parser(prog, doc, examples)
    parser.add_argument("--data", default=str(DATA / "cocite-acl"), help="co-citation folder (default %(default)s)")
    parser.add_argument("--config", help=f"YAML ({config_cls.__name__})")
    parser.add_argument("--out", required=True, help="output directory, new or empty")
    parser.add_argument("overrides", nargs="*", help=f"e.g. {example}")

    def go(args) -> int:
        cfg = load_config(config_cls, args.config, args.overrides)
        if hasattr(cfg, "check"):  # self-training's settings that cannot go together, before any model loads
            cfg.check()
        check_fresh_out(args.out)
        check_model(getattr(cfg, "start_model", None) or cfg.base_model)  # self-training starts from start_model
        print_json(run(args.data, args.out, cfg), indent=2)
        return 0

    return parse_and_run(parser, argv, go, common=(parser,))


def main(argv: list[str] | None = None, prog: str = "python -m aspire.train.crossencoder") -> int:
    def run(data, out, cfg):
        return {k: v for k, v in train_on_context2doc(data, out, cfg).items() if k != "loss_history"}

    return config_cli(argv, prog, __doc__, CrossEncoderConfig, "max_steps=200 negatives=2", run, EXAMPLES)


EXAMPLES = """\
  aspire train-crossencoder --config configs/crossencoder.yaml --out runs/crossencoder
  python -m aspire.train.crossencoder --config configs/crossencoder.yaml --out runs/crossencoder-short max_steps=200
"""


if __name__ == "__main__":
    raise SystemExit(main())
