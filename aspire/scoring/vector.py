"""The whole-abstract cosine: one vector per paper (the first sentence slot of a `DocBatch`), compared by
cosine similarity. The evaluation's `abstract` scorer and the training term `cosine` both use it."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from aspire.batch import DocBatch


class VectorCosine:
    """Cosine of single-vector papers (B, 1, D): `score` all pairs (Bq, Bc), `pairwise_score` aligned pairs (B,);
    similarities, higher is better; `dist` / `pairwise_dist` are 1 - cosine."""

    def score(self, queries: DocBatch, cands: DocBatch) -> Tensor:
        q = F.normalize(queries.emb[:, 0], dim=-1)  # (Bq, D)
        c = F.normalize(cands.emb[:, 0], dim=-1)  # (Bc, D)
        return q @ c.T  # (Bq, Bc)

    def pairwise_score(self, a: DocBatch, b: DocBatch) -> Tensor:
        return (F.normalize(a.emb[:, 0], dim=-1) * F.normalize(b.emb[:, 0], dim=-1)).sum(dim=-1)  # (B,)

    def dist(self, queries: DocBatch, cands: DocBatch) -> Tensor:
        return 1 - self.score(queries, cands)

    def pairwise_dist(self, a: DocBatch, b: DocBatch) -> Tensor:
        return 1 - self.pairwise_score(a, b)
