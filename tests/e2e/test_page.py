"""End to end: the aspect-selection page in headless Chromium against a small CSFCube index (minilm).

Picks a paper, selects two of its sentences (one by mouse, one by keyboard), searches, and checks the
ranked list, the highlighted aligned sentences, their facet chips and the legend against the server's
own answer; then the single-match mode (no transport plan, no percentage), the "more papers" button
(more than one page of papers), a narrow window (nothing wider than the screen) and the favicon;
saves a screenshot (to the test's temporary folder, or to docs/screenshot.png when
ASPIRE_UPDATE_SCREENSHOT=1).
Needs Debian's `chromium` (driven through playwright's Python package, which never downloads a
browser here: the system binary is passed as `executable_path`); skips when it is absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS_SCREENSHOT = REPO / "docs" / "screenshot.png"
QUERY = "2468783"  # CSFCube query "Similarity of Semantic Relations" (method and result facets)
SELECTED = [5, 9]  # its two method sentences
N_CANDIDATES = 40  # with the query, more papers than the page lists at once (30)


def chromium_path() -> str | None:
    return os.environ.get("ASPIRE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(chromium_path() is None,
                       reason="headless Chromium not installed (apt-get install -y chromium)"),
]


@pytest.fixture(scope="module")
def page_server(shared_data, tmp_path_factory):
    from aspire.data.papers import read_papers, write_papers
    from aspire.encoders import load_encoder
    from aspire.index import (
        IndexBuildConfig,
        IndexConfig,
        SentenceIndex,
        encode_corpus,
        model_fingerprint,
    )
    from aspire.serve import ServiceHolder, make_server

    csf = shared_data / "csfcube"
    pool = json.loads((csf / "test-pid2anns-csfcube-method.json").read_text())[QUERY]
    graded = sorted(zip(pool["relevance_adju"], pool["cands"]), key=lambda g: (-g[0], g[1]))
    keep = {QUERY} | {pid for _, pid in graded[: N_CANDIDATES // 2]} | {pid for _, pid in graded[-N_CANDIDATES // 2:]}
    papers = [p for p in read_papers(csf / "abstracts-csfcube-preds.jsonl").papers if p.paper_id in keep]
    root = tmp_path_factory.mktemp("page")
    write_papers(root / "papers.jsonl", papers)
    encoder = load_encoder("minilm")
    index = SentenceIndex.build(encode_corpus(encoder, papers, progress=False),
                                IndexBuildConfig(index=IndexConfig(kind="flat")), model_fingerprint(encoder), "minilm")
    index.save(root / "index")
    server = make_server(ServiceHolder(root / "index", ["rerank=ot"], root / "papers.jsonl"), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@contextlib.contextmanager
def open_page(server, viewport=None):
    """The page in headless Chromium, its list of papers loaded: yields (page, uncaught page errors)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport=viewport or {"width": 1280, "height": 800})
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(server.url)
            page.wait_for_selector(".paper-item")
            yield page, errors
        finally:
            browser.close()


