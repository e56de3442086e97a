"""The aspect-selection page's server: request checks (4xx with a message), answers equal to the Searcher's,
facet labels from a corpus file, only known routes served, and a bounded loopback load test."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from serve_support import PAPERS, L, build_index, raw_request, request, running

from aspire.data.papers import Paper, write_papers
from aspire.encoders import load_encoder
from aspire.serve import RequestError, open_service
from aspire.serve.app import MAX_BODY


@pytest.fixture(scope="module")
def index_dir(tiny_model_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("serve")
    write_papers(root / "papers.jsonl", PAPERS)
    return build_index(load_encoder(tiny_model_dir), PAPERS, root / "index", str(tiny_model_dir))


@pytest.fixture(scope="module")
def service(index_dir):
    return open_service(index_dir, ["rerank=ot", "k=3", "ot_max_iter=100"], index_dir.parent / "papers.jsonl")


@pytest.fixture(scope="module")
def server(service):
    with running(service) as srv:
        yield srv


# ---- service ------------------------------------------------------------------------------------------
def test_paper_has_sentences_and_facets(service):
    paper = service.paper("b")
    assert paper["title"] == "document similarity"
    assert [s["text"] for s in paper["sentences"]] == PAPERS[2].sentences
    assert [s["facet"] for s in paper["sentences"]] == ["background", "result"]  # objective counts as background
    assert service.paper("d")["sentences"][1]["facet"] is None


def test_labels_are_left_out_when_counts_differ(index_dir, tmp_path):
    from aspire.index import SentenceIndex
    from aspire.serve import read_labels

    index = SentenceIndex.load(index_dir)
    wrong = [Paper("a", "t", ["one.", "two.", "three."], [L[0]] * 3), PAPERS[2]]
    write_papers(tmp_path / "p.jsonl", wrong)
    labels, counts = read_labels(tmp_path / "p.jsonl", index.paper_ids, index.sentences)
    assert list(labels) == ["b"] and counts["mismatched"] == 1 and counts["unlabelled"] == 4


def test_search_equals_the_searcher_and_explains_with_the_plan(service):
    out = service.search({"paper_id": "q", "sentences": [2, 1], "k": 3})
    assert out["plan_rows"] == [1, 2] and out["rerank"] == "ot"
    query = service.searcher.query_from_index("q", [1, 2])
    expected = service.searcher.search(query, k=3, rerank="ot")
    assert [h["paper_id"] for h in out["hits"]] == [h.paper_id for h in expected]
    np.testing.assert_allclose([h["score"] for h in out["hits"]], [h.score for h in expected], rtol=1e-5)
    assert "q" not in [h["paper_id"] for h in out["hits"]]
    for hit in out["hits"]:
        plan = np.array(hit["plan"])
        assert plan.shape == (2, len(hit["sentences"]))
        assert plan.sum() == pytest.approx(1.0, abs=1e-3)
        assert -hit["score"] == pytest.approx(float((plan * np.array(hit["dist"])).sum()), rel=1e-3, abs=1e-4)
        rows = {1: 0, 2: 1}
        for p in hit["pairs"]:  # each aligned pair is the plan's largest entry in its query row
            assert p["hit_sentence"] == int(np.argmax(plan[rows[p["query_sentence"]]]))
    minl2 = service.search({"paper_id": "q", "sentences": [1], "k": 2, "rerank": "minl2"})
    direct = service.searcher.search(service.searcher.query_from_index("q", [1]), k=2, rerank="minl2")
    assert [h["paper_id"] for h in minl2["hits"]] == [h.paper_id for h in direct]


@pytest.mark.parametrize("body, status, message", [
    ({"paper_id": "nope", "sentences": [0]}, 404, "unknown paper_id"),
    ({"paper_id": "q", "sentences": []}, 400, "empty selection"),
    ({"paper_id": "q", "sentences": [0, 3]}, 400, "out of range 0..2"),
    ({"paper_id": "q", "sentences": [-1]}, 400, "out of range"),
    ({"paper_id": "q", "sentences": [True]}, 400, "integers"),
    ({"paper_id": "q", "sentences": "0,1"}, 400, "sentence positions \\(integers\\); got '0,1'"),
    ({"paper_id": "q", "sentences": [0], "k": 3.0}, 400, "k must be"),
    ({"paper_id": "q", "sentences": [0], "shortlist": 0}, 400, "shortlist must be"),
    ({"paper_id": "q", "sentences": [0], "k": 5, "shortlist": 4}, 400, "shortlist \\(4\\) must be at least k \\(5\\)"),
    ({"paper_id": "q", "sentences": [0], "tau": 0}, 400, "tau must be a number in \\[1e-06, 10000\\]"),
    ({"paper_id": "q", "sentences": [0], "tau": 1e-300}, 400, "tau must be a number in"),
    ({"paper_id": "q", "sentences": [0], "tau": float("nan")}, 400, "tau must be a number in"),
    ({"sentences": [0]}, 400, "paper_id is required"),
    ({"paper_id": "q", "sentences": list(range(300))}, 400, "too many sentences"),
    ({"paper_id": "q", "sentences": [0], "k": 0}, 400, "k must be"),
    ({"paper_id": "q", "sentences": [0], "k": 51}, 400, "k must be"),
    ({"paper_id": "q", "sentences": [0], "k": "3"}, 400, "k must be"),
    ({"paper_id": "q", "sentences": [0], "rerank": "bm25"}, 400, "unknown rerank"),
    ({"paper_id": "q", "sentences": [0], "extra": 1}, 400, "unknown field"),
    ({"paper_id": 7, "sentences": [0]}, 400, "non-empty string"),
    ({"paper_id": "x" * 300, "sentences": [0]}, 400, "too long"),
    ([1, 2], 400, "JSON object"),
])
def test_bad_search_requests_are_refused(service, body, status, message):
    with pytest.raises(RequestError, match=message) as err:
        service.search(body)
    assert err.value.status == status


def test_find_papers(service):
    assert [p["paper_id"] for p in service.find_papers("PARS")["papers"]] == ["q", "a"]
    assert [p["paper_id"] for p in service.find_papers("c")["papers"]][0] == "c"  # exact id first
    assert len(service.find_papers("", limit=2)["papers"]) == 2
    with pytest.raises(RequestError, match="too long"):
        service.find_papers("x" * 201)


def test_find_papers_takes_title_words_in_any_order_and_id_prefixes(index_dir):
    from aspire.serve import SearchService
    from aspire.serve.service import significant

    service = open_service(index_dir, ["k=3"])
    assert [p["paper_id"] for p in service.find_papers("documents parser")["papers"]] == ["q"]  # any order
    assert [p["paper_id"] for p in service.find_papers("  Docum  SIMIL ")["papers"]] == ["b"]  # parts of words
    assert service.find_papers("parser citation")["papers"] == []  # every word must match
    # ids: the exact id first, then ids starting with the text, then titles holding it
    searcher = service.searcher
    searcher.index.paper_ids[:] = ["2468783", "246", "9246", "24687", "x"]
    searcher.index.positions.clear()
    searcher.index.positions.update({pid: i for i, pid in enumerate(searcher.index.paper_ids)})
    renamed = SearchService(searcher)
    assert [p["paper_id"] for p in renamed.find_papers("246")["papers"]] == ["246", "2468783", "24687"]
    page = renamed.find_papers("2468", limit=1)
    assert [p["paper_id"] for p in page["papers"]] == ["2468783"] and page["next_offset"] == 1
    assert [p["paper_id"] for p in renamed.find_papers("2468", offset=1)["papers"]] == ["24687"]
    np.testing.assert_allclose(significant(np.array([0.123456, 1.23456e-20, 0.0, -2.5e-7])),
                               [0.1235, 1.235e-20, 0.0, -2.5e-7], rtol=1e-12, atol=0)


def test_a_low_temperature_plan_keeps_the_shape_of_rows_without_weight(service):
    """At tau 0.01 one selected sentence takes nearly all the weight; the others' rows are still sent
    (to 4 significant digits, not rounded to zero), so the page can say they carry no weight."""
    out = service.search({"paper_id": "q", "sentences": [0, 1, 2], "k": 3, "tau": 0.01})
    light = 0
    for hit in out["hits"]:
        plan = np.array(hit["plan"])
        weight = plan.sum(1) / plan.sum()
        assert plan.sum() == pytest.approx(1.0, abs=1e-3)
        light += int(((weight < 5e-4) & (plan.max(1) > 0)).sum())
    assert light > 0


def test_every_paper_is_reachable_a_page_at_a_time(service):
    ids, offset = [], 0
    while offset is not None:
        page = service.find_papers("", limit=2, offset=offset)
        assert len(page["papers"]) == (2 if page["next_offset"] is not None else 1)
        ids += [p["paper_id"] for p in page["papers"]]
        offset = page["next_offset"]
    assert ids == ["q", "a", "b", "c", "d"]
    assert service.find_papers("", limit=2, offset=5)["papers"] == []
    page = service.find_papers("c", limit=1)  # the exact id first, then titles containing "c"
    assert [p["paper_id"] for p in page["papers"]] == ["c"] and page["next_offset"] == 1
    assert [p["paper_id"] for p in service.find_papers("c", limit=5, offset=1)["papers"]] == ["q", "b", "d"]


def test_min_l2_answers_carry_distances_and_no_plan(service):
    out = service.search({"paper_id": "q", "sentences": [0, 2], "k": 5, "rerank": "minl2"})
    for hit in out["hits"]:
        dist = np.array(hit["dist"])
        assert hit["plan"] is None and dist.shape == (2, len(hit["sentences"]))
        assert -hit["score"] == pytest.approx(dist.min(), abs=1e-4)  # the closest pair decides
        for p in hit["pairs"]:  # each pair: a selected sentence and its nearest hit sentence
            assert p["weight"] == 1.0 and p["hit_sentence"] == int(np.argmin(dist[[0, 2].index(p["query_sentence"])]))
    assert out["note"] == "the index holds only 4 other papers"


# ---- HTTP -----------------------------------------------------------------------------------------------
def test_http_routes_and_static_files(server):
    status, ctype, body = request(server, "GET", "/")
    assert status == 200 and ctype.startswith("text/html") and b"/static/app.js" in body
    status, ctype, body = request(server, "GET", "/static/app.js")
    assert status == 200 and ctype.startswith("text/javascript") and b"textContent" in body
    status, ctype, body = request(server, "GET", "/favicon.ico")
    assert status == 200 and ctype == "image/svg+xml" and body.startswith(b"<svg")
    status, ctype, body = request(server, "GET", "/api/info")
    assert status == 200 and json.loads(body)["n_papers"] == 5 and json.loads(body)["labelled_papers"] == 5
    status, _, body = request(server, "GET", "/api/paper?id=a")
    assert status == 200 and json.loads(body)["sentences"][1]["facet"] == "method"
    status, _, body = request(server, "POST", "/api/search", {"paper_id": "q", "sentences": [0, 1]})
    hits = json.loads(body)["hits"]
    assert status == 200 and len(hits) == 3  # k=3 from the server's overrides


@pytest.mark.parametrize("raw", [
    b"GET /../../etc/passwd HTTP/1.0\r\n\r\n",
    b"GET /static/../service.py HTTP/1.0\r\n\r\n",
    b"GET /static/%2e%2e/server.py HTTP/1.0\r\n\r\n",
    b"GET /static/ HTTP/1.0\r\n\r\n",
    b"GET //etc/passwd HTTP/1.0\r\n\r\n",
    b"GET /static/index.html HTTP/1.0\r\n\r\n",
])
def test_nothing_outside_the_known_files_is_served(server, raw):
    status, body = raw_request(server, raw)
    assert status == 404 and "no such route" in json.loads(body)["error"]


@pytest.mark.parametrize("method, path, body, headers, status, message", [
    ("GET", "/api/paper?id=zzz", None, None, 404, "unknown paper_id"),
    ("GET", "/api/paper", None, None, 400, "?id="),
    ("GET", "/api/papers?limit=abc", None, None, 400, "limit"),
    ("GET", "/api/papers?q=" + "x" * 300, None, None, 400, "too long"),
    ("GET", "/api/papers?" + "&".join(f"a{i}=1" for i in range(20)), None, None, 400, "query string"),
    ("GET", "/api/paper?id=a&id=b", None, None, 400, "repeated"),
    ("POST", "/api/search", b"{not json", None, 400, "not valid JSON"),
    ("POST", "/api/search", b"\xff\xfe", None, 400, "not valid JSON"),
    ("POST", "/api/search", b"[" * 8000 + b"]" * 8000, None, 400, "nested too deeply"),
    ("POST", "/api/search", b'{"paper_id": "q"}', {"Content-Type": "text/plain"}, 415, "JSON"),
    ("POST", "/api/search", b"x" * (MAX_BODY + 1), None, 413, "too large"),
    ("POST", "/api/search", {"paper_id": "q", "sentences": []}, None, 400, "empty selection"),
    ("GET", "/api/search", None, None, 405, "not allowed"),
    ("DELETE", "/api/info", None, None, 405, "not allowed"),
    ("BREW", "/", None, None, 405, "not allowed"),
    ("GET", "/admin", None, None, 404, "no such route"),
])
def test_bad_http_requests_get_4xx_json(server, method, path, body, headers, status, message):
    got, ctype, raw = request(server, method, path, body, headers)
    assert got == status and ctype.startswith("application/json")
    assert message in json.loads(raw)["error"]


def test_post_without_length_and_garbage_request_lines(server):
    status, body = raw_request(server, b"POST /api/search HTTP/1.0\r\nContent-Type: application/json\r\n\r\n{}")
    assert status == 411 and "Content-Length" in json.loads(body)["error"]
    status, body = raw_request(server, b"\x00\x01garbage\r\n\r\n")
    assert status == 400 and json.loads(body)["error"].startswith("bad request: illegal request line")
    status, body = raw_request(server, b"GET / HTTP/7.1\r\n\r\n")
    assert status == 400 and "version" in json.loads(body)["error"]
    status, body = raw_request(server, b"GET /" + b"a" * 10000 + b" HTTP/1.0\r\n\r\n")
    assert status == 414 and "longer than" in json.loads(body)["error"]
    status, body = raw_request(server, b"GET / HTTP/1.0\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    assert status == 431 and "too long" in json.loads(body)["error"]  # h11's limit on a request head


def test_a_request_refused_midway_is_answered_not_reset(server):
    # h11 refuses a head it holds incomplete at 16 KB while the client is still sending: the server
    # answers, then reads and drops the rest; closing with those bytes unread would reset the connection
    for _ in range(3):
        status, body = raw_request(server, [b"GET /" + b"a" * 20000, b"a" * 50000 + b" HTTP/1.0\r\n\r\n"])
        assert status == 431 and "too long" in json.loads(body)["error"]
    # a body refused by its Content-Length while it is still arriving: answered, not reset
    head = b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n"
    for _ in range(3):
        status, body = raw_request(server, [head, b"x" * 200000])
        assert status == 413 and "too large" in json.loads(body)["error"]


# ---- load ----------------------------------------------------------------------------------------------
MALFORMED = [
    ("POST", "/api/search", b"{oops", {}),
    ("POST", "/api/search", b'{"paper_id": "nope", "sentences": [0]}', {}),
    ("POST", "/api/search", b'{"paper_id": "q", "sentences": []}', {}),
    ("POST", "/api/search", b'{"paper_id": "q", "sentences": [99]}', {}),
    ("POST", "/api/search", b"x" * (MAX_BODY + 10), {}),
    ("POST", "/api/search", b"[" * 8000 + b"]" * 8000, {}),
    ("POST", "/api/search", b'{"paper_id": "q", "sentences": [0], "k": 1e400}', {}),
    ("GET", "/api/paper?id=" + "z" * 400, None, {}),
    ("GET", "/static/../../etc/passwd", None, {}),
    ("PUT", "/api/search", b"{}", {}),
    ("RAW", None, b"GET / HTTP/7.1\r\n\r\n", {}),
    ("RAW", None, b"\x00\x01garbage\r\n\r\n", {}),
    ("RAW", None, b"POST /api/search HTTP/1.0\r\nContent-Length: 99\r\nContent-Type: application/json\r\n\r\n{", {}),
]


@pytest.mark.slow
def test_load_loopback_no_5xx_bounded_memory_correct_results(index_dir):
    """A fixed number of mixed requests from 4 client threads, within a time limit, to a server process."""
    psutil = pytest.importorskip("psutil")
    proc = subprocess.Popen([sys.executable, "-m", "aspire.serve", "--index", str(index_dir), "--port", "0",
                             "--corpus", str(index_dir.parent / "papers.jsonl"), "--log-level", "WARNING",
                             "rerank=ot", "k=3", "ot_max_iter=100"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line
        host, port = line.split()[1].removeprefix("http://").rstrip("/").split(":")
        srv = type("S", (), {"server_address": (host, int(port))})()
        valid = [{"paper_id": "q", "sentences": [0, 1]}, {"paper_id": "a", "sentences": [1], "rerank": "minl2"},
                 {"paper_id": "c", "sentences": [0, 2], "k": 2, "rerank": "none"}]
        expected = [json.loads(request(srv, "POST", "/api/search", b)[2]) for b in valid]
        for _ in range(20):  # warm up before measuring memory
            request(srv, "POST", "/api/search", valid[0])
        rss_before = psutil.Process(proc.pid).memory_info().rss
        n_requests, deadline = 400, time.monotonic() + 90

        def one(i):
            if time.monotonic() > deadline:
                return "late", None
            if i % 2 == 0:
                j = (i // 2) % len(valid)
                status, _, raw = request(srv, "POST", "/api/search", valid[j])
                same = [h["paper_id"] for h in json.loads(raw)["hits"]] == [h["paper_id"] for h in expected[j]["hits"]]
                return status, same
            method, path, body, headers = MALFORMED[(i // 2) % len(MALFORMED)]
            if method == "RAW":
                return raw_request(srv, body)[0], None
            status, _, _ = request(srv, method, path, body, headers)
            return status, None

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(one, range(n_requests)))
        elapsed = time.monotonic() - started
        rss_after = psutil.Process(proc.pid).memory_info().rss
        statuses = [s for s, _ in results]
        print(f"load: {n_requests} requests in {elapsed:.1f} s, statuses "
              f"{dict(sorted(Counter(map(str, statuses)).items()))}, server RSS {rss_before / 2**20:.0f} -> "
              f"{rss_after / 2**20:.0f} MiB")
        assert "late" not in statuses, f"{statuses.count('late')} requests not sent within the time limit"
        assert not [s for s in statuses if s >= 500]
        assert all(s == 200 for s, _ in results[0::2]) and all(same for _, same in results[0::2])
        assert all(400 <= s < 500 for s in statuses[1::2])
        assert rss_after - rss_before < 50 * 2**20, f"server memory grew by {(rss_after - rss_before) / 2**20:.1f} MiB"
        assert proc.poll() is None  # still serving
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("stages, rerank, keys", [
    ("ann", "none", {"ann"}),
    ("bm25", "none", {"bm25"}),
    ("ann,bm25", "none", {"ann", "bm25", "fused"}),
    ("ann,bm25", "maxpassage", {"ann", "bm25", "fused", "maxpassage"}),
    ("ann", "ot", {"ann", "ot"}),
])
def test_search_takes_the_pipeline_and_shows_each_hits_stage_scores(service, stages, rerank, keys):
    out = service.search({"paper_id": "q", "sentences": [0, 1, 2], "k": 3, "stages": stages, "rerank": rerank})
    direct = service.searcher.search(service.searcher.query_from_index("q", [0, 1, 2]), k=3, stages=stages,
                                     rerank=rerank)
    assert out["stages"] == stages and out["rerank"] == rerank
    assert [h["paper_id"] for h in out["hits"]] == [h.paper_id for h in direct] and out["hits"]
    for hit, expected in zip(out["hits"], direct):
        assert set(hit["stages"]) <= keys and hit["stages"] == pytest.approx(expected.stages)
    assert keys - {"bm25", "fused"} <= set(out["hits"][0]["stages"])  # a lexical score only where words meet


@pytest.mark.parametrize("body, message", [
    ({"paper_id": "q", "sentences": [0], "stages": "sparse"}, "unknown stages 'sparse'; valid: 'ann', 'bm25'"),
    ({"paper_id": "q", "sentences": [0], "stages": ["ann"]}, "unknown stages"),
    ({"paper_id": "q", "sentences": [0], "rerank": "crossencoder"}, "unknown rerank 'crossencoder'"),
])
def test_bad_pipeline_choices_are_refused(service, body, message):
    with pytest.raises(RequestError, match=message) as err:
        service.search(body)
    assert err.value.status == 400


def test_an_index_without_whole_vectors_refuses_the_stages_that_need_them(index_dir):
    """Such an index (built before the one-pass encoding) once answered `whole` and `hybrid` with a 500."""
    old = open_service(index_dir, ["k=3"])
    old.index.whole = None
    info = old.info()
    assert "whole" not in info["pipelines"] and "hybrid" not in info["rerankers"] and "ann" in info["pipelines"]
    for extra in ({"stages": "whole"}, {"rerank": "hybrid"}):
        with pytest.raises(RequestError, match=f"'{next(iter(extra.values()))}' needs the papers' whole-abstract") as err:
            old.search({"paper_id": "q", "sentences": [0], **extra})
        assert err.value.status == 400
    assert old.search({"paper_id": "q", "sentences": [0], "rerank": "ot"})["hits"]
