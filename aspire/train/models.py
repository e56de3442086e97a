"""Document models: one code path for every paper model, chosen by `model.kind`.

A `DocumentModel` wraps a contextual sentence encoder and turns a `TripletBatch` (anchors,
co-cited positives, optional hard negatives) into a triplet margin loss over a *distance*:

| kind            | d(anchor, positive)                      | d(anchor, negative) | inference scorer |
|-----------------|------------------------------------------|---------------------|------------------|
| `ts`            | L2 of the `cc_align` sentence pair       | min-L2              | `minl2`          |
| `abs`           | L2 of the `abs_align` sentence pair      | min-L2              | `minl2`          |
| `ot`            | OT distance                              | OT distance         | `ot`             |
| `ts+ot`         | the sum of the `ts` and `ot` losses      |                     | `ot`             |
| `max`           | min-L2 (no text supervision)             | min-L2              | `minl2`          |
| `att`           | attention-aggregated distance            | same                | `attention`      |
| `cocite_vector` | L2 of mean-pooled paper vectors          | same                | `vector` (L2)    |

Distances are the `pairwise_dist` / `dist` of the `aspire.scoring` scorers (whose similarity
`score` is minus them), so training and inference share the same maths. `encode` runs the very forward pass used in
training (no grad, eval mode; mean-pooled to one vector for `cocite_vector`) and `score` applies
the kind's inference scorer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.profiler import record_function

from aspire.batch import DocBatch
from aspire.config import from_dict, to_dict
from aspire.data.papers import Paper
from aspire.losses import (
    aligned_sentence_dist,
    in_batch_negative_mask,
    mean_pool_doc,
    pairwise_vector_l2_dist,
    pick_one_negative,
    triplet_margin_dist_loss,
    vector_l2_dist,
)
from aspire.train.config import LossConfig, ModelConfig
from aspire.train.formats import DEFAULT_TASK, use_task

MODEL_FILE = "document_model.json"


@dataclass
class TripletBatch:
    """A training micro-batch of B (anchor, positive) pairs, tokenised for one encoder pass.

    The encoder input holds the B anchors, then the B positives, then the H hard negatives.

    Attributes:
        inputs: the encoder's tokenised input for 2B + H papers.
        group_ids: (B, G) long, integer ids of each anchor's co-cited set papers, padded with -1.
        pos_ids: (B,) long, integer id of each positive.
        align: (B, 2) long, aligned sentence positions (in anchor, in positive); -1 where unknown.
        hard_rows: (B,) long, row of the anchor's hard negative among the H (-1 = none).
        task: the training task the batch belongs to (its control code and adapter, `aspire.train.formats`).
    """

    inputs: object
    group_ids: Tensor
    pos_ids: Tensor
    align: Tensor
    hard_rows: Tensor
    task: str = field(default=DEFAULT_TASK)

    def __len__(self) -> int:
        return self.pos_ids.shape[0]

    def to(self, device: torch.device) -> "TripletBatch":
        return TripletBatch(
            self.inputs.to(device), self.group_ids.to(device), self.pos_ids.to(device),
            self.align.to(device), self.hard_rows.to(device), self.task,
        )


# ---- distance terms: (pairwise_dist (B,), all-pairs dist (Bq, Bc)) -----------------------------------
class ScorerDist:
    """Distances of an `aspire.scoring` scorer (its `score` is minus these), labelled for the profiler."""

    def __init__(self, scorer: nn.Module, name: str) -> None:
        self.scorer, self.name = scorer, name

    def pairwise_dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        with record_function(f"dist:{self.name}"):
            return self.scorer.pairwise_dist(a, b)

    def dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        with record_function(f"dist:{self.name}"):
            return self.scorer.dist(a, b)


class VectorDist:
    """L2 between single-vector papers (the co-citation vector baseline)."""

    name = "vector_l2"

    def pairwise_dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return pairwise_vector_l2_dist(a, b)

    def dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return vector_l2_dist(a, b)


def make_scorer(name: str, cfg: ModelConfig) -> nn.Module:
    """The `aspire.scoring` scorer `name` with the config's settings."""
    from aspire.scoring import get_scorer

    if name == "ot":
        return get_scorer("ot", eps=cfg.ot_eps, tau=cfg.ot_tau, tol=cfg.ot_tol, max_iter=cfg.ot_max_iter,
                          grad=cfg.ot_grad)
    if name == "attention":
        return get_scorer("attention", tau=cfg.att_tau)
    return get_scorer(name)


