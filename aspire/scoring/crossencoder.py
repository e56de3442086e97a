"""Cross-encoder reranking: re-score the top N of a first stage with a (query, document) pair model.

A cross-encoder (sentence-transformers' `CrossEncoder`, one logit a pair) reads the query and a
document's text together, so it is far slower than a vector comparison and is only run on a first
stage's top `top_n`. Its logits are mixed with the first stage's scores over those N documents:
per list z-scored (`aspire.scoring.fusion`) and summed with weight `weight` on the cross-encoder and
1 - weight on the first stage (weight 1 replaces the first-stage order, weight 0 keeps it). Documents
below the top N keep their first-stage order, all after the reranked ones.

    reranker = CrossEncoderReranker("runs/crossencoder/model")
    ranked = reranker.rerank("citing sentence", first_stage, texts, top_n=50, weight=0.5)

`first_stage` is `[(doc, score), ...]` best first; `texts` maps a document to the text the model reads
(`paper_text`: title and abstract sentences joined by spaces). Scores are similarities (higher is better).

A pair is read as `[CLS] query [SEP] text [SEP]` of at most the model's `max_length` word pieces (special tokens
included): a longer pair is cut longest first (word pieces dropped from the end of whichever of the query and the
text is longer at each step), as sentence-transformers' `CrossEncoder` does in `predict` and in training alike.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from aspire.config import position_limit
from aspire.io import read_json
from aspire.scoring.fusion import fuse_ranked

NORMS = ("z", "minmax")


def check_max_length(model, config_path: Path, max_length: int | None) -> None:
    """ValueError naming the model and both numbers when `max_length` word pieces a pair are more than the model whose
    `config.json` is `config_path` reads (`aspire.config.position_limit`); None reads the model's own."""
    if max_length is None:
        return
    limit = position_limit(read_json(config_path, "cross-encoder's config", mapping=True))
    if limit is not None and max_length > limit:
        raise ValueError(f"cross-encoder model {model!r}: max_length {max_length} is past the {limit} word pieces its "
                         f"position embeddings hold ({config_path}): give {limit} or fewer")


def load_cross_encoder(model, max_length: int | None = None, device: str | None = None, seed: int = 0):
    """A `CrossEncoder` from a directory or a model name of `aspire.encoders.pretrained` (`minilm`, `mpnet`), on
    `device` (default the CPU).

    A plain encoder (no classification head) gets a fresh one-logit head, the starting point for training, drawn
    from torch's CPU generator seeded `seed` (the caller's generators are left as they were): one seed, one starting
    model. `max_length` None keeps the length the model was saved with (a trained cross-encoder's own); one past the
    model's position embeddings (`check_max_length`) is a ValueError naming both, before the model loads (a pair that
    long failed in the model's pass: "The size of tensor a (1024) must match the size of tensor b (512)"). A loaded
    `CrossEncoder` is returned as it is; a `max_length` or `device` other than its own is a ValueError (it was
    once ignored without a word).
    """
    import torch
    import transformers
    from sentence_transformers.cross_encoder import CrossEncoder

    if isinstance(model, CrossEncoder):
        if max_length is not None and max_length != model.max_seq_length:
            raise ValueError(f"a loaded CrossEncoder reads {model.max_seq_length} word pieces a pair, not the "
                             f"max_length {max_length} asked for: load it with that length")
        want = torch.device(device) if device is not None else None
        if want is not None and (want.type != model.device.type or want.index not in (None, model.device.index)):
            raise ValueError(f"a loaded CrossEncoder is on {model.device}, not on the device {device!r} asked for")
        return model
    from aspire.encoders.pretrained import resolve_model

    path = Path(resolve_model(str(model)))
    if not (path / "config.json").is_file():
        raise ValueError(f"cross-encoder model {model!r}: no config.json under {path}")
    check_max_length(model, path / "config.json", max_length)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # a plain encoder's missing head is expected, not news
    try:
        # the fresh head is drawn on the CPU (the model moves to `device` after loading); the caller's generators,
        # the CPU's and any GPU's, are left as they were
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            return CrossEncoder(str(path), num_labels=1, max_length=max_length, device=device or "cpu",
                                local_files_only=True)
    finally:
        transformers.logging.set_verbosity(verbosity)


