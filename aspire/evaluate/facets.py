"""Facet-conditional queries and candidates of a pool set (CSFCube's protocol).

A facet-conditional query keeps only the query's sentences whose label maps to the facet, still encoded in
the context of the whole abstract (`facet_queries`). The `abstract` scorer ignores the facet unless a facet
query text is asked for (`aspire.evaluate.options.QUERY_TEXTS`): then the query's vector is the encoder's one
vector of its facet sentences alone (`facet`) or of its title and them (`title+facet`), matched against the
candidates' whole-abstract vectors (`facet_text_queries`). Candidates keep all their sentences (the published
protocol) unless `cand_sentences="facet"` asks sentence scorers to match only the candidate's sentences of
the query's facet too (`facet_candidates`); a candidate with no sentence of that facet keeps all of its
sentences, and how many did so is counted in the run info.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

import torch
from torch import Tensor

from aspire.batch import DocBatch
from aspire.data.facets import title_labelled
from aspire.data.papers import Paper
from aspire.evaluate.encode import single_vector_batch
from aspire.evaluate.options import QUERY_TEXTS


def facet_positions(paper: Paper, n_encoded: int, facet: str, label_to_facet: Mapping[str, str]) -> list[int]:
    """Positions of `paper`'s sentences whose label maps to `facet` (possibly none).

    Raises ValueError naming the paper when it has no labels or they do not align with the
    `n_encoded` sentences.
    """
    if paper.labels is None:
        raise ValueError(f"paper {paper.paper_id} has no sentence labels; choosing its sentences of facet {facet!r} "
                         "needs them")  # a query's, or a candidate's with cand_sentences="facet"
    labels = title_labelled(paper.labels, n_encoded)  # the title first where the encoder put it: of no facet
    if len(labels) != n_encoded:
        raise ValueError(
            f"paper {paper.paper_id}: {len(labels)} labels for {n_encoded} encoded sentences "
            "(the title, where it is encoded as a sentence, comes first and takes no label)"
        )
    return [j for j, lab in enumerate(labels) if label_to_facet.get(lab) == facet]


def facet_mask(
    batch: DocBatch, papers: Mapping[str, Paper], facet: str, label_to_facet: Mapping[str, str]
) -> tuple[Tensor, list[str]]:
    """`batch.mask` narrowed to the sentences whose label maps to `facet` -> (mask (B, S), ids of rows left empty).

    `batch` rows hold the paper's abstract sentences, after its title where the encoder put it first
    (`include_title`, or a paper without sentences): labels align by position after it, and the title is of no
    facet. Raises ValueError naming the paper when labels are missing or misaligned.
    """
    mask = torch.zeros_like(batch.mask)
    for i, pid in enumerate(batch.paper_ids):
        mask[i, facet_positions(papers[pid], len(batch.sentences[i]), facet, label_to_facet)] = True
    mask &= batch.mask
    empty = [pid for pid, row in zip(batch.paper_ids, mask.any(dim=1).tolist()) if not row]
    return mask, empty


def facet_queries(
    batch: DocBatch, papers: Mapping[str, Paper], facet: str, label_to_facet: Mapping[str, str]
) -> DocBatch:
    """Narrow each row's mask to the sentences whose label maps to `facet`.

    Raises ValueError naming the paper when labels are missing or misaligned, or nothing is left.
    """
    mask, empty = facet_mask(batch, papers, facet, label_to_facet)
    if empty:
        raise ValueError(f"no encoded sentence of facet {facet!r} in queries {empty}")
    return batch.with_mask(mask)


def facet_candidates(
    batch: DocBatch, papers: Mapping[str, Paper], facet: str, label_to_facet: Mapping[str, str]
) -> tuple[DocBatch, list[str]]:
    """Narrow each candidate to its sentences of `facet`; one with none keeps all its sentences.

    Returns (the narrowed batch, ids of the candidates that kept all their sentences).
    Raises ValueError naming the paper when labels are missing or misaligned.
    """
    mask, empty = facet_mask(batch, papers, facet, label_to_facet)
    whole = set(empty)
    rows = [i for i, pid in enumerate(batch.paper_ids) if pid in whole]
    mask[rows] = batch.mask[rows]
    return batch.with_mask(mask), empty


def facet_text_queries(
    encoder,
    papers: Sequence[Paper],
    facet: str,
    label_to_facet: Mapping[str, str],
    query_text: str = "facet",
    encode_options: dict | None = None,
    batch_size: int = 32,
) -> DocBatch:
    """One vector per query from its facet sentences alone, as a one-sentence DocBatch.

    `query_text="facet"` encodes the facet sentences joined by spaces as one text;
    `"title+facet"` encodes the title and them as `encode_abstract` does the whole abstract (same
    `encode_options`: `max_length`, `normalize`, `joiner`), so the vectors sit beside the
    candidates' whole-abstract vectors; `batch_size` texts go through the model at a time (the run's, as its papers
    do). Raises ValueError naming the papers with no facet sentence. A text cut at
    `max_length` is named in the encoder's warning by its paper and facet (`paper ID FACET sentences`), with either
    query text, and so is a text the model gives a non-finite vector (its ValueError).
    """
    if query_text not in QUERY_TEXTS[1:]:
        raise ValueError(f"facet query text must be one of {list(QUERY_TEXTS[1:])}, got {query_text!r}")
    options = dict(encode_options or {})
    chosen = {p.paper_id: facet_positions(p, len(p.sentences), facet, label_to_facet) for p in papers}
    empty = [pid for pid, pos in chosen.items() if not pos]
    if empty:
        raise ValueError(f"no sentence of facet {facet!r} in queries {empty}")
    narrowed = [Paper(p.paper_id, p.title, [p.sentences[j] for j in chosen[p.paper_id]]) for p in papers]
    if query_text == "facet":
        options.pop("joiner", None)
        vecs = encoder.embed_texts([" ".join(p.sentences) for p in narrowed], **options, batch_size=batch_size,
                                   names=[f"paper {p.paper_id} {facet} sentences" for p in narrowed])
    else:  # named as above: `encode_abstract` names a text by its paper alone (`paper ID`), as it names the
        # candidate's whole abstract and this query in every other facet (once the warning said only `paper ID`)
        vecs = encoder.encode_abstract([replace(p, paper_id=f"{p.paper_id} {facet} sentences") for p in narrowed],
                                       **options, batch_size=batch_size)
    return single_vector_batch(vecs, narrowed)
