"""Round 33, the page's app and the re-ranking stages, against independent references.

Fixed: `read_json` caught only the builtin TimeoutError, which `asyncio.wait_for` raises from Python 3.11 on; on
Python 3.10 (which the project supports, `requires-python >= 3.10`) it raises `asyncio.TimeoutError`, another class,
so a body that did not arrive within `body_timeout` was a 500 with a logged traceback instead of the documented 408.

Checked as they are: each route's JSON is the service's own answer; errors are JSON with their status and no
traceback; unknown routes 404, other methods 405 with Allow; HEAD has GET's headers; the re-rankers' orders equal
scoring the whole shortlist and sorting (ties in shortlist order), also for k above the shortlist; the maxpassage mix
equals a brute-force z-score mix; the cross-encoder stage equals `mix_rerank` written out by hand.
"""

from __future__ import annotations

import asyncio
import json
import types
from dataclasses import replace

import numpy as np
import pytest
from serve_support import LogRecords, encoder_fixture, index_fixture, request, running  # noqa: F401 (fixtures)

import aspire.serve.app as app_module
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.config import checked_search_config
from aspire.retrieval.crossencoder import RerankOptions, cross_rerank
from aspire.retrieval.rerank import RERANK_STAGES, rerank
from aspire.search import Searcher
from aspire.serve import open_service
from aspire.serve.requests import RequestError


@pytest.fixture(scope="module")
def service(index):
    return open_service(index, ["k=3", "ot_max_iter=100"])


@pytest.fixture(scope="module")
def server(service):
    with running(service) as srv:
        yield srv


# ---- fixed: a body timeout is a 408 whatever asyncio's TimeoutError class ------------------------------------------

class _Py310AsyncioTimeout(Exception):
    """`asyncio.TimeoutError` as Python 3.10 defines it: not a subclass of the builtin TimeoutError."""


def test_a_body_timeout_is_408_with_python_310s_asyncio_timeout_class(monkeypatch):
    async def never():
        await asyncio.sleep(3600)

    async def wait_for(awaitable, timeout):
        awaitable.close()
        raise _Py310AsyncioTimeout()

    fake = types.SimpleNamespace(get_running_loop=asyncio.get_running_loop, wait_for=wait_for,
                                 TimeoutError=_Py310AsyncioTimeout)
    monkeypatch.setattr(app_module, "asyncio", fake)
    req = types.SimpleNamespace(headers={"content-length": "10", "content-type": "application/json"},
                                receive=never, scope={})
    with pytest.raises(RequestError) as err:
        asyncio.run(app_module.read_json(req, 0.01))
    assert err.value.status == 408 and "0 of 10 bytes" in err.value.message


# ---- routes against the service's own answers ---------------------------------------------------------------------

SEARCHES = [{"paper_id": "q", "sentences": [0, 1]},
            {"paper_id": "q", "sentences": [0, 2], "rerank": "ot", "k": 4, "shortlist": 4},
            {"paper_id": "q", "sentences": [1], "rerank": "maxpassage"},
            {"paper_id": "q", "sentences": [1], "rerank": "hybrid", "k": 10},
            {"paper_id": "c", "sentences": [1], "rerank": "minl2", "k": 10, "stages": "bm25"}]


def test_each_route_answers_the_services_own_answer(server, service):
    def get(path):
        status, ctype, raw = request(server, "GET", path)
        assert status == 200 and ctype == "application/json; charset=utf-8", (path, raw)
        return json.loads(raw)

    assert get("/api/info") == {**json.loads(json.dumps(service.info())), "reload_error": None}
    assert get("/api/papers?q=pars&limit=2") == service.find_papers("pars", 2, 0)
    assert get("/api/papers?limit=2&offset=2") == service.find_papers("", 2, 2)
    assert get("/api/paper?id=q") == service.paper("q")
    for body in SEARCHES:
        status, _, raw = request(server, "POST", "/api/search", body)
        assert status == 200 and json.loads(raw) == json.loads(json.dumps(service.search(body))), body


