"""Sentence alignment of co-cited pairs, by a teacher sentence encoder (CoSentBert).

For a training example (p, p') with its co-citation contexts:
- `cc_align` = [i, j]: the sentence i of p and the sentence j of p' most similar to the contexts,
  a sentence's similarity being its highest cosine to any of the example's contexts;
- `abs_align` = [i, j]: the sentence pair with the highest direct cosine (the ablation's alignment);
a tie (cosines within `TIE_TOLERANCE`, e.g. a sentence repeated in an abstract) goes to the earliest sentence.
Indices count the sentences of the paper's `abstract` list in `abstracts.jsonl` (the title is not a
sentence), 0-based.

    python -m aspire.data align --examples runs/cocite-acl/5_examples --teacher runs/cosentbert/model \
        --out runs/cocite-acl/6_aligned

writes `examples.{train,dev}.jsonl` (each example as given plus `cc_align`, `cc_align_sim` [cos of
i, cos of j], `abs_align`, `abs_align_sim`), copies `abstracts.jsonl` and `groups.*.jsonl`, and a
`report.json`, so the output directory is a drop-in examples directory for training. Before its first file the
stage writes `STAGE_MARKER` (removed after its report: `aspire.data.cocite.stages.begin_stage`), so a run killed
half-way is rerun into its folder and never read as finished.

Each example needs `example_id`, `query_id` and `positive_id` (strings; two different papers with
abstracts in `abstracts.jsonl`) and a non-empty list of non-blank strings under `text_field`; an
example id may appear once in a split. Anything else raises `DataError` naming the
file, the line and the key.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from aspire.batch import DocBatch
from aspire.config import position_limit, to_dict
from aspire.data.cocite.config import REPORT, SPLITS, AlignConfig
from aspire.data.cocite.stages import begin_stage, end_stage
from aspire.data.papers import read_paper_map
from aspire.io import AtomicJsonl, DataError, iter_jsonl, require, type_name, unique_id, write_json


def _unit(emb: Tensor) -> Tensor:
    return torch.nn.functional.normalize(emb, dim=-1)


TIE_TOLERANCE = 1e-6  # cosines this close to the best count as tied: a batched matmul gives two identical sentences
# cosines a float32 rounding apart (1e-7 seen), by their row and the batch's padding, so the later one could win


def _first_best(scores: Tensor) -> tuple[Tensor, Tensor]:
    """(B,) long index of the first entry of each row of `scores` (B, N) within `TIE_TOLERANCE` of the row's best,
    and (B,) its score. `max(dim)` alone let rounding pick the later of two tied sentences, and which one depended on
    the batch's padding and length."""
    best = scores.max(dim=1, keepdim=True).values  # (B, 1)
    index = (scores >= best - TIE_TOLERANCE).to(scores.dtype).argmax(dim=1)  # (B,): argmax takes the first of equals
    return index, scores.gather(1, index[:, None]).squeeze(1)


def cc_align(sents: DocBatch, contexts: DocBatch) -> tuple[Tensor, Tensor]:
    """The sentence of each paper most similar to its contexts.

    Args:
        sents: (B, S, D) sentence vectors of B papers, mask (B, S).
        contexts: (B, C, D) vectors of each paper's contexts, mask (B, C) (at least one real).
    Returns:
        index (B,) long: argmax over real sentences of (max over real contexts of cosine), a tie (within
        `TIE_TOLERANCE`) going to the earliest sentence; sim (B,): that sentence's similarity.
    """
    if not bool(contexts.mask.any(dim=1).all()) or not bool(sents.mask.any(dim=1).all()):
        raise ValueError("every paper needs at least one sentence and one context")
    sim = torch.einsum("bsd,bcd->bsc", _unit(sents.emb), _unit(contexts.emb))  # (B, S, C)
    low = torch.finfo(sim.dtype).min
    sim = sim.masked_fill(~contexts.mask[:, None, :], low)
    per_sentence = sim.max(dim=2).values.masked_fill(~sents.mask, low)  # (B, S)
    return _first_best(per_sentence)


