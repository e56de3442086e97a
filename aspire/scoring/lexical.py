"""BM25 over paper texts with bm25s (sparse matrices, no Python loop over documents).

`BM25Index(texts, ids)` tokenises with bm25s' own tokenizer: lower-cased words of two or more characters
(one-letter words such as "R" or "C" are not indexed), English stop words removed by default, after Unicode NFKC
normalisation of texts and queries alike (`normalize`: a decomposed "e" + combining acute matches a composed "é", and a
compatibility character its plain letters: the ligature "ﬁ" in "ﬁelds", as PDF-extracted abstracts write it, matches
"fields"); and `scores(queries)` returns the (Q, N) BM25 scores of every query against every
document, in the order of `ids`. Defaults k1 = 1.25, b = 0.75 (the bibliographic-IR setting). The scores are
bm25s' default variant (Lucene's): a query word adds idf * tf / (tf + k1 * (1 - b + b * len / avg_len)), with
idf = ln(1 + (N - df + 0.5) / (df + 0.5)) (checked against a hand-written loop:
tests/test_reliability_round23_retrieval.py).
`paper_text` is the text a paper is indexed by: its title and abstract sentences joined by spaces.

`save(directory)` writes bm25s' own files (`FILES`: the sparse score matrix, vocabulary and
parameters) and `BM25Index.load(directory, ids, stopwords, normalization)` reads them back (memory-mapped), so an
index directory can keep its BM25 beside the faiss index instead of rebuilding it per process. The files do not
say how their texts were normalised: the index's manifest does (`settings()`), and one saved before BM25 normalised
with NFKC (before 2026-12-01) reads "nfc": its queries are normalised as its documents were.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Sequence

import numpy as np

from aspire.data.papers import abstract_text

# bm25s' files, under the names an index generation keeps them (see `aspire.index.store`)
FILES = {"data_name": "bm25.data.npy", "indices_name": "bm25.indices.npy", "indptr_name": "bm25.indptr.npy",
         "vocab_name": "bm25.vocab.json", "params_name": "bm25.params.json"}


# the Unicode normal form of a BM25 index's texts and queries, by the name its `settings()` records; "nfc" is that of
# the indexes saved before NFKC (a stored index's manifest without the setting)
NORMALIZATIONS = {"nfkc": "NFKC", "nfc": "NFC"}
NORMALIZATION = "nfkc"
STOPWORDS = "en"  # bm25s' English stop-word list


def default_settings(k1: float, b: float) -> dict:
    """`BM25Index.settings()` of an index built with `k1` and `b` and every other setting at its default: what a run's
    info records of the BM25 it scored with (the stop words and the normal form change its scores as k1 and b do)."""
    return {"k1": k1, "b": b, "stopwords": STOPWORDS, "normalization": NORMALIZATION}


def normalize(text: str, normalization: str = NORMALIZATION) -> str:
    """`text` in the Unicode normal form BM25 indexes and queries by (`NORMALIZATIONS`; NFKC: composed characters,
    compatibility characters such as the ligature "ﬁ" replaced by their plain letters "fi")."""
    return unicodedata.normalize(NORMALIZATIONS[normalization], text)


def check_normalization(normalization: str, where: str | Path = "BM25") -> str:
    """`normalization` when it is one of `NORMALIZATIONS`, else ValueError naming `where` and the valid names."""
    if not isinstance(normalization, str) or normalization not in NORMALIZATIONS:  # a JSON list is unhashable
        raise ValueError(f"{where}: unknown BM25 normalization {normalization!r}; valid: {', '.join(NORMALIZATIONS)}")
    return normalization


def paper_text(paper) -> str:
    """Title and abstract sentences of a `Paper`, joined by spaces."""
    return abstract_text(paper.title, paper.sentences)


class BM25Index:
    """BM25 scores of queries against a fixed list of texts."""

    def __init__(self, texts: Sequence[str], ids: Sequence[str], k1: float = 1.25, b: float = 0.75,
                 stopwords: str | None = STOPWORDS, normalization: str = NORMALIZATION) -> None:
        import bm25s

        for name, value in (("texts", texts), ("ids", ids)):  # a str is a sequence of its characters
            if isinstance(value, str):
                raise ValueError(f"BM25 {name} must be a list of strings, got one string {value[:40]!r}")
        if len(texts) != len(ids):
            raise ValueError(f"{len(texts)} texts for {len(ids)} ids")
        if not texts:
            raise ValueError("BM25 needs at least one document")
        bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
        if bad is not None:  # else unicodedata's TypeError, naming no document
            raise ValueError(f"BM25 texts must be strings: document {ids[bad]!r} has {texts[bad]!r:.60}")
        if not (0 <= k1 < float("inf") and 0 <= b <= 1):  # an infinite k1 scored every document 0
            raise ValueError(f"BM25 needs a finite k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        check_normalization(normalization)
        tokens = bm25s.tokenize([normalize(t, normalization) for t in texts], stopwords=stopwords, show_progress=False)
        retriever = bm25s.BM25(k1=k1, b=b)
        # bm25s cannot index a corpus without a single word (e.g. all stop words): index one empty
        # token per document instead, which no query holds, so every query scores 0 as it should
        retriever.index(tokens if tokens.vocab else [[""]] * len(texts), show_progress=False)
        self._set(retriever, retriever.vocab_dict, ids, stopwords, normalization)

    def _set(self, retriever, vocab: dict, ids: Sequence[str], stopwords: str | None, normalization: str) -> None:
        self._retriever, self._vocab = retriever, vocab
        self.ids = list(ids)
        self.k1, self.b, self.stopwords = float(retriever.k1), float(retriever.b), stopwords
        self.normalization = normalization

    def save(self, directory: str | Path) -> list[str]:
        """Write bm25s' files into `directory` (an existing folder); returns their names (`FILES`)."""
        self._retriever.save(str(directory), show_progress=False, **FILES)
        return list(FILES.values())

    @classmethod
    def load(cls, directory: str | Path, ids: Sequence[str], stopwords: str | None = STOPWORDS,
             normalization: str = NORMALIZATION, mmap: bool = True) -> "BM25Index":
        """The BM25 index `save` wrote into `directory`, for documents `ids` (checked against its size), whose texts
        were normalised with `normalization` (as its queries will be; an unknown one is a ValueError)."""
        import bm25s

        check_normalization(normalization, str(directory))
        retriever = bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False, **FILES)
        if retriever.scores["num_docs"] != len(ids):
            raise ValueError(f"{directory}: the stored BM25 index holds {retriever.scores['num_docs']} "
                             f"documents, expected {len(ids)}")
        index = cls.__new__(cls)
        index._set(retriever, retriever.vocab_dict, ids, stopwords, normalization)
        return index

    def _query_ids(self, query: str) -> list[int]:
        import bm25s

        words = bm25s.tokenize([normalize(query, self.normalization)], stopwords=self.stopwords, return_ids=False, show_progress=False)[0]
        return [self._vocab[w] for w in words if w in self._vocab]

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """(Q, N) float32 BM25 scores; a query with no indexed word scores 0 everywhere. `queries` is a list of
        strings: one string is refused (ValueError), not read as a list of one-character queries (its rows all 0), and
        so is a query that is no string (naming its position)."""
        if isinstance(queries, str):
            raise ValueError(f"BM25 scores take a list of query strings, got one string {queries[:40]!r}: pass [query]")
        out = np.zeros((len(queries), len(self.ids)), dtype=np.float32)
        for i, query in enumerate(queries):
            if not isinstance(query, str):  # else unicodedata's TypeError, naming no query
                raise ValueError(f"BM25 queries must be strings: query {i} is {query!r:.60}")
            ids = self._query_ids(query)
            if ids:
                out[i] = self._retriever.get_scores(ids)
        return out

    def settings(self) -> dict:
        return {"k1": self.k1, "b": self.b, "stopwords": self.stopwords, "normalization": self.normalization}
