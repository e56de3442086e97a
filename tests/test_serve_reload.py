"""A server outlives its index: every answer names the generation it came from, a rebuild while the
server runs is picked up (on the next requests, or by POST /api/reload) and no request fails meanwhile;
a new generation that cannot be opened leaves the old one served and says why."""

from __future__ import annotations

import json
import threading
import time

import pytest
from serve_support import PAPERS, LogRecords, build_index, join_all, request, running, wait_until

from aspire.encoders import load_encoder
from aspire.serve import ServiceHolder


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    return load_encoder(tiny_model_dir)


def generation_of(srv, method="GET", path="/api/info", body=None) -> tuple[int, str, str, dict]:
    status, _, raw, headers = request(srv, method, path, body, with_headers=True)
    out = json.loads(raw)
    return status, out.get("generation"), headers["x-aspire-generation"], out


def test_a_rebuild_under_load_changes_the_generation_and_no_request_fails(encoder, tmp_path):
    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    search = {"paper_id": "q", "sentences": [0, 1], "k": 2, "rerank": "ot"}
    with LogRecords() as logs, running(ServiceHolder(index, ["ot_max_iter=50"])) as srv:
        assert generation_of(srv)[1:3] == ("gen-000001", "gen-000001")
        seen: list[tuple[int, str, str, int]] = []  # (status, body generation, header generation, n_papers)
        stop = threading.Event()

        def client(path, body):
            while not stop.is_set():
                status, gen, header, out = generation_of(srv, "POST" if body else "GET", path, body)
                seen.append((status, gen, header, out.get("n_papers", -1)))

        def sized(gen: str) -> bool:  # a client's /api/info answer from `gen` (the sizes checked below)
            return any(s[1] == gen and s[3] >= 0 for s in seen)

        threads = [threading.Thread(target=client, args=a, name=a[0]) for a in
                   (("/api/search", search), ("/api/info", None), ("/api/papers?q=", None))]
        for t in threads:
            t.start()
        time.sleep(0.3)
        wait_until(lambda: sized("gen-000001"), "no client's /api/info answer from gen-000001 before the first rebuild")
        for n in (4, 5):  # two rebuilds while requests keep coming
            gen = f"gen-00000{n - 2}"
            build_index(encoder, PAPERS[:n], index, "tiny")
            saved = time.monotonic()
            wait_until(lambda g=gen: generation_of(srv)[1] == g, f"{gen} not served after its save")
            print(f"reload: {gen} served {time.monotonic() - saved:.2f} s after its save")
            time.sleep(0.3)
            wait_until(lambda g=gen: sized(g), f"no client's /api/info answer from {gen} while it was served")
        wait_until(lambda: len(seen) > 30, "fewer than 31 requests answered during the rebuilds")
        stop.set()
        join_all(threads)
        _, gen, header, info = generation_of(srv)
    assert (gen, header, info["n_papers"], info["reload_error"]) == ("gen-000003", "gen-000003", 5, None)
    assert len(seen) > 30 and all(s[0] == 200 for s in seen), [s for s in seen if s[0] != 200][:5]
    assert all(s[1] == s[2] for s in seen)  # the header names the generation the body came from
    sizes = {s[1]: s[3] for s in seen if s[3] >= 0}
    assert sizes == {"gen-000001": 3, "gen-000002": 4, "gen-000003": 5}  # each answer from one whole generation
    print(f"reload: {len(seen)} requests during two rebuilds, statuses {sorted({s[0] for s in seen})}")
    assert logs.tracebacks() == []


def test_explicit_reload_and_a_broken_generation(encoder, tmp_path):
    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    with LogRecords() as logs, running(ServiceHolder(index, check_every=None)) as srv:
        build_index(encoder, PAPERS, index, "tiny")
        assert generation_of(srv)[1] == "gen-000001"  # no automatic check: still the old one
        status, _, _, out = generation_of(srv, "POST", "/api/reload")
        assert status == 200 and out == {"generation": "gen-000002", "previous": "gen-000001", "reloaded": True,
                                         "error": None}
        status, _, _, out = generation_of(srv, "POST", "/api/reload")
        assert status == 200 and out["reloaded"] is False and out["generation"] == "gen-000002"
        (index / "CURRENT").write_text("gen-000009\n")  # a pointer to a generation that is not there
        status, _, header, out = generation_of(srv, "POST", "/api/reload")
        assert status == 503 and header == "gen-000002"
        assert "still serving gen-000002" in out["error"] and "gen-000009" in out["error"]
        status, gen, _, out = generation_of(srv, "POST", "/api/search", {"paper_id": "d", "sentences": [0]})
        assert status == 200 and gen == "gen-000002" and len(out["hits"]) == 4
        assert "gen-000009" in generation_of(srv)[3]["reload_error"]
    assert logs.tracebacks() == []
    assert any("could not open its live generation" in r.getMessage() for r in logs.records)


def test_an_index_deleted_and_built_again_is_served_though_its_generation_has_the_same_name(encoder, tmp_path):
    """The new build starts again at gen-000001: once the old papers stayed served and reload said "not reloaded"."""
    import shutil

    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    with running(ServiceHolder(index, check_every=None)) as srv:
        assert generation_of(srv)[3]["n_papers"] == 3
        shutil.rmtree(index)
        build_index(encoder, PAPERS, index, "tiny")
        status, _, _, out = generation_of(srv, "POST", "/api/reload")
        assert status == 200 and out == {"generation": "gen-000001", "previous": "gen-000001", "reloaded": True,
                                         "error": None}
        assert generation_of(srv)[3]["n_papers"] == len(PAPERS)
