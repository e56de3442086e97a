"""What the aspect-selection page asks of an index, with every request checked.

`SearchService` wraps a `Searcher` (aspire.search) and answers three questions in JSON-ready dicts:

    find_papers(text, limit, offset)  papers whose id starts with `text` or whose title holds its words,
                                      a page at a time
    paper(paper_id)                   a paper's sentences with their facet labels (when known)
    search(body)                      a `SearchBody` (or its dict) -> ranked hits, each with its
                                      sentences, the aligned pairs, the L2 distances (n, T) between
                                      the n selected query sentences and its T sentences and, when
                                      ranked by OT, the transport plan (n, T); with `cross_encoder`
                                      (a service opened with one), the cross-encoder stage's score
                                      on each hit and its time for the query (`cross_encoder.ms`); the
                                      answer's `shortlist` is the one the re-ranker (or the fused first
                                      stage) read (None without either): with the cross-encoder, at
                                      least its `cross_top`

Every answer names the index generation it came from (`generation`, see aspire.serve.reload).
Bad input raises `RequestError(status, message)` (a 4xx answer), never a 5xx: unknown ids (404),
empty or out-of-range selections, wrong types, oversized values (400); the rules live in
aspire.serve.requests.

Facet labels: an index built from papers with `pred_labels` keeps them (`SentenceIndex.labels`);
a corpus JSONL given with `labels_from` is read instead (e.g. for an index built without them), a
paper's labels kept only when its sentences are the indexed paper's (with its title first where the
index's encoder made the title sentence 0, `include_title`: that sentence is labelled "title").
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aspire.data.facets import facet_of, title_labelled
from aspire.data.papers import read_papers
from aspire.index import SentenceIndex
from aspire.index.config import unused_settings
from aspire.retrieval.lexical import first_stage_depth
from aspire.scoring import cross_l2_cost
from aspire.scoring.lexical import normalize
from aspire.search import RERANKERS, STAGES, Searcher, cross_depth, search_timed
from aspire.serve.requests import (
    MAX_K,
    MAX_SHORTLIST,
    MAX_TAU,
    MIN_TAU,
    PaperQuery,
    PapersQuery,
    RequestError,
    SearchBody,
    check,
    check_overrides,
)

log = logging.getLogger(__name__)
NEEDS_WHOLE = ("whole", "hybrid")  # the first stage and the re-ranker that read the stored whole-abstract vectors


def read_labels(path: str | Path, paper_ids: Sequence[str], sentences: Sequence[Sequence[str]]) -> tuple[dict, dict]:
    """Facet labels per indexed paper from a papers JSONL: ({paper_id: [label per sentence]}, counts).

    A paper's labels are kept when its sentences are the indexed ones (whitespace aside), or are them
    after the title: an index whose encoder makes the title sentence 0 (`include_title`) stores the title
    first, and that sentence gets the label "title" (no facet's), as `aspire.data.facets.title_labelled`
    labels it when the index is built. (Once the count alone was compared: such an index had every paper's
    labels left out, and a file whose abstract differed but had as many sentences put labels on other sentences.)

    Counts: `labelled` papers, `mismatched` (papers whose sentences are not the indexed ones, left out; the
    first few ids logged as a warning), `unlabelled` (indexed papers served without labels: those the file has no
    labels for, and the mismatched),
    `rejected_records` (lines of the file that are not valid papers; each is listed in `rejected` as
    "FILE:LINE: reason" and logged as a warning).
    """
    result = read_papers(path, skip_bad=True)
    wanted = dict(zip(paper_ids, sentences))
    labels, mismatched = {}, []
    for paper in result.papers:
        if paper.paper_id not in wanted or paper.labels is None:
            continue
        indexed = [_words(s) for s in wanted[paper.paper_id]]
        own = [_words(s) for s in paper.sentences]
        if indexed == own:
            labels[paper.paper_id] = list(paper.labels)
        elif indexed == [_words(paper.title), *own]:  # the title encoded as sentence 0
            labels[paper.paper_id] = title_labelled(list(paper.labels), len(indexed))
        else:
            mismatched.append(paper.paper_id)
    counts = {"labelled": len(labels), "mismatched": len(mismatched), "unlabelled": len(wanted) - len(labels),
              "rejected_records": len(result.rejected), "rejected": [str(r) for r in result.rejected]}
    if mismatched:
        log.warning("facet labels: %d paper(s) of %s have other sentences than the index holds, left unlabelled: %s%s",
                    len(mismatched), path, ", ".join(mismatched[:10]), " ..." if len(mismatched) > 10 else "")
    for record in result.rejected:
        log.warning("facet labels: rejected %s", record)
    return labels, counts


def _words(text: str) -> str:
    return " ".join(text.split())


def folded(text: str) -> str:
    """`text` as the paper filter compares it: in BM25's normal form (NFKC, `aspire.scoring.lexical.normalize`), then
    case-folded, so that text which looks the same compares the same: "été" with its accents typed or pasted as
    combining marks (U+0301) finds the title "été", and "GROSSE" finds "Große"."""
    return normalize(text).casefold()


class SearchService:
    """Answers the page's requests from one index.

    Args:
        searcher: an opened `Searcher`.
        labels: {paper_id: facet label per sentence} (see `read_labels`); papers without stay unlabelled. A paper
            the index does not hold, or labels not one for each sentence of the indexed paper, is a ValueError naming the
            paper (such labels once made that paper's page and every search hitting it a 500, an IndexError).
        generation: the name of the index generation the searcher holds (e.g. "gen-000002").
        key: what tells that generation from any other (`generation_key`; None when not opened from a directory).
    Searches run one at a time (a lock): the index, the scorers and torch's threads are shared.
    """

    def __init__(self, searcher: Searcher, labels: Mapping[str, list[str]] | None = None,
                 generation: str | None = None, key: tuple[str, str] | None = None) -> None:
        self.searcher = searcher
        self.index = searcher.index
        self.labels = dict(labels or {})
        for pid, paper_labels in self.labels.items():
            pos = self.index.positions.get(pid)
            if pos is None:
                raise ValueError(f"facet labels for paper {pid!r}, which the index does not hold")
            n = len(self.index.sentences[pos])
            if isinstance(paper_labels, str) or len(paper_labels) != n:
                got = "a string" if isinstance(paper_labels, str) else f"{len(paper_labels)} label(s)"
                raise ValueError(f"facet labels of paper {pid!r}: {got}, not one for each of its {n} indexed sentences")
        self.generation, self.key = generation, key
        self._folded_titles = [folded(t) for t in self.index.titles]
        self._lock = threading.Lock()

    # ---- papers -----------------------------------------------------------------------------------
    def info(self) -> dict:
        cfg = self.searcher.config
        k, shortlist = self._defaults()  # those a request gets (once the config's, beyond the page's bounds)
        cross = {"loaded": self.searcher.cross_encoder is not None, "top": cfg.cross_top, "weight": cfg.cross_weight}
        whole = self.index.whole is not None  # without whole vectors, the stages that need them are not offered
        return {"n_papers": self.index.n_papers, "n_sentences": self.index.n_sentences,
                "model": self.index.model_name, "rerank": cfg.rerank,
                "rerankers": [r for r in RERANKERS if whole or r not in NEEDS_WHOLE],
                "stages": cfg.stages, "pipelines": [s for s in STAGES if whole or s not in NEEDS_WHOLE],
                "cross_encoder": cross,
                "k": k, "max_k": MAX_K, "shortlist": shortlist, "max_shortlist": MAX_SHORTLIST,
                "min_tau": MIN_TAU, "max_tau": MAX_TAU, "labelled_papers": len(self.labels),
                "ot": {"tau": cfg.ot_tau, "eps": cfg.ot_eps}, "generation": self.generation}

    def find_papers(self, text: str = "", limit: int = 20, offset: int = 0) -> dict:
        """Papers matching `text`, `limit` of them from `offset`: first the paper whose id is `text`, then
        those whose id starts with it, then those whose title holds every word of it, in any order and as
        parts of words (compared `folded`: "kernel ranking" finds "Kernel pooling for ranking", "GROSSE" finds
        "Große", "été" typed as "e" + U+0301 finds "été"); index order
        within each group. `next_offset` is where the next page starts (None: no more)."""
        query = check(PapersQuery, {"q": text, "limit": limit, "offset": offset})
        needle = query.q.strip()
        words = folded(needle).split()
        end = query.offset + query.limit + 1  # one more than the page: is there a next page?
        found: list[int] = []
        seen: set[int] = set()

        def take(positions) -> None:
            for pos in positions:
                if len(found) >= end:
                    return
                if pos not in seen:
                    seen.add(pos)
                    found.append(pos)

        if needle:
            exact = self.index.positions.get(needle)
            take([] if exact is None else [exact])
            take(pos for pos, pid in enumerate(self.index.paper_ids) if pid.startswith(needle))
        take(pos for pos, title in enumerate(self._folded_titles) if all(w in title for w in words))
        page = found[query.offset : query.offset + query.limit]
        more = len(found) > query.offset + query.limit
        return {"papers": [self._summary(p) for p in page], "query": query.q, "offset": query.offset,
                "next_offset": query.offset + len(page) if more else None, "generation": self.generation}

    def _summary(self, pos: int) -> dict:
        pid = self.index.paper_ids[pos]
        return {"paper_id": pid, "title": self.index.titles[pos], "n_sentences": len(self.index.sentences[pos]),
                "labelled": pid in self.labels}

    def _position(self, paper_id: str) -> int:
        pos = self.index.positions.get(paper_id)
        if pos is None:
            raise RequestError(404, f"unknown paper_id {paper_id!r}: not in this index"
                                    + (f" ({self.generation})" if self.generation else ""))
        return pos

    def _sentences(self, pos: int) -> list[dict]:
        labels = self.labels.get(self.index.paper_ids[pos])
        return [{"text": text, "label": labels[i] if labels else None, "facet": facet_of(labels[i]) if labels else None}
                for i, text in enumerate(self.index.sentences[pos])]

    def paper(self, paper_id: Any) -> dict:
        pos = self._position(check(PaperQuery, {"id": paper_id}).id)
        return {"paper_id": self.index.paper_ids[pos], "title": self.index.titles[pos],
                "sentences": self._sentences(pos), "generation": self.generation}

    # ---- search -----------------------------------------------------------------------------------
    def check(self, body: Any) -> SearchBody:
        """A search request (dict or SearchBody) -> SearchBody with every default filled, or RequestError."""
        req = body if isinstance(body, SearchBody) else check(SearchBody, body)
        pos = self._position(req.paper_id)
        n = len(self.index.sentences[pos])
        bad = sorted({i for i in req.sentences if not 0 <= i < n})
        if bad:  # named by its field, as every other refusal of a body (once "sentence positions [3] ..." alone)
            raise RequestError(400, f"sentences: sentence positions {bad[:10]} out of range 0..{n - 1} for paper {req.paper_id!r}")
        cfg = self.searcher.config
        k, shortlist = self._defaults(req.k)
        shortlist = req.shortlist if req.shortlist is not None else shortlist
        if shortlist < k:
            raise RequestError(400, f"shortlist ({shortlist}) must be at least k ({k})")
        needs_whole = [x for x in (req.stages or cfg.stages, req.rerank or cfg.rerank) if x in NEEDS_WHOLE]
        if needs_whole and self.index.whole is None:  # once a 500 from inside the search
            raise RequestError(400, f"{needs_whole[0]!r} needs the papers' whole-abstract vectors, which this index "
                                    "does not store (built before the one-pass encoding): rebuild it")
        if req.shortlist is not None and unused_settings(replace(cfg, rerank=req.rerank or cfg.rerank,
                                                                 stages=req.stages or cfg.stages), ["shortlist"]):
            # once read by nothing, without a word (a re-ranker and the fused first stage read it: `first_stage_depth`)
            raise RequestError(400, f"shortlist: the papers the first stage passes to a re-ranker, and this search "
                                    f"reranks by 'none' (the first stage's {k} best are the answer): leave shortlist "
                                    "out, or ask for a re-ranker")
        if req.tau is not None and (req.rerank or cfg.rerank) != "ot":  # once read by nothing, without a word
            raise RequestError(400, f"tau: the OT temperature is read by rerank 'ot' alone, and this search reranks "
                                    f"by {req.rerank or cfg.rerank!r}: leave tau out, or ask for rerank 'ot'")
        if req.cross_encoder and self.searcher.cross_encoder is None:
            raise RequestError(400, "cross_encoder: this server holds no cross-encoder (start it with "
                                    "--cross-encoder DIR)")
        return SearchBody.model_construct(
            paper_id=req.paper_id, sentences=sorted(set(req.sentences)), k=k, shortlist=shortlist,
            rerank=req.rerank or cfg.rerank, tau=req.tau if req.tau is not None else cfg.ot_tau,
            stages=req.stages or cfg.stages, cross_encoder=bool(req.cross_encoder))

    def _defaults(self, k: int | None = None) -> tuple[int, int]:
        """(k, shortlist) of a request that names neither (with `k`, that k): the config's, within the page's
        bounds; the shortlist at least k."""
        cfg = self.searcher.config
        k = min(cfg.k, MAX_K) if k is None else k
        return k, max(min(cfg.shortlist, MAX_SHORTLIST), k)

    def search(self, body: Any) -> dict:
        """Check `body`, rank the index's papers by the selected sentences, explain each hit. The answer's `note`
        (None when there is nothing to say) says what reading the hits needs: fewer than k of them, or what the command
        line warns of (`Searcher.say`: a BM25 stage whose selection shares no word with any paper), in one line."""
        req = self.check(body)
        searcher = self.searcher
        if req.tau != searcher.config.ot_tau:  # a request's own temperature: scorers apart from the shared ones, the
            # BM25 stage shared (a new Searcher once built a BM25 the index does not store again at every such search)
            searcher = searcher.with_config(replace(searcher.config, ot_tau=req.tau))
        with self._lock, torch.no_grad():
            query = searcher.query_from_index(req.paper_id, req.sentences)
            searcher.notes = []  # what `aspire search` warns of (`Searcher.say`), said in the answer's note
            try:
                hits, cross_ms = search_timed(searcher, query, k=req.k, rerank=req.rerank, shortlist=req.shortlist,
                                              stages=req.stages, cross_encoder=req.cross_encoder)
            finally:
                notes, searcher.notes = searcher.notes, None
            grids = self._grids(searcher, query, [h.paper_id for h in hits], req.rerank == "ot")
        out = []
        for hit, (plan, dist) in zip(hits, grids):
            pos = self.index.positions[hit.paper_id]
            out.append({"rank": hit.rank, "paper_id": hit.paper_id, "title": hit.title, "score": hit.score,
                        "sentences": self._sentences(pos),
                        "pairs": [{"query_sentence": p.query_sentence, "hit_sentence": p.hit_sentence,
                                   "dist": p.dist, "weight": p.weight} for p in hit.pairs],
                        "plan": plan, "dist": dist, "stages": hit.stages})
        if len(out) < req.k:  # the query paper is a candidate too unless exclude_query (once counted out always)
            excluded = searcher.config.exclude_query
            others = self.index.n_papers - excluded
            notes.insert(0, f"the index holds no other paper than {req.paper_id!r}" if others <= 0 else
                         f"the index holds only {others} {'other ' if excluded else ''}paper{'s' * (others != 1)}"
                         if len(out) == others else
                         f"{len(out)} of the {req.k} papers asked for were found")
        cfg = searcher.config
        cross = {"top": cfg.cross_top, "weight": cfg.cross_weight, "ms": cross_ms} if req.cross_encoder else None
        # the shortlist the re-ranker read: with the cross-encoder stage, grown to its cross_top (once the request's)
        asked = cross_depth(searcher, replace(cfg, k=req.k, shortlist=req.shortlist, rerank=req.rerank,
                                              stages=req.stages, cross_encoder=req.cross_encoder))
        return {"paper_id": req.paper_id, "sentences": req.sentences, "k": req.k, "rerank": req.rerank,
                "stages": req.stages, "fuse": cfg.fuse, "cross_encoder": cross,
                # none (not fused): no shortlist was read; the fused stage fuses lists that deep (`first_stage_depth`)
                "shortlist": None if unused_settings(asked, ["shortlist"]) else first_stage_depth(asked),
                "plan_rows": req.sentences, "ot": {"tau": cfg.ot_tau, "eps": cfg.ot_eps},
                "hits": out, "note": "; ".join(notes) or None, "generation": self.generation}

    def _grids(self, searcher: Searcher, query, paper_ids: list[str], with_plan: bool) -> list[tuple]:
        """Per hit, (OT plan or None, L2 distances) between the selected query sentences and its sentences.

        Returns [(plan (n, T_h) or None, dist (n, T_h))] as nested lists: the plan (only `with_plan`, OT
        ranking) to 4 significant digits, so that the row of a sentence the temperature gives almost no
        mass (1e-20 of it) keeps its shape; the distances (the OT scorer's own cost matrix then) to 5 decimals.
        """
        if not paper_ids:
            return []
        cands = self.index.gather([self.index.positions[p] for p in paper_ids], device=query.device,
                                  dtype=query.emb.dtype)
        rows = query.mask[0].nonzero()[:, 0]  # (n,) selected query positions
        if with_plan:
            details = searcher.scorer("ot", searcher.config).dist_details(query, cands)
            plan_np = significant(details.plan[0][:, rows].detach().double().cpu().numpy())  # (C, n, T)
            cost = details.cost[0][:, rows]  # (C, n, T)
        else:
            q = query.emb[0, rows].float()  # (n, D)
            cost = cross_l2_cost(q[None], cands.emb.float())[0]  # (C, n, T): the scorers' distance routine
        cost_np = np.round(cost.detach().float().cpu().numpy(), 5)
        lengths = cands.lengths.tolist()
        return [(plan_np[c, :, :t].tolist() if with_plan else None, cost_np[c, :, :t].tolist())
                for c, t in enumerate(lengths)]


def significant(values: np.ndarray, digits: int = 4) -> np.ndarray:
    """`values` rounded to `digits` significant digits each (zeros stay zero)."""
    nonzero = values != 0
    magnitude = np.floor(np.log10(np.abs(values), where=nonzero, out=np.zeros_like(values)))
    scale = 10.0 ** (digits - 1 - magnitude)
    return np.where(nonzero, np.round(values * scale) / scale, 0.0)


def generation_key(index_dir: str | Path) -> tuple[str, str]:
    """(name, digest of its manifest) of the live generation under `index_dir`. The name alone does not tell two
    builds apart: an index deleted and built again, or built with --overwrite, starts again at gen-000001."""
    manifest = SentenceIndex.read_manifest(index_dir)
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    return Path(manifest["path"]).name, digest


def open_service(index_dir: str | Path, overrides: Sequence[str] = (), labels_from: str | Path | None = None,
                 cross_encoder=None) -> SearchService:
    """A SearchService over the index at `index_dir`; `overrides` adjust its search config (e.g. "rerank=ot");
    `cross_encoder` (`aspire.retrieval.crossencoder.load_cross_stage`) is the model a request can add as last stage.

    Its `generation` is the live generation read just before opening (a build finishing meanwhile can
    make it stale: aspire.serve.reload checks it again after opening).
    """
    check_overrides(overrides)
    key = generation_key(index_dir)
    searcher = Searcher.open(index_dir, overrides)
    tau = searcher.config.ot_tau
    if not MIN_TAU <= tau <= MAX_TAU:  # the index's own saved config (an override is refused above): the page
        # showed it as its default temperature and then refused to send it
        raise ValueError(f"{index_dir}: its search config has ot_tau={tau:g}, outside the OT temperatures the page "
                         f"serves [{MIN_TAU:g}, {MAX_TAU:g}]: give search.ot_tau=T within them to serve it")
    searcher.cross_encoder = cross_encoder
    index = searcher.index  # the labels the index keeps, unless a labels file is given
    labels = {pid: list(lab) for pid, lab in zip(index.paper_ids, index.labels) if lab is not None}
    if labels_from is not None:
        labels, counts = read_labels(labels_from, searcher.index.paper_ids, searcher.index.sentences)
        log.info("facet labels from %s: %s", labels_from, {k: v for k, v in counts.items() if k != "rejected"})
    return SearchService(searcher, labels, key[0], key)
