"""BM25 of an index: built over each indexed paper's title and sentences, stored with the index generation
(the query-time stage that runs it is `aspire.retrieval.lexical`).

Built from the texts the index keeps (`SentenceIndex.titles`, `.sentences`), in index position
order, with `aspire.scoring.lexical.BM25Index` (bm25s; k1, b from the search config): each paper's title and
abstract, as the benchmarks' BM25 reads a paper (`aspire.scoring.lexical.paper_text`). An index whose encoder
made the title sentence 0 (`include_title`, recorded in its manifest: `SentenceIndex.title_first`) has the title
read once, not twice. `aspire index build` (any save) writes it into the index generation with the build config's
`search.bm25_k1` / `search.bm25_b`; `stored_bm25` uses that stored one when a search asks for the same k1 and b,
and builds one (logging why) otherwise, or for an index saved before BM25 was stored. The stored one normalises a
query as its manifest says its texts were (NFKC; NFC for one saved before 2026-12-01, whose manifest names none).
A query's text is its selected sentences, so an aspect-conditional query is matched by its aspect's words.
"""

from __future__ import annotations

import logging
from typing import Sequence

from aspire.data.papers import abstract_text
from aspire.scoring.lexical import BM25Index

log = logging.getLogger(__name__)


def index_bm25(index, k1: float = 1.25, b: float = 0.75) -> BM25Index:
    """A new BM25 index over a `SentenceIndex`'s papers (title + sentences); its ids are positions."""
    return papers_bm25(index.titles, index.sentences, k1, b, index.include_title)


def papers_bm25(titles: Sequence[str], sentences: Sequence[Sequence[str]], k1: float, b: float,
                include_title: bool | None = None) -> BM25Index:
    """A new BM25 index over papers given by their titles and stored sentences (title + abstract, the title once
    where the index stores it as sentence 0: `titles_first` of the encoder's `include_title`, or where the stored
    sentences are the title alone, as the encoder stores a paper without abstract sentences:
    `aspire.encoders.contextual.paper_sentences`); its ids are positions."""
    if len(titles) != len(sentences):  # zip would drop the papers past the shorter one, unsaid
        raise ValueError(f"BM25 over papers: {len(titles)} titles for {len(sentences)} sentence lists")
    first = titles_first(titles, sentences, include_title)
    texts = [abstract_text(title, sents[1:] if drop or (title.strip() and list(sents) == [title]) else sents)
             for title, sents, drop in zip(titles, sentences, first)]  # a title alone: title + no abstract, not twice
    return BM25Index(texts, [str(i) for i in range(len(texts))], k1=k1, b=b)


def titles_first(titles: Sequence[str], sentences: Sequence[Sequence[str]], include_title: bool | None) -> list[bool]:
    """Per paper, whether its stored sentence 0 is its title: where the encoder had `include_title` and the title
    is not blank (`aspire.encoders.contextual.title_is_sentence`). `include_title` None, an index saved before
    its manifest recorded the setting, is judged from the texts (`title_is_sentence_0`)."""
    if include_title is None:
        include_title = title_is_sentence_0(titles, sentences)
    return [include_title and bool(title.strip()) for title in titles]


def title_is_sentence_0(titles: Sequence[str], sentences: Sequence[Sequence[str]]) -> bool:
    """Whether the stored sentences start with the title, as an encoder with `include_title` stores them (the
    guess for an index whose manifest does not record the setting): every paper with a title that is not blank
    (the encoder leaves a blank one out) holds it as sentence 0, and one at least has such a title. (Per paper, a
    plain index would lose the title-like first sentence some abstracts open with; 7 of the ACL anthology's 59,413
    do.) Stops at the first paper that does not."""
    titled = [(title, i) for i, title in enumerate(titles) if title.strip()]
    return bool(titled) and all(sentences[i][:1] == [title] for title, i in titled)


def stored_bm25(index, k1: float, b: float) -> BM25Index:
    """The index's stored BM25 when it has these k1 and b, else one built now (with a log line why: an index built
    with `index.store_bm25` off keeps none, as configs/index-million.yaml builds one; it once read as an index saved
    before aspire kept BM25, to rebuild, which stores none again)."""
    stored = index.bm25
    if stored is not None and (stored.k1, stored.b) == (k1, b):
        return stored
    if stored is not None:
        why = f"the stored BM25 has k1={stored.k1:g}, b={stored.b:g}"
    elif not index.config.index.store_bm25:
        why = "the index was built with index.store_bm25 false, which stores none"
    else:
        why = ("the index holds no stored BM25 (not saved yet, or saved before aspire kept it: rebuild or re-save it "
               "to store one)")
    log.info("building BM25 (k1=%g, b=%g) over %d papers at query time: %s", k1, b, index.n_papers, why)
    return index_bm25(index, k1, b)
