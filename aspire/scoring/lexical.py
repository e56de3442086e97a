"""BM25 over paper texts with bm25s (sparse matrices, no Python loop over documents).

`BM25Index(texts, ids)` tokenises with bm25s' own tokenizer (lower-cased words, English stop words
removed by default) and `scores(queries)` returns the (Q, N) BM25 scores of every query against every
document, in the order of `ids`. Defaults k1 = 1.25, b = 0.75 (the bibliographic-IR setting).
`paper_text` is the text a paper is indexed by: its title and abstract sentences joined by spaces.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def paper_text(paper) -> str:
    """Title and abstract sentences of a `Paper`, joined by spaces."""
    return " ".join(x for x in (paper.title, *paper.sentences) if x)


class BM25Index:
    """BM25 scores of queries against a fixed list of texts."""

    def __init__(self, texts: Sequence[str], ids: Sequence[str], k1: float = 1.25, b: float = 0.75,
                 stopwords: str | None = "en") -> None:
        import bm25s

        if len(texts) != len(ids):
            raise ValueError(f"{len(texts)} texts for {len(ids)} ids")
        if not texts:
            raise ValueError("BM25 needs at least one document")
        if not (k1 >= 0 and 0 <= b <= 1):
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.ids = list(ids)
        self.k1, self.b, self.stopwords = k1, b, stopwords
        tokens = bm25s.tokenize(list(texts), stopwords=stopwords, show_progress=False)
        self._vocab = tokens.vocab
        self._retriever = bm25s.BM25(k1=k1, b=b)
        self._retriever.index(tokens, show_progress=False)

    def _query_ids(self, query: str) -> list[int]:
        import bm25s

        words = bm25s.tokenize([query], stopwords=self.stopwords, return_ids=False, show_progress=False)[0]
        return [self._vocab[w] for w in words if w in self._vocab]

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """(Q, N) float32 BM25 scores; a query with no indexed word scores 0 everywhere."""
        out = np.zeros((len(queries), len(self.ids)), dtype=np.float32)
        for i, query in enumerate(queries):
            ids = self._query_ids(query)
            if ids:
                out[i] = self._retriever.get_scores(ids)
        return out

    def settings(self) -> dict:
        return {"k1": self.k1, "b": self.b, "stopwords": self.stopwords}