@pytest.mark.parametrize("method, path, body, status, words", [
    ("GET", "/nope", None, 404, "no such route '/nope'"),
    ("GET", "/api/info/", None, 404, "no such route"),
    ("GET", "/api/paper?id=zzz", None, 404, "unknown paper_id 'zzz'"),
    ("GET", "/api/paper", None, 400, "?id=PAPER_ID"),
    ("GET", "/api/papers?limit=0", None, 400, "limit"),
    ("GET", "/api/papers?bogus=1", None, 400, "bogus"),
    ("GET", "/api/info?k=1", None, 400, "takes none"),
    ("POST", "/api/search", {"paper_id": "zzz", "sentences": [0]}, 404, "zzz"),
    ("POST", "/api/search", {"paper_id": "q", "sentences": [99]}, 400, "out of range"),
    ("POST", "/api/search", {"paper_id": "q", "sentences": [0], "rerank": "nope"}, 400, "valid: 'none', 'minl2'"),
    ("POST", "/api/search", {"paper_id": "q", "sentences": [0], "k": 5, "shortlist": 2}, 400, "shortlist (2)"),
    ("POST", "/api/search", [1], 400, "JSON object"),
])
def test_errors_are_json_with_their_status_and_no_traceback(server, method, path, body, status, words):
    with LogRecords() as logs:
        got, ctype, raw = request(server, method, path, body)
    assert (got, ctype) == (status, "application/json; charset=utf-8")
    assert words in json.loads(raw)["error"] and logs.tracebacks() == []


@pytest.mark.parametrize("method, path, allowed", [("POST", "/api/info", {"GET", "HEAD"}),
                                                   ("PUT", "/api/search", {"POST"}), ("GET", "/api/search", {"POST"}),
                                                   ("GET", "/api/reload", {"POST"}), ("DELETE", "/", {"GET", "HEAD"}),
                                                   ("HEAD", "/api/search", {"POST"})])
def test_other_methods_are_405_naming_the_allowed_ones(server, method, path, allowed):
    status, ctype, raw, headers = request(server, method, path, with_headers=True)
    assert (status, ctype) == (405, "application/json; charset=utf-8")
    assert set(headers["allow"].split(", ")) == allowed
    if method != "HEAD":
        assert set(json.loads(raw)["error"].split("use ")[1].split(", ")) == allowed


@pytest.mark.parametrize("path", ["/", "/api/info", "/api/papers?q=a", "/api/paper?id=q", "/favicon.ico",
                                  "/static/app.js"])
def test_head_has_the_gets_status_and_headers_and_no_body(server, path):
    g_status, _, g_raw, g = request(server, "GET", path, with_headers=True)
    h_status, _, h_raw, h = request(server, "HEAD", path, with_headers=True)
    g.pop("date", None), h.pop("date", None)
    assert (h_status, h, h_raw) == (g_status, g, b"") and int(g["content-length"]) == len(g_raw) > 0


# ---- re-ranking against scoring the shortlist directly -----------------------------------------------------------

def _tied_searcher() -> Searcher:
    """12 papers of random 6-d sentences, papers 5, 7 and 9 exact copies of paper 2 (vectors and whole vector)."""
    rng = np.random.default_rng(3)
    P = 12
    lengths = rng.integers(1, 5, P)
    lengths[[2, 5, 7, 9]] = 3
    vecs = [rng.standard_normal((n, 6)).astype(np.float32) for n in lengths]
    whole = rng.standard_normal((P, 6)).astype(np.float32)
    for i in (5, 7, 9):
        vecs[i], whole[i] = vecs[2].copy(), whole[2]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    corpus = EncodedCorpus(np.concatenate(vecs), offsets, [f"p{i}" for i in range(P)], [f"t{i}" for i in range(P)],
                           [[f"s {j}." for j in range(n)] for n in lengths], whole=whole)
    return Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))


SHORTLIST = np.array([9, 1, 7, 3, 2, 4, 5, 6, 8, 10, 11])
FIRST = np.linspace(0.0, -1.0, len(SHORTLIST))


@pytest.mark.parametrize("name", ["minl2", "ot", "hybrid"])
def test_reranked_order_is_the_whole_shortlist_scored_and_sorted_ties_in_shortlist_order(name):
    s = _tied_searcher()
    q = s.query_from_index("p0")
    own, _ = RERANK_STAGES[name](s, q, SHORTLIST, checked_search_config(s.config, k=11, rerank=name, shortlist=11))
    for k in (2, 4, 6, 11):
        pos, final, stages, aligned = rerank(s, q, SHORTLIST, FIRST, checked_search_config(s.config, k=k, rerank=name,
                                                                                           shortlist=11))
        order = np.argsort(-own, kind="stable")[:k]
        assert pos.tolist() == SHORTLIST[order].tolist()
        np.testing.assert_allclose(final, own[order], rtol=1e-5)
        assert [st[name] for st in stages] == pytest.approx(own[order].tolist(), rel=1e-5)
        assert (aligned is not None) == (name == "ot") and (aligned is None or len(aligned[0]) == k)
    assert len(set(own[[0, 2, 4, 6]].round(5))) == 1  # the copies tie: their order above is the shortlist's


