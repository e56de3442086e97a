"""What the aspect-selection page asks of an index, with every request checked.

`SearchService` wraps a `Searcher` (aspire.search) and answers three questions in JSON-ready dicts:

    find_papers(text, limit)      papers whose id or title contains `text` (to pick a query paper)
    paper(paper_id)               a paper's sentences with their facet labels (when known)
    search(request)               {"paper_id", "sentences": [positions], "k", "rerank"} -> ranked hits,
                                  each with its sentences, the aligned pairs and the OT plan (n, T)
                                  between the n selected query sentences and its T sentences

Bad input raises `RequestError(status, message)` (a 4xx answer), never a 5xx: unknown ids (404),
empty or out-of-range selections, wrong types, oversized values (400).

Facet labels: an index built from papers with `pred_labels` keeps them (`SentenceIndex.labels`);
a corpus JSONL given with `labels_from` is read instead (e.g. for an index built without them), a
paper's labels kept only when their count equals the indexed paper's sentence count.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from aspire.data.papers import read_papers
from aspire.search import RERANKERS, Searcher

log = logging.getLogger(__name__)

MAX_K = 50
MAX_SELECTED = 256
MAX_ID_CHARS = 256
MAX_FILTER_CHARS = 200
MAX_LIST = 100
FACETS = {  # page facet -> the stored labels it groups (objective counts as background, as in CSFCube)
    "background": ("background_label", "objective_label", "background", "objective"),
    "method": ("method_label", "method"),
    "result": ("result_label", "result"),
}


class RequestError(ValueError):
    """A request the service refuses: `status` is the HTTP status to answer (4xx), `message` says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def facet_of(label: str | None) -> str | None:
    """The page facet ("background", "method", "result") of a stored label, else None."""
    for facet, names in FACETS.items():
        if label in names:
            return facet
    return None


def read_labels(path: str | Path, paper_ids: Sequence[str], sentences: Sequence[Sequence[str]]) -> tuple[dict, dict]:
    """Facet labels per indexed paper from a papers JSONL: ({paper_id: [label per sentence]}, counts).

    Counts: `labelled` papers, `mismatched` (labels whose count differs from the indexed sentences,
    left out), `unlabelled` (indexed papers without labels in the file), `rejected_records` (lines
    of the file that are not valid papers; each is listed in `rejected` as "FILE:LINE: reason" and
    logged as a warning).
    """
    result = read_papers(path, skip_bad=True)
    wanted = {pid: len(s) for pid, s in zip(paper_ids, sentences)}
    labels, mismatched = {}, 0
    for paper in result.papers:
        if paper.paper_id not in wanted or paper.labels is None:
            continue
        if len(paper.labels) != wanted[paper.paper_id]:
            mismatched += 1
            continue
        labels[paper.paper_id] = list(paper.labels)
    counts = {"labelled": len(labels), "mismatched": mismatched, "unlabelled": len(wanted) - len(labels),
              "rejected_records": len(result.rejected), "rejected": [str(r) for r in result.rejected]}
    for record in result.rejected:
        log.warning("facet labels: rejected %s", record)
    return labels, counts


@dataclass
class SearchRequest:
    """A checked search request."""

    paper_id: str
    sentences: list[int]
    k: int
    rerank: str