def check_trained_cross_encoder(path: str | Path, max_length: int | None = None) -> Path:
    """`path` as a directory holding a trained cross-encoder: a Hugging Face sequence-classification
    model with one label (what `aspire.train.crossencoder` saves). A missing directory, or a plain
    encoder (which `load_cross_encoder` would give a random head), raises ValueError naming the path; so does a
    `max_length` past its position embeddings (`check_max_length`, the check its load makes), found here before
    anything loads."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"cross-encoder {str(path)!r}: no such directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"cross-encoder {str(path)!r}: no config.json (not a Hugging Face model directory)")
    settings = read_json(path / "config.json", "cross-encoder's config", mapping=True)
    heads = [a for a in settings.get("architectures") or [] if str(a).endswith("ForSequenceClassification")]
    labels = len(settings.get("id2label") or {"0": ""})
    if not heads or labels != 1:
        raise ValueError(f"cross-encoder {str(path)!r}: not a trained cross-encoder (config.json: architectures "
                         f"{settings.get('architectures')}, {labels} label(s); one sequence-classification logit is "
                         "needed: train one with python -m aspire.train.crossencoder)")
    check_max_length(str(path), path / "config.json", max_length)
    return path


def _check_top_n(top_n) -> None:
    if not isinstance(top_n, numbers.Integral) or isinstance(top_n, bool) or top_n < 1:
        raise ValueError(f"top_n must be a whole number >= 1, got {top_n!r}")


def mix_rerank(first_stage: Sequence[tuple[str, float]], cross: Mapping[str, float], top_n: int,
               weight: float, norm: str = "z") -> list[tuple[str, float]]:
    """The first stage with its top `top_n` re-ordered by `weight` * cross + (1 - weight) * first stage.

    `first_stage` is best first; `cross` holds a cross-encoder score for each of its top `top_n`
    documents. Scores of the head are the normalised mix, equal ones by document id (`fuse_ranked`'s rule; weight 0
    keeps the first stage's order exactly); the tail keeps its first-stage order with scores shifted below the
    head's lowest, each strictly below the one before unless their first-stage scores are equal (a shift that rounds
    two apart to one value is moved down a float), and its ties ordered by id too (at weight 0 in the first stage's
    order, as the head's). Equal mixes come of documents both lists tie, or at weight 1 of equal cross-encoder scores alone:
    those are ordered by id, not by first-stage rank (cross-encoder scores all equal at weight 1 order the whole head
    by id), so the head is `fuse_ranked` of the two lists, as `fuse-runs` and search's fusion order the same scores,
    whatever order the first stage lists its ties in; the search stage's `cross_rerank` names the rule too. Returns
    `[(doc, score), ...]` best first. A document listed twice, a score that is not finite (first stage or
    cross-encoder) or a first stage out of order is an error naming the document.
    """
    _check_top_n(top_n)
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the cross-encoder weight must be in [0, 1], got {weight}")
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; valid: {', '.join(NORMS)}")
    seen: set[str] = set()
    for doc, score in first_stage:
        if doc in seen:
            raise ValueError(f"document {doc!r} is listed twice in the first stage")
        seen.add(doc)
        if not np.isfinite(score):
            raise ValueError(f"document {doc!r}: first-stage score {score} is not finite")
    rising = next((i for i in range(1, len(first_stage)) if first_stage[i][1] > first_stage[i - 1][1]), None)
    if rising is not None:  # the head and the tail are cut by position: an unordered list mixes the wrong ones
        (before, a), (doc, b) = first_stage[rising - 1], first_stage[rising]
        raise ValueError(f"the first stage must be best first (scores not increasing), but document {doc!r} at rank "
                         f"{rising + 1} scores {b} above {before!r} at rank {rising} ({a})")
    head, tail = list(first_stage[:top_n]), list(first_stage[top_n:])
    if not head:
        return []
    missing = [d for d, _ in head if d not in cross]
    if missing:
        raise ValueError(f"no cross-encoder score for {len(missing)} of the top {top_n} (e.g. {missing[:3]})")
    bad = [d for d, _ in head if not np.isfinite(cross[d])]
    if bad:
        raise ValueError(f"cross-encoder score {cross[bad[0]]} of document {bad[0]!r} is not finite")
    first = {d: float(s) for d, s in head}
    mixed = fuse_ranked([{d: float(cross[d]) for d in first}, first], [weight, 1.0 - weight], norm)
    if weight == 0.0:  # keep the first stage's order exactly, ties included
        position = {d: i for i, (d, _) in enumerate(head)}
        mixed = sorted(mixed, key=lambda kv: position[kv[0]])
    if not tail:
        return mixed
    if weight != 0.0:  # tail ties by id as the head's (else by how the first stage happened to list them)
        tail = sorted(tail, key=lambda kv: (-float(kv[1]), kv[0]))
    floor = min(s for _, s in mixed)
    top_tail = float(tail[0][1])
    shifted: list[tuple[str, float]] = []
    below, last = floor, None  # each tail score strictly below the one before unless their first-stage scores tie
    for d, s in tail:
        s = float(s)
        if s == last:
            score = below
        else:  # the shift rounds: first-stage scores 1 ulp apart (0.011 and the float below it) shifted to one value
            score = floor - 1.0 - (top_tail - s)
            if not score < below:
                score = float(np.nextafter(below, -np.inf))
        shifted.append((d, score))
        below, last = score, s
    return mixed + shifted


class CrossEncoderReranker:
    """A cross-encoder over (query, document text) pairs; `score` gives raw logits (higher is better)."""

    def __init__(self, model, max_length: int | None = None, batch_size: int = 32, device: str | None = None) -> None:
        self.model = load_cross_encoder(model, max_length, device)
        self.batch_size = batch_size
        self.pairs_scored = 0
        self.seconds = 0.0

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """(P,) float32 logits of `[(query, document text), ...]`."""
        from torch import nn

        if not pairs:
            return np.zeros(0, dtype=np.float32)
        start = time.perf_counter()
        out = self.model.predict(list(pairs), batch_size=self.batch_size, activation_fn=nn.Identity(),
                                 show_progress_bar=False, convert_to_numpy=True)
        self.seconds += time.perf_counter() - start
        self.pairs_scored += len(pairs)
        return np.asarray(out, dtype=np.float32).reshape(len(pairs))

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """(N,) logits of one query against each text."""
        return self.score_pairs([(query, t) for t in texts])

    def head_scores(self, query: str, first_stage: Sequence[tuple[str, float]], texts: Mapping[str, str],
                    top_n: int) -> dict[str, float]:
        """`{doc: logit}` of this model over the top `top_n` of `first_stage` (best first), read from `texts`;
        a document without a text (a string) is an error naming it, as is a `top_n` that is not a whole number >= 1
        (checked before any pair is scored)."""
        _check_top_n(top_n)
        head = [d for d, _ in first_stage[:top_n]]
        missing = [d for d in head if d not in texts]
        if missing:
            raise ValueError(f"no text for documents {missing[:5]} of the first stage")
        odd = [d for d in head if not isinstance(texts[d], str)]
        if odd:
            raise ValueError(f"document {odd[0]!r}: its text is a {type(texts[odd[0]]).__name__}, not a string")
        return dict(zip(head, self.score(query, [texts[d] for d in head]).tolist()))

    def rerank(self, query: str, first_stage: Sequence[tuple[str, float]], texts: Mapping[str, str],
               top_n: int = 50, weight: float = 1.0, norm: str = "z") -> list[tuple[str, float]]:
        """`mix_rerank` of `first_stage` with this model's scores of its top `top_n` (see the module)."""
        return mix_rerank(first_stage, self.head_scores(query, first_stage, texts, top_n), top_n, weight, norm)

    def speed(self) -> dict:
        """Pairs scored so far, their seconds and pairs per second."""
        rate = self.pairs_scored / self.seconds if self.seconds else float("nan")
        return {"pairs": self.pairs_scored, "seconds": round(self.seconds, 2), "pairs_per_second": round(rate, 2)}