def test_select_two_sentences_search_and_see_alignments(page_server, tmp_path):
    with open_page(page_server, {"width": 1440, "height": 1000}) as (page, errors):
        page.fill("#paper-filter", "semantic relations")
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        labels = page.locator("#query-sentences .sentence .facet").all_inner_texts()
        assert labels[SELECTED[0]] == "method" and labels[SELECTED[1]] == "method"
        page.click(f'#query-sentences .sentence[data-index="{SELECTED[0]}"]')  # by mouse
        page.focus(f'#query-sentences .sentence[data-index="{SELECTED[1]}"]')  # by keyboard
        page.keyboard.press("Space")
        selected = page.locator("#query-sentences .sentence.selected")
        assert [int(x) for x in selected.evaluate_all("ns => ns.map(n => n.dataset.index)")] == SELECTED
        assert selected.evaluate_all("ns => ns.map(n => n.getAttribute('aria-checked'))") == ["true", "true"]
        page.select_option("#k", "5")
        page.click("#search-btn")
        page.wait_for_selector("#results .hit")

        expected = page_server.service.search({"paper_id": QUERY, "sentences": SELECTED, "k": 5, "rerank": "ot"})
        hits = page.locator("#results .hit")
        assert hits.count() == 5
        shown_ids = hits.evaluate_all("ns => ns.map(n => n.dataset.id)")
        assert shown_ids == [h["paper_id"] for h in expected["hits"]] and QUERY not in shown_ids
        for n, hit in enumerate(expected["hits"]):
            card = hits.nth(n)
            assert card.locator(".hit-title").inner_text() == hit["title"]
            aligned = card.locator(".hit-sentence.aligned").evaluate_all("ns => ns.map(n => Number(n.dataset.index))")
            assert aligned == sorted({p["hit_sentence"] for p in hit["pairs"]})
            tags = card.locator(".align-tag").all_inner_texts()
            assert sorted(t.split()[0] for t in tags) == sorted(f"q{i}" for i in SELECTED)
            assert card.locator(".plan th.qlabel").all_inner_texts() == [f"q{i}" for i in SELECTED]
            assert card.locator(".plan td").count() == len(SELECTED) * len(hit["sentences"])
            shown = sorted((t.split()[0], int(t.split()[1])) for t in tags)  # "q5 62 %": share of q5's mass
            want = sorted((f"q{p['query_sentence']}", 100 * p["weight"]) for p in hit["pairs"])
            assert all(a[0] == b[0] and abs(a[1] - b[1]) <= 0.51 for a, b in zip(shown, want))
            chips = card.locator(".hit-sentence .facet").all_inner_texts()
            assert chips and set(chips) <= {"background", "method", "result", "other"}
        assert page.locator("#status").inner_text().startswith("5 papers in")
        assert page.locator("#legend .legend-q").all_inner_texts() == [f"q{i}" for i in SELECTED]
        assert "share of one selected sentence's mass" in page.locator("#mode-help").inner_text()
        gen = page_server.service.generation
        assert gen and page.locator("#generation").inner_text() == f"index {gen}"
        assert errors == []

        page.locator("#query-sentences .sentence.selected").last.evaluate("n => n.scrollIntoView({block: 'end'})")
        shot = DOCS_SCREENSHOT if os.environ.get("ASPIRE_UPDATE_SCREENSHOT") == "1" else tmp_path / "page.png"
        shot.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 20_000


def test_single_match_mode_more_papers_narrow_window_and_favicon(page_server):
    """Min-L2 answers show nearest sentences with distances (no plan, no percentage); every paper is
    reachable from the list; at 420 px nothing is wider than the window; the favicon is served."""
    with open_page(page_server, {"width": 420, "height": 900}) as (page, errors):
        assert page.locator(".paper-item").count() == 30
        page.focus("#more-papers")
        page.keyboard.press("Enter")
        page.locator(".paper-item").nth(30).wait_for()  # a selector, not a script: the page's CSP forbids eval
        n_papers = page_server.service.index.n_papers
        assert page.locator(".paper-item").count() == n_papers and page.locator("#more-papers").is_hidden()
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        page.click('.facet-btn[data-facet="method"]')
        page.select_option("#rerank", "minl2")
        assert page.locator("#tau-label").is_hidden() and "no transport plan" in page.locator("#mode-help").inner_text()
        page.click("#search-btn")
        page.wait_for_selector("#results .hit")
        assert page.locator(".plan").count() == 0 and page.locator(".grid.dist").count() > 0
        tags = page.locator(".align-tag").all_inner_texts()
        assert tags and all("%" not in t and " · L2 " in t for t in tags)
        assert "%" not in page.locator("#legend").inner_text()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 420, f"the page is {width} px wide in a 420 px window"
        icon = page.request.get(page_server.url + "favicon.ico")
        assert icon.status == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert page.locator('link[rel="icon"]').get_attribute("href") == "/static/favicon.svg"
        assert errors == []