class SearchService:
    """Answers the page's requests from one index.

    Args:
        searcher: an opened `Searcher`.
        labels: {paper_id: facet label per sentence} (see `read_labels`); papers without stay unlabelled.
    Searches run one at a time (a lock): the index, the scorers and torch's threads are shared.
    """

    def __init__(self, searcher: Searcher, labels: Mapping[str, list[str]] | None = None) -> None:
        self.searcher = searcher
        self.index = searcher.index
        self.labels = dict(labels or {})
        self._lower_titles = [t.lower() for t in self.index.titles]
        self._lock = threading.Lock()

    # ---- papers -----------------------------------------------------------------------------------
    def info(self) -> dict:
        cfg = self.searcher.config
        return {"n_papers": self.index.n_papers, "n_sentences": self.index.n_sentences,
                "model": self.index.model_name, "rerank": cfg.rerank, "rerankers": list(RERANKERS),
                "k": cfg.k, "max_k": MAX_K, "labelled_papers": len(self.labels),
                "ot": {"tau": cfg.ot_tau, "eps": cfg.ot_eps}}

    def find_papers(self, text: str = "", limit: int = 20) -> dict:
        """Papers whose id equals `text` or whose title contains it (case-insensitive), index order."""
        if len(text) > MAX_FILTER_CHARS:
            raise RequestError(400, f"filter text too long: {len(text)} characters (at most {MAX_FILTER_CHARS})")
        if not 1 <= limit <= MAX_LIST:
            raise RequestError(400, f"limit must be in 1..{MAX_LIST}, got {limit}")
        needle = text.strip().lower()
        found = []
        exact = self.index.positions.get(text.strip())
        if exact is not None:
            found.append(exact)
        for pos, title in enumerate(self._lower_titles):
            if len(found) >= limit:
                break
            if needle in title and pos != exact:
                found.append(pos)
        return {"papers": [self._summary(p) for p in found[:limit]], "query": text}

    def _summary(self, pos: int) -> dict:
        pid = self.index.paper_ids[pos]
        return {"paper_id": pid, "title": self.index.titles[pos], "n_sentences": len(self.index.sentences[pos]),
                "labelled": pid in self.labels}

    def _position(self, paper_id: Any) -> int:
        if not isinstance(paper_id, str) or not paper_id:
            raise RequestError(400, "paper_id must be a non-empty string")
        if len(paper_id) > MAX_ID_CHARS:
            raise RequestError(400, f"paper_id too long: {len(paper_id)} characters (at most {MAX_ID_CHARS})")
        pos = self.index.positions.get(paper_id)
        if pos is None:
            raise RequestError(404, f"unknown paper_id {paper_id!r}: not in this index")
        return pos

    def _sentences(self, pos: int) -> list[dict]:
        labels = self.labels.get(self.index.paper_ids[pos])
        return [{"text": text, "label": labels[i] if labels else None, "facet": facet_of(labels[i]) if labels else None}
                for i, text in enumerate(self.index.sentences[pos])]

    def paper(self, paper_id: Any) -> dict:
        pos = self._position(paper_id)
        return {"paper_id": self.index.paper_ids[pos], "title": self.index.titles[pos],
                "sentences": self._sentences(pos)}

    # ---- search -----------------------------------------------------------------------------------
    def check(self, body: Any) -> SearchRequest:
        """A search request body -> SearchRequest, or RequestError saying what is wrong."""
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        unknown = sorted(set(body) - {"paper_id", "sentences", "k", "rerank"})
        if unknown:
            raise RequestError(400, f"unknown field(s) {unknown}; valid: paper_id, sentences, k, rerank")
        pos = self._position(body.get("paper_id"))
        chosen = body.get("sentences")
        if not isinstance(chosen, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in chosen):
            raise RequestError(400, "sentences must be a list of sentence positions (integers)")
        if not chosen:
            raise RequestError(400, "empty selection: select at least one sentence")
        if len(chosen) > MAX_SELECTED:
            raise RequestError(400, f"too many sentences selected: {len(chosen)} (at most {MAX_SELECTED})")
        n = len(self.index.sentences[pos])
        bad = sorted({i for i in chosen if not 0 <= i < n})
        if bad:
            raise RequestError(400, f"sentence positions {bad[:10]} out of range 0..{n - 1} for paper {body['paper_id']!r}")
        k = body.get("k", self.searcher.config.k)
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
            raise RequestError(400, f"k must be an integer in 1..{MAX_K}")
        rerank = body.get("rerank", self.searcher.config.rerank)
        if rerank not in RERANKERS:
            raise RequestError(400, f"unknown rerank {rerank!r}; valid: {list(RERANKERS)}")
        return SearchRequest(body["paper_id"], sorted(set(chosen)), k, rerank)

    def search(self, body: Any) -> dict:
        """Check `body`, rank the index's papers by the selected sentences, explain each hit."""
        req = self.check(body)
        with self._lock, torch.no_grad():
            query = self.searcher.query_from_index(req.paper_id, req.sentences)
            hits = self.searcher.search(query, k=req.k, rerank=req.rerank)
            plans = self._plans(query, [h.paper_id for h in hits])
        out = []
        for hit, (plan, dist) in zip(hits, plans):
            pos = self.index.positions[hit.paper_id]
            out.append({"rank": hit.rank, "paper_id": hit.paper_id, "title": hit.title, "score": hit.score,
                        "sentences": self._sentences(pos),
                        "pairs": [{"query_sentence": p.query_sentence, "hit_sentence": p.hit_sentence,
                                   "dist": p.dist, "weight": p.weight} for p in hit.pairs],
                        "plan": plan, "dist": dist})
        cfg = self.searcher.config
        return {"paper_id": req.paper_id, "sentences": req.sentences, "k": req.k, "rerank": req.rerank,
                "plan_rows": req.sentences, "ot": {"tau": cfg.ot_tau, "eps": cfg.ot_eps}, "hits": out}

    def _plans(self, query, paper_ids: list[str]) -> list[tuple[list, list]]:
        """Per hit, the OT plan and distances between the selected query sentences and its sentences.

        Returns [(plan (n, T_h) as nested lists, dist (n, T_h))], rounded to 5 decimals.
        """
        if not paper_ids:
            return []
        cands = self.index.gather([self.index.positions[p] for p in paper_ids], device=query.device,
                                  dtype=query.emb.dtype)
        details = self.searcher.scorer("ot", self.searcher.config).dist_details(query, cands)
        rows = query.mask[0].nonzero()[:, 0]  # (n,) selected query positions
        plan = details.plan[0][:, rows]  # (C, n, T) mass of the selected rows
        cost = details.cost[0][:, rows]  # (C, n, T)
        lengths = cands.lengths.tolist()
        plan_np = np.round(plan.detach().float().cpu().numpy(), 5)
        cost_np = np.round(cost.detach().float().cpu().numpy(), 5)
        return [(plan_np[c, :, :t].tolist(), cost_np[c, :, :t].tolist()) for c, t in enumerate(lengths)]


def open_service(index_dir: str | Path, overrides: Sequence[str] = (), labels_from: str | Path | None = None) -> SearchService:
    """A SearchService over the index at `index_dir`; `overrides` adjust its search config (e.g. "rerank=ot")."""
    searcher = Searcher.open(index_dir, overrides)
    index = searcher.index  # the labels the index keeps, unless a labels file is given
    labels = {pid: list(lab) for pid, lab in zip(index.paper_ids, index.labels) if lab is not None}
    if labels_from is not None:
        labels, counts = read_labels(labels_from, searcher.index.paper_ids, searcher.index.sentences)
        log.info("facet labels from %s: %s", labels_from, {k: v for k, v in counts.items() if k != "rejected"})
    return SearchService(searcher, labels)