def abs_align(a: DocBatch, b: DocBatch) -> tuple[Tensor, Tensor]:
    """The most similar sentence pair of each paper pair, by direct cosine.

    Args:
        a: (B, S1, D) sentence vectors, mask (B, S1); b: (B, S2, D), mask (B, S2).
    Returns:
        index (B, 2) long: [i, j] of the best real pair (a tie, within `TIE_TOLERANCE`, going to the smallest i,
        then j); sim (B,): its cosine.
    """
    if not bool(a.mask.any(dim=1).all()) or not bool(b.mask.any(dim=1).all()):
        raise ValueError("every paper needs at least one sentence")
    sim = torch.einsum("bsd,btd->bst", _unit(a.emb), _unit(b.emb))  # (B, S1, S2)
    valid = a.mask[:, :, None] & b.mask[:, None, :]  # (B, S1, S2)
    sim = sim.masked_fill(~valid, torch.finfo(sim.dtype).min)
    flat, best = _first_best(sim.flatten(1))  # (B,), row-major: the smallest i, then j
    n2 = sim.shape[2]
    return torch.stack([flat // n2, flat % n2], dim=1), best


def _encode(model, texts: list[str], cfg: AlignConfig) -> Tensor:
    """(N, D) unit vectors of `texts` from a sentence-transformers model; ValueError naming the texts whose vector
    is NaN or infinite (a broken teacher), which would otherwise align arbitrarily."""
    vecs = model.encode(texts, batch_size=cfg.encode_batch_size, convert_to_tensor=True,
                        normalize_embeddings=True, show_progress_bar=False)
    bad = (~torch.isfinite(vecs).all(dim=1)).nonzero().flatten().tolist()
    if bad:
        raise ValueError(f"the teacher gave {len(bad)} of {len(texts)} texts a NaN or infinite vector, e.g. "
                         f"{[texts[i][:60] for i in bad[:3]]}: no alignment can be read from it")
    return vecs


def _check_example(e: dict, path: Path, lineno: int, text_field: str, papers: dict, seen: dict[str, str]) -> None:
    """Raise `DataError("FILE:LINE: example ID: ...")` unless example `e` can be aligned (the module docstring's rules);
    `seen` maps the example ids of the split met so far to where."""
    require(e, ("example_id", "query_id", "positive_id", text_field), path, lineno)
    where = f"{path}:{lineno}"
    eid = unique_id(e["example_id"], "example_id", where, seen)
    for key in ("query_id", "positive_id"):
        pid = e[key]
        if not isinstance(pid, str):
            raise DataError(f"{where}: example {eid}: {key} must be a string (a paper_id of abstracts.jsonl), "
                            f"got {type_name(pid)} {pid!r:.60}")
        if pid not in papers:
            raise DataError(f"{where}: example {eid}: {key} {pid!r} has no abstract in abstracts.jsonl")
    if e["query_id"] == e["positive_id"]:
        raise DataError(f"{where}: example {eid} pairs paper {e['query_id']!r} with itself")
    texts = e[text_field]
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise DataError(f"{where}: example {eid}: {text_field} must be a list of strings, got {texts!r:.80}")
    if not texts:
        raise DataError(f"{where}: example {eid} has no contexts to align to ({text_field} is empty)")
    blank = next((k for k, t in enumerate(texts) if not t.strip()), None)
    if blank is not None:
        raise DataError(f"{where}: example {eid}: {text_field}[{blank}] is blank, nothing to align to (a citing "
                        "sentence that was all citation markers? filter.min_context_tokens leaves such contexts out)")


def _position_limit(teacher) -> int | None:
    """The most word pieces the teacher's first module (a sentence-transformers `Transformer`) reads: its model's
    position embeddings (2 fewer for the RoBERTa family: `aspire.config.position_limit`); None when the
    teacher does not say (a stand-in model). Its tokenizer's `model_max_length` is no limit: sentence-transformers
    keeps the teacher's own `max_seq_length` there (CoSentBert's 64, saved with it), which `align_examples` sets to
    `cfg.max_seq_length` for the run."""
    try:
        module = teacher[0]
    except (TypeError, IndexError, KeyError):
        return None
    return position_limit(getattr(getattr(module, "auto_model", None), "config", None))


def align_examples(examples_dir: str | Path, teacher, out_dir: str | Path, cfg: AlignConfig = AlignConfig()) -> dict:
    """Add `cc_align` / `abs_align` to every example of both splits (see the module docstring).

    `teacher` is a sentence-transformers model (e.g. `aspire.encoders.cosentbert.load_sentence_model`).
    Every abstract sentence of `abstracts.jsonl` and every distinct context is encoded once, at
    `cfg.max_seq_length`; the teacher's own length is restored afterwards. A `cfg.max_seq_length` above the
    teacher's position limit (`_position_limit`) raises ValueError before anything is read: the model would fail on
    the first text that long ("The size of tensor a (128) must match the size of tensor b (64)").
    """
    if cfg.max_seq_length is None:
        return _align_examples(examples_dir, teacher, out_dir, cfg)
    limit = _position_limit(teacher)
    if limit is not None and cfg.max_seq_length > limit:
        raise ValueError(f"align.max_seq_length={cfg.max_seq_length} is more than the teacher reads: its model has "
                         f"room for {limit} word pieces; set align.max_seq_length to at most {limit}, or null for "
                         f"the teacher's own length ({teacher.max_seq_length})")
    own = teacher.max_seq_length
    teacher.max_seq_length = cfg.max_seq_length
    try:
        return _align_examples(examples_dir, teacher, out_dir, cfg)
    finally:
        teacher.max_seq_length = own


def _align_examples(examples_dir: str | Path, teacher, out_dir: str | Path, cfg: AlignConfig) -> dict:
    """`align_examples` with the teacher's input length set."""
    examples_dir, out_dir = Path(examples_dir), Path(out_dir)
    papers = read_paper_map(examples_dir / "abstracts.jsonl", split_strings=False)
    empty = [pid for pid, p in papers.items() if not p.sentences]
    if empty:
        raise ValueError(f"papers without abstract sentences cannot be aligned: {empty[:5]}")
    by_split: dict[str, list[dict]] = {split: [] for split in SPLITS}  # every example checked before encoding
    for split in SPLITS:
        path, seen = examples_dir / f"examples.{split}.jsonl", {}
        for lineno, obj in iter_jsonl(path):
            _check_example(obj, path, lineno, cfg.text_field, papers, seen)
            by_split[split].append(obj)
    order = sorted(papers)
    flat = _encode(teacher, [s for pid in order for s in papers[pid].sentences], cfg)  # (N, D)
    sent_vecs = dict(zip(order, torch.split(flat, [len(papers[pid].sentences) for pid in order])))

    report: dict = {"stage": "align", "input": str(examples_dir), "config": to_dict(cfg)}
    begin_stage(out_dir, "align")
    for split, examples in by_split.items():
        texts = list(dict.fromkeys(t for e in examples for t in e[cfg.text_field]))
        ctx_vecs = _encode(teacher, texts, cfg) if texts else None
        row = {t: k for k, t in enumerate(texts)}
        counts = {"examples": 0, "cc_equals_abs": 0, "cc_on_first_sentences": 0}
        with AtomicJsonl(out_dir / f"examples.{split}.jsonl") as out:
            for start in range(0, len(examples), cfg.chunk):
                chunk = examples[start:start + cfg.chunk]
                q = DocBatch.from_list([sent_vecs[e["query_id"]] for e in chunk])
                p = DocBatch.from_list([sent_vecs[e["positive_id"]] for e in chunk])
                ctx = DocBatch.from_list([ctx_vecs[[row[t] for t in e[cfg.text_field]]] for e in chunk])
                qi, qsim = cc_align(q, ctx)
                pj, psim = cc_align(p, ctx)
                pair, pair_sim = abs_align(q, p)
                for k, e in enumerate(chunk):
                    cc = [int(qi[k]), int(pj[k])]
                    ab = [int(pair[k, 0]), int(pair[k, 1])]
                    counts["examples"] += 1
                    counts["cc_equals_abs"] += cc == ab
                    counts["cc_on_first_sentences"] += cc == [0, 0]
                    out.write({**e, "cc_align": cc, "cc_align_sim": [round(float(qsim[k]), 4), round(float(psim[k]), 4)],
                               "abs_align": ab, "abs_align_sim": round(float(pair_sim[k]), 4)})
        report[split] = counts
    for name in ("abstracts.jsonl", "groups.train.jsonl", "groups.dev.jsonl"):
        if (examples_dir / name).is_file():
            with AtomicJsonl(out_dir / name) as out:
                for _, obj in iter_jsonl(examples_dir / name):
                    out.write(obj)
    write_json(out_dir / REPORT, report)
    end_stage(out_dir)
    return report