# kind -> (loss terms, inference scorer). A term is "aligned" (aligned pair for the positive,
# min-L2 for negatives) or a scorer name, or "vector".
KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "ts": (("aligned",), "minl2"),
    "abs": (("aligned",), "minl2"),
    "ot": (("ot",), "ot"),
    "ts+ot": (("aligned", "ot"), "ot"),
    "max": (("minl2",), "minl2"),
    "att": (("attention",), "attention"),
    "cocite_vector": (("vector",), "vector"),
}


def kind_terms(kind: str) -> tuple[tuple[str, ...], str]:
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; valid kinds: {sorted(KINDS)}")
    return KINDS[kind]


class DocumentModel(nn.Module):
    """A contextual sentence encoder trained with the triplet margin loss of `model.kind`.

    Args:
        encoder: `aspire.encoders.ContextualSentenceEncoder` (or anything with `tokenize`,
            `forward(inputs) -> DocBatch`, `save_pretrained` and an `include_title` flag).
        model_cfg: the `model` config section (kind, OT/attention settings).
        loss_cfg: the `loss` config section (margin, negatives).
    """

    def __init__(self, encoder: nn.Module, model_cfg: ModelConfig, loss_cfg: LossConfig | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.model_cfg = model_cfg
        self.loss_cfg = loss_cfg or LossConfig()
        terms, inference = kind_terms(model_cfg.kind)
        self.terms = terms
        self.inference_name = inference
        self._scorers = nn.ModuleDict()  # scorers with parameters train with the encoder
        needed = {"minl2" if t == "aligned" else t for t in (*terms, inference)} - {"vector"}
        for name in sorted(needed):
            self._scorers[name] = make_scorer(name, model_cfg)

    # ---- the distances ----------------------------------------------------------------------------
    def _dist(self, term: str):
        if term == "vector":
            return VectorDist()
        key = "minl2" if term == "aligned" else term
        return ScorerDist(self._scorers[key], key)

    def embed(self, inputs) -> DocBatch:
        """Encoder forward pass, pooled to one vector a paper for `cocite_vector`: (B, S, D) DocBatch."""
        with record_function("encoder"):
            docs = self.encoder(inputs)
        return mean_pool_doc(docs) if self.model_cfg.kind == "cocite_vector" else docs

    def forward(self, batch: TripletBatch) -> dict[str, Tensor]:
        """Loss of one micro-batch.

        Returns a dict with `loss` () (the sum over the kind's terms), one `loss/<term>` per term,
        and `triples` () the number of (anchor, positive) pairs that had a negative.
        """
        B = len(batch)
        use_task(self.encoder, self.model_cfg, batch.task)  # its adapter; its code went in at tokenisation
        docs = self.embed(batch.inputs)  # (2B + H, S, D)
        anchors = docs.index(torch.arange(B))
        positives = docs.index(torch.arange(B, 2 * B))
        allowed = in_batch_negative_mask(batch.group_ids, batch.pos_ids)  # (B, B)
        out: dict[str, Tensor] = {}
        total = docs.emb.new_zeros(())
        counted = torch.zeros(B, dtype=torch.bool, device=docs.emb.device)
        for term in self.terms:
            dist = self._dist(term)
            anchor_ok = torch.ones(B, dtype=torch.bool, device=docs.emb.device)
            if term == "aligned":
                a_idx, p_idx, anchor_ok = self._aligned_positions(batch, anchors, positives)
                pos_dist = aligned_sentence_dist(anchors, positives, a_idx, p_idx)  # (B,)
            else:
                pos_dist = dist.pairwise_dist(anchors, positives)  # (B,)
            if self.loss_cfg.negatives == "all":
                neg_dist, neg_mask = dist.dist(anchors, positives), allowed  # (B, B)
            else:
                idx, valid = pick_one_negative(allowed)
                neg_dist = dist.pairwise_dist(anchors, positives.index(idx))[:, None]  # (B, 1)
                neg_mask = valid[:, None]
            if len(docs) > 2 * B:  # hard negatives present
                has = batch.hard_rows >= 0
                hard = docs.index(2 * B + batch.hard_rows.clamp(min=0))  # (B, S, D); rows without one masked
                neg_dist = torch.cat([neg_dist, dist.pairwise_dist(anchors, hard)[:, None]], dim=1)
                neg_mask = torch.cat([neg_mask, has[:, None]], dim=1)
            neg_mask = neg_mask & anchor_ok[:, None]
            term_loss = triplet_margin_dist_loss(pos_dist, neg_dist, neg_mask, self.loss_cfg.margin)
            out[f"loss/{term}"] = term_loss.detach()
            total = total + term_loss
            counted |= neg_mask.any(dim=1)
        out["loss"] = total
        out["triples"] = counted.sum()
        return out

    def _aligned_positions(self, batch: TripletBatch, anchors: DocBatch, positives: DocBatch):
        """Aligned sentence positions (B,), (B,) and (B,) bool: alignment known and both sentences encoded."""
        shift = 1 if getattr(self.encoder, "include_title", False) else 0  # the title is sentence 0
        a_idx, p_idx = batch.align[:, 0] + shift, batch.align[:, 1] + shift
        rows = torch.arange(len(batch), device=a_idx.device)
        known = (batch.align >= 0).all(dim=1)
        known &= (a_idx < anchors.mask.shape[1]) & (p_idx < positives.mask.shape[1])
        a_idx, p_idx = a_idx.where(known, 0), p_idx.where(known, 0)
        ok = known & anchors.mask[rows, a_idx] & positives.mask[rows, p_idx]
        return a_idx.where(ok, anchors.mask.int().argmax(1)), p_idx.where(ok, positives.mask.int().argmax(1)), ok

    # ---- inference --------------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, papers: Sequence[Paper], batch_size: int = 32) -> DocBatch:
        """DocBatch of `papers` (in order, on the model's device) from the training forward pass."""
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        parts = [self.embed(self.encoder.tokenize(papers[i : i + batch_size]).to(device))
                 for i in range(0, len(papers), batch_size)]
        self.train(was_training)
        return DocBatch.concat(parts)

    def score(self, q: DocBatch, c: DocBatch) -> Tensor:
        """(Bq, Bc) similarities with the kind's inference scorer (higher is better)."""
        return -self._dist(self.inference_name).dist(q, c)

    # ---- saving -------------------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> None:
        """Encoder in Hugging Face format under `path`, plus `document_model.json` (kind, scorer, settings)
        and the scorers' parameters if they have any."""
        path = Path(path)
        use_task(self.encoder, self.model_cfg, DEFAULT_TASK)  # inference uses the first task's code and adapter
        self.encoder.save_pretrained(path)
        meta = {"kind": self.model_cfg.kind, "inference_scorer": self.inference_name,
                "model": to_dict(self.model_cfg)}
        (path / MODEL_FILE).write_text(json.dumps(meta, indent=2))
        scorer_state = self._scorers.state_dict()
        if scorer_state:
            torch.save(scorer_state, path / "scorers.pt")

    @classmethod
    def from_pretrained(
        cls, path: str | Path, loss_cfg: LossConfig | None = None,
        encoder_loader: Callable[[str], nn.Module] | None = None,
    ) -> "DocumentModel":
        """Load a model written by `save_pretrained` (the encoder via `ContextualSentenceEncoder`)."""
        path = Path(path)
        meta = json.loads((path / MODEL_FILE).read_text())
        if encoder_loader is None:
            from aspire.encoders import ContextualSentenceEncoder

            encoder_loader = ContextualSentenceEncoder.from_pretrained
        model = cls(encoder_loader(str(path)), from_dict(ModelConfig, meta["model"]), loss_cfg)
        if (path / "scorers.pt").is_file():
            model._scorers.load_state_dict(torch.load(path / "scorers.pt", map_location="cpu"))
        return model