@pytest.mark.parametrize("name", ["minl2", "ot", "hybrid", "maxpassage"])
def test_a_shortlist_shorter_than_k_returns_all_of_it(name):
    s = _tied_searcher()
    q = s.query_from_index("p0")
    pos, final, stages, aligned = rerank(s, q, SHORTLIST[:3], FIRST[:3],
                                         checked_search_config(s.config, k=5, rerank=name, shortlist=5))
    assert sorted(pos.tolist()) == sorted(SHORTLIST[:3].tolist()) and len(final) == len(stages) == 3
    assert list(final) == sorted(final, reverse=True)


@pytest.mark.parametrize("depth, beta", [(4, 0.3), (6, 0.0), (3, 1.0), (1, 0.5), (11, 0.815)])
def test_maxpassage_mix_equals_a_brute_force_z_score_mix(depth, beta):
    s = _tied_searcher()
    q = s.query_from_index("p0")
    cfg = replace(checked_search_config(s.config, k=11, rerank="maxpassage", shortlist=11), passage_depth=depth,
                  passage_beta=beta)
    pos, final, stages, _ = rerank(s, q, SHORTLIST, FIRST, cfg)
    own = RERANK_STAGES["maxpassage"](s, q, SHORTLIST[:depth], cfg)[0].astype(float)
    head = FIRST[:depth]
    z_first = (FIRST - head.mean()) / head.std() if head.std() > 0 else np.zeros_like(FIRST)
    z_own = (own - own.mean()) / own.std() if own.std() > 0 else np.zeros_like(own)
    mix = beta * z_first + (1 - beta) * np.concatenate([z_own, np.full(len(SHORTLIST) - depth, z_own.min())])
    order = np.argsort(-mix, kind="stable")
    assert pos.tolist() == SHORTLIST[order].tolist()
    np.testing.assert_allclose(final, mix[order], atol=1e-9)
    assert [st.get("maxpassage") for st in stages] == [float(own[i]) if i < depth else None for i in order]


# ---- the cross-encoder stage against mix_rerank written out ----------------------------------------------------------

class _FixedCross:
    def __init__(self, logits):
        self.logits = logits

    def head_scores(self, query, previous, texts, top_n):
        assert set(texts) == {d for d, _ in previous[:top_n]}
        return {d: self.logits[d] for d, _ in previous[:top_n]}


@pytest.mark.parametrize("weight", [0.0, 0.4, 1.0])
def test_cross_stage_equals_the_mix_by_hand(weight):
    s = _tied_searcher()
    q = s.query_from_index("p0")
    hits = s.search(q, k=8)
    logits = {h.paper_id: float(v) for h, v in zip(hits, [0.3, -1.0, 2.0, 0.3, 0.5, 1.0, 9.0, 9.0])}
    s.cross_encoder = _FixedCross(logits)
    cfg = replace(s.config, k=6, cross_top=5, cross_weight=weight)
    out = cross_rerank(s, q, hits, cfg)
    head, tail = hits[:5], hits[5:]
    a = np.array([h.score for h in head])
    c = np.array([logits[h.paper_id] for h in head])
    mixed = weight * (c - c.mean()) / c.std() + (1 - weight) * (a - a.mean()) / a.std()
    if weight == 0.0:
        want = [h.paper_id for h in head]
    else:
        want = [head[i].paper_id for i in sorted(range(5), key=lambda i: (-mixed[i], head[i].paper_id))]
    assert [h.paper_id for h in out] == (want + [h.paper_id for h in tail])[:6]
    assert [h.rank for h in out] == list(range(1, 7))
    by_id = {h.paper_id: m for h, m in zip(head, mixed)}
    np.testing.assert_allclose([h.score for h in out[:5]], [by_id[p] for p in want], atol=1e-9)
    assert [h.stages.get("crossencoder") for h in out] == [logits[p] for p in want] + [None]


def test_rerank_weight_is_refused_by_name():
    for bad in (1.5, -0.1, True, "0.5", float("nan")):
        with pytest.raises(ValueError, match="rerank weight"):
            RerankOptions("m", weight=bad)
