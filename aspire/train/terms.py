"""The distance terms of the document models and kind `abstract`'s one-vector text encoding.

A term gives the distance of aligned pairs (`pairwise_dist`, (B,)) and of all pairs (`dist`,
(Bq, Bc)), plus the similarity the ranking losses use (`sim` / `pairwise_sim`: minus the distance,
except for the cosine terms — `cosine`, and kind `hybrid`'s `whole` and `facet` — whose similarity is the
cosine itself and distance 1 - cosine). `KINDS` maps `model.kind` to
its terms and inference scorer (the table in `aspire.train.document_model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor, nn
from torch.profiler import record_function

from aspire.batch import DocBatch
from aspire.data.papers import Paper, abstract_text
from aspire.encoders.codes import encoding_with_code
from aspire.encoders.pooling import masked_mean
from aspire.losses import pairwise_vector_l2_dist, vector_l2_dist
from aspire.scoring.vector import VectorCosine
from aspire.train.config import KINDS, AbstractConfig, ModelConfig

NO_SCORER = {"vector", "cosine", "abstract", "whole", "facet"}  # terms computed here, not by aspire.scoring


def kind_terms(kind: str) -> tuple[tuple[str, ...], str]:
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; valid kinds: {sorted(KINDS)}")
    return KINDS[kind]


def make_scorer(name: str, cfg: ModelConfig) -> nn.Module:
    """The `aspire.scoring` scorer `name` with the config's settings (`aspire.train.config.SCORER_KEYS`: the OT
    scorer's `ot_*`, the attention scorer's `att_tau`)."""
    from aspire.scoring import get_scorer

    if name == "ot":
        return get_scorer("ot", eps=cfg.ot_eps, tau=cfg.ot_tau, tol=cfg.ot_tol, max_iter=cfg.ot_max_iter,
                          grad=cfg.ot_grad)
    if name == "attention":
        return get_scorer("attention", tau=cfg.att_tau)
    # "hybrid": its default weighting, whole + facet (kind `hybrid+ts` also trains `minl2`; weights are chosen at
    # evaluation); its OT term, unweighted, is never computed, so the `ot_*` settings are not its to read
    return get_scorer(name)


class DistTerm:
    """Similarities as minus the distances (the sign convention of `aspire.scoring`)."""

    def sim(self, a: DocBatch, b: DocBatch) -> Tensor:
        return -self.dist(a, b)

    def pairwise_sim(self, a: DocBatch, b: DocBatch) -> Tensor:
        return -self.pairwise_dist(a, b)


class ScorerDist(DistTerm):
    """Distances of an `aspire.scoring` scorer (its `score` is minus these), labelled for the profiler."""

    def __init__(self, scorer: nn.Module, name: str) -> None:
        self.scorer, self.name = scorer, name

    def pairwise_dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        with record_function(f"dist:{self.name}"):
            return self.scorer.pairwise_dist(a, b)

    def dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        with record_function(f"dist:{self.name}"):
            return self.scorer.dist(a, b)


class VectorDist(DistTerm):
    """L2 between single-vector papers (the co-citation vector baseline)."""

    name = "vector_l2"

    def pairwise_dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return pairwise_vector_l2_dist(a, b)

    def dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return vector_l2_dist(a, b)


class CosineTerm:
    """Cosine between single-vector papers (B, 1, D), `aspire.scoring.vector.VectorCosine` (the evaluation's
    `abstract` scorer): similarity cos, distance 1 - cos."""

    name = "cosine"
    cosine = VectorCosine()

    def sim(self, a: DocBatch, b: DocBatch) -> Tensor:
        return self.cosine.score(a, b)  # (Bq, Bc)

    def pairwise_sim(self, a: DocBatch, b: DocBatch) -> Tensor:
        return self.cosine.pairwise_score(a, b)  # (B,)

    def dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return self.cosine.dist(a, b)

    def pairwise_dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return self.cosine.pairwise_dist(a, b)


class PassCosine(DistTerm):
    """Kind `hybrid`'s terms, from one contextual pass: the cosine of a query-side vector and the other paper's
    whole-abstract vector (`DocBatch.whole`). `facet`: the query side is the mean of its *selected* sentence
    vectors (the trainer selects the anchor's aligned sentence), as `aspire.scoring.scorers.HybridScorer` scores
    a facet query; `whole`: the anchor's own whole vector."""

    def __init__(self, name: str) -> None:
        from aspire.scoring.scorers import HybridScorer

        self.name, self.hybrid = name, HybridScorer({name: 1.0})

    def sim(self, a: DocBatch, b: DocBatch) -> Tensor:
        return self.hybrid.term_scores(a, b, (self.name,))[self.name]  # (Ba, Bb)

    def pairwise_sim(self, a: DocBatch, b: DocBatch) -> Tensor:
        return self.hybrid.pairwise_score(a, b)  # (B,): weight 1, no calibration

    def dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return 1 - self.sim(a, b)

    def pairwise_dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return 1 - self.pairwise_sim(a, b)


@dataclass
class TextInputs:
    """Tokenised whole-abstract texts of B papers (kind `abstract`)."""

    encoding: dict
    paper_ids: list[str]

    def to(self, device: torch.device) -> "TextInputs":
        return TextInputs({k: v.to(device) for k, v in self.encoding.items()}, self.paper_ids)

    def rows(self, start: int, stop: int) -> "TextInputs":
        """Papers `start`..`stop`, their padding cut to the columns any of them uses."""
        used = self.encoding["attention_mask"][start:stop].any(dim=0).nonzero()
        width = int(used.max()) + 1 if len(used) else 0
        return TextInputs({k: v[start:stop, :width] for k, v in self.encoding.items()}, self.paper_ids[start:stop])


class AbstractText:
    """One vector a paper from the encoder's transformer, as `ContextualSentenceEncoder.encode_abstract`
    computes it with `joiner`, `normalize` and `max_length=encoder.max_length` (but with gradients)."""

    def __init__(self, encoder: nn.Module, cfg: AbstractConfig) -> None:
        self.encoder, self.cfg = encoder, cfg

    def tokenize(self, papers: Sequence[Paper], codes: Sequence[str] | None = None) -> TextInputs:
        """The papers' texts tokenised as `encode_abstract` does, with the encoder's control code (or
        `codes`, one a paper) after `[CLS]` and one piece fewer of text to make room for it."""
        code = getattr(self.encoder, "code", None) if codes is None else list(codes)
        if codes is not None and len(codes) != len(papers):
            raise ValueError(f"{len(codes)} control codes for {len(papers)} papers")
        texts = [abstract_text(p.title, p.sentences, self.cfg.joiner) for p in papers]
        enc = self.encoder.tokenizer(texts, truncation=True, max_length=self.encoder.max_length - (code is not None),
                                     padding=True, return_tensors="pt")
        enc = dict(enc) if code is None else encoding_with_code(dict(enc), self.encoder.tokenizer, code)
        return TextInputs(enc, [p.paper_id for p in papers])

    def embed(self, inputs: TextInputs) -> DocBatch:
        """(B, 1, D) DocBatch of the texts' mean-pooled (normalised) vectors."""
        hidden = self.encoder.model(**inputs.encoding).last_hidden_state  # (B, T, D)
        vec = masked_mean(hidden, inputs.encoding["attention_mask"])  # (B, D)
        if self.cfg.normalize:
            vec = nn.functional.normalize(vec, dim=-1)
        mask = torch.ones(len(vec), 1, dtype=torch.bool, device=vec.device)
        return DocBatch(vec[:, None, :], mask, list(inputs.paper_ids))