def test_pipeline_choice_and_each_hits_stage_scores(page_server):
    """The user picks the fused first stage and the best-passage re-ranker; each hit shows its stage scores."""
    with open_page(page_server, {"width": 1280, "height": 900}) as (page, errors):
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        for i in SELECTED:
            page.click(f'#query-sentences .sentence[data-index="{i}"]')
        page.select_option("#stages", "ann,bm25")
        page.select_option("#rerank", "maxpassage")
        assert "best window of sentences" in page.locator("#mode-help").inner_text()
        page.click("#search-btn")
        page.wait_for_selector("#results .hit .stage-score")
        expected = page_server.service.search({"paper_id": QUERY, "sentences": SELECTED, "k": 10,
                                               "stages": "ann,bm25", "rerank": "maxpassage"})
        hits = page.locator("#results .hit")
        assert hits.evaluate_all("ns => ns.map(n => n.dataset.id)") == [h["paper_id"] for h in expected["hits"]]
        for n, hit in enumerate(expected["hits"]):
            chips = hits.nth(n).locator(".stage-score")
            assert chips.evaluate_all("ns => ns.map(n => n.dataset.stage)") == list(hit["stages"])
            shown = [float(t.split()[-1]) for t in chips.all_inner_texts()]
            assert len(shown) == len(hit["stages"]) and all(abs(a - b) <= 6e-4 for a, b in zip(shown, hit["stages"].values()))
        assert "maxpassage" in expected["hits"][0]["stages"] and "ann" in expected["hits"][0]["stages"]
        assert "fused (dense + lexical)" in page.locator("#results-head").inner_text()
        assert errors == []


def test_page_reports_a_bad_request(page_server):
    """The page shows the server's 4xx message instead of failing silently."""
    with open_page(page_server) as (page, errors):
        status = page.evaluate("""async () => {
            const r = await fetch('/api/search', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                                   body: JSON.stringify({paper_id: 'no-such-paper', sentences: [0]})});
            return [r.status, (await r.json()).error];
        }""")
        assert status[0] == 404 and "unknown paper_id" in status[1]
        assert errors == []


@pytest.fixture(scope="module")
def cross_page_server(page_server, tiny_cross_encoder_dir):
    """The same index served with a (tiny, random) cross-encoder the page can add as its last stage."""
    from aspire.index.crossrerank import load_cross_stage
    from aspire.serve import ServiceHolder, make_server

    holder = ServiceHolder(page_server.holder.index_dir, ["rerank=minl2", "cross_top=8"],
                           cross_encoder=load_cross_stage(tiny_cross_encoder_dir, max_length=128))
    server = make_server(holder, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_cross_encoder_choice_only_when_loaded_and_its_scores_and_time(page_server, cross_page_server):
    with open_page(page_server) as (page, errors):  # no cross-encoder: no choice
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        assert page.locator("#rerank").is_visible() and page.locator("#cross-label").is_hidden()
        assert page.locator("#cross").input_value() == "off"
        assert errors == []
    with open_page(cross_page_server, {"width": 1280, "height": 900}) as (page, errors):
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        assert page.locator("#cross-label").is_visible() and page.locator("#cross").input_value() == "off"
        assert "top 8" in page.locator('#cross option[value="on"]').inner_text()
        for i in SELECTED:
            page.click(f'#query-sentences .sentence[data-index="{i}"]')
        page.select_option("#k", "5")
        page.select_option("#cross", "on")
        page.click("#search-btn")
        page.wait_for_selector("#results .hit .stage-score")
        expected = cross_page_server.service.search({"paper_id": QUERY, "sentences": SELECTED, "k": 5,
                                                     "rerank": "minl2", "cross_encoder": True})
        hits = page.locator("#results .hit")
        assert hits.evaluate_all("ns => ns.map(n => n.dataset.id)") == [h["paper_id"] for h in expected["hits"]]
        for n, hit in enumerate(expected["hits"]):
            chips = hits.nth(n).locator(".stage-score")
            assert chips.evaluate_all("ns => ns.map(n => n.dataset.stage)") == ["ann", "minl2", "crossencoder"]
            shown = float(chips.nth(2).inner_text().split()[-1])
            assert chips.nth(2).inner_text().startswith("cross-encoder ")
            assert abs(shown - hit["stages"]["crossencoder"]) <= 6e-4
        assert "of which cross-encoder" in page.locator("#status").inner_text()
        assert "cross-encoder re-scored the top 8" in page.locator("#results-head").inner_text()
        assert errors == []
