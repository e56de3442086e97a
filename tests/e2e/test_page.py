"""End to end: the aspect-selection page in headless Chromium against a small CSFCube index (minilm).

At desktop size (1400 x 900): picks a paper, selects two of its sentences (one by mouse, one by
keyboard), searches, and checks the ranked list, the highlighted sentences, their facet chips and the
legend against the server's own answer; every column is one scroll container; a refused search says why
beside the Search button, in view, and greys out the old results; at a low temperature the tags, shades
and weights are those of the transport plan drawn. At phone size (390 x 844), over the same index served
without facet labels: no facet control, the filter takes words in any order and id prefixes, the page
scrolls to what changed, a field the server would refuse is refused with its label, twelve rapid clicks
send one request, titles never break mid-word, results of a previous selection or paper are marked or
cleared. Then the single-match mode, "more papers" (a double click adds nothing twice), the pipeline
choice, the cross-encoder and the favicon. Saves screenshots (to the test's temporary folder, or to
docs/screenshot.png and docs/screenshot-phone.png when ASPIRE_UPDATE_SCREENSHOT=1).
Needs Debian's `chromium` (driven through playwright's Python package, which never downloads a
browser here: the system binary is passed as `executable_path`); skips when it is absent. One browser
serves the module; each test opens its own context.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
QUERY = "2468783"  # CSFCube query "Similarity of Semantic Relations" (method and result facets)
SELECTED = [5, 9]  # its two method sentences
N_CANDIDATES = 40  # with the query, more papers than the page lists at once (30)
NO_WEIGHT = 0.0005  # app.js: a row with less of the plan's weight carries "no weight"
DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> str | None:
    return os.environ.get("ASPIRE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(chromium_path() is None,
                       reason="headless Chromium not installed (apt-get install -y chromium)"),
]


def serve(holder_or_service):
    from aspire.serve import make_server

    server = make_server(holder_or_service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


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
    from aspire.serve import ServiceHolder

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
    server = serve(ServiceHolder(root / "index", ["rerank=ot"], root / "papers.jsonl"))
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def unlabelled_server(page_server):
    """The same index and searcher served without facet labels (as an index built from unlabelled papers)."""
    from aspire.serve import SearchService

    service = page_server.service
    server = serve(SearchService(service.searcher, {}, service.generation))
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@contextlib.contextmanager
def open_page(browser, server, viewport=None):
    """The page in its own browser context, its list of papers loaded: yields (page, uncaught page errors)."""
    context = browser.new_context(viewport=viewport or {"width": 1280, "height": 800})
    try:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.url)
        page.wait_for_selector(".paper-item")
        yield page, errors
    finally:
        context.close()


def screenshot_path(tmp_path, name: str) -> Path:
    return DOCS / name if os.environ.get("ASPIRE_UPDATE_SCREENSHOT") == "1" else tmp_path / name


def pick(page, paper_id=QUERY, sentences=SELECTED):
    page.click(f'.paper-item[data-id="{paper_id}"]')
    page.wait_for_selector(f'#query-title:has-text("({paper_id})")')
    for i in sentences:
        page.click(f'#query-sentences .sentence[data-index="{i}"]')


def search_and_wait(page):
    """Click Search and wait for the answer to be drawn (the button says Search again)."""
    page.click("#search-btn")
    page.wait_for_selector('#search-btn[aria-busy="false"]')
    page.wait_for_selector("#results .hit")


def in_viewport(page, selector) -> bool:
    box = page.locator(selector).bounding_box()
    size = page.viewport_size
    return box is not None and box["height"] > 0 and 0 <= box["y"] and box["y"] + box["height"] <= size["height"]


def beside_search_button(page) -> bool:
    """The status line is in view and next to the Search button (on its row, or the row under it)."""
    status, button = page.locator("#status").bounding_box(), page.locator("#search-btn").bounding_box()
    return in_viewport(page, "#status") and abs(status["y"] - button["y"]) <= 1.5 * button["height"] + 12


def pct(share: float) -> str:  # app.js's pct()
    p = 100 * share
    return f"{math.floor(p + 0.5)} %" if p >= 0.995 else f"{p:.1f} %"


def plan_reading(hit: dict) -> tuple[np.ndarray, np.ndarray]:
    """(weight per row (n,), share of each row's weight per cell (n, T)) of a hit's transport plan."""
    plan = np.array(hit["plan"], dtype=float)
    mass = plan.sum(1)
    return mass / plan.sum(), plan / np.where(mass > 0, mass, 1.0)[:, None]


def assert_shows_the_plan(card, hit: dict, rows: list[int]) -> int:
    """The card's tags, cell shares and weights are the server's plan read one way; returns the number of
    rows without weight (no tag, a note naming them)."""
    weight, share = plan_reading(hit)
    cells = card.locator(".plan tr[data-row]").evaluate_all(
        "trs => trs.map(tr => [...tr.querySelectorAll('td[data-share]')].map(td => Number(td.dataset.share)))")
    np.testing.assert_allclose(np.array(cells), share, atol=1e-4)
    shown_weight = card.locator(".plan td.weight").evaluate_all("ns => ns.map(n => Number(n.dataset.weight))")
    np.testing.assert_allclose(shown_weight, weight, atol=1e-6)
    tags = card.locator(".align-tag").evaluate_all(
        "ns => ns.map(n => [Number(n.dataset.row), Number(n.closest('.hit-sentence').dataset.index), n.textContent])")
    want = [[r, int(np.argmax(share[r])), f"q{q} {pct(share[r].max())}"]
            for r, q in enumerate(rows) if weight[r] >= NO_WEIGHT]
    assert sorted(tags) == sorted(want)
    unweighted = [f"q{q}" for r, q in enumerate(rows) if weight[r] < NO_WEIGHT]
    note = card.locator(".no-weight-note")
    if unweighted:
        assert note.inner_text().startswith(", ".join(unweighted) + ": no weight")
        assert card.locator(".plan td.unweighted").count() == len(unweighted) * len(hit["sentences"])
    else:
        assert note.count() == 0
    return len(unweighted)


def test_desktop_search_explains_hits_with_the_plan_drawn(page_server, browser, tmp_path):
    with open_page(browser, page_server, DESKTOP) as (page, errors):
        visible = page.locator(".paper-item").evaluate_all(
            "ns => ns.filter(n => n.getBoundingClientRect().bottom <= window.innerHeight).length")
        assert visible >= 8, f"only {visible} papers in view at 1400 x 900"  # the old 180-px box: 5
        page.fill("#paper-filter", "relations semantic")  # words in any order
        page.wait_for_selector('#paper-count:not(:has-text("more match"))')  # the filtered list
        titles = page.locator(".paper-item .ptitle").all_inner_texts()
        assert QUERY in page.locator(".paper-item").evaluate_all("ns => ns.map(n => n.dataset.id)")
        assert titles and all("semantic" in t.lower() and "relations" in t.lower() for t in titles)
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        labels = page.locator("#query-sentences .sentence .facet").all_inner_texts()
        assert labels[SELECTED[0]] == "method" and labels[SELECTED[1]] == "method"
        assert page.locator(".facet-btn:visible").count() >= 2
        assert "Select at least one sentence" in page.locator("#status").inner_text()
        page.click(f'#query-sentences .sentence[data-index="{SELECTED[0]}"]')  # by mouse
        page.focus(f'#query-sentences .sentence[data-index="{SELECTED[1]}"]')  # by keyboard
        page.keyboard.press("Space")
        selected = page.locator("#query-sentences .sentence.selected")
        assert [int(x) for x in selected.evaluate_all("ns => ns.map(n => n.dataset.index)")] == SELECTED
        assert selected.evaluate_all("ns => ns.map(n => n.getAttribute('aria-checked'))") == ["true", "true"]

        # one scroll container a column: nothing inside a column scrolls vertically on its own, and the
        # last sentence and the mode help can be reached (above the Search panel kept in view)
        nested = page.evaluate("""() => [...document.querySelectorAll('main *')].filter(n => {
            const s = getComputedStyle(n);
            return !n.classList.contains('col') && ['auto', 'scroll'].includes(s.overflowY)
              && n.scrollHeight > n.clientHeight + 1; }).map(n => n.id || n.className)""")
        assert nested == []
        page.locator("#query-col").evaluate("n => { n.scrollTop = n.scrollHeight; }")
        last = page.locator("#query-sentences .sentence").last.bounding_box()
        help_box, bar = page.locator("#mode-help").bounding_box(), page.locator("#search-row").bounding_box()
        assert last["y"] + last["height"] <= help_box["y"] and help_box["y"] + help_box["height"] <= bar["y"] + 1
        assert in_viewport(page, "#search-row")

        page.select_option("#k", "5")
        search_and_wait(page)
        expected = page_server.service.search({"paper_id": QUERY, "sentences": SELECTED, "k": 5, "rerank": "ot"})
        hits = page.locator("#results .hit")
        assert hits.count() == 5
        shown_ids = hits.evaluate_all("ns => ns.map(n => n.dataset.id)")
        assert shown_ids == [h["paper_id"] for h in expected["hits"]] and QUERY not in shown_ids
        for n, hit in enumerate(expected["hits"]):
            card = hits.nth(n)
            assert card.locator(".hit-title").inner_text() == hit["title"]
            assert card.locator(".plan th.qlabel").all_inner_texts() == [f"q{i}" for i in SELECTED]
            assert card.locator(".plan td[data-share]").count() == len(SELECTED) * len(hit["sentences"])
            assert_shows_the_plan(card, hit, SELECTED)
            chips = card.locator(".hit-sentence .facet").all_inner_texts()
            assert chips and set(chips) <= {"background", "method", "result", "other"}
        assert page.locator("#status").inner_text().startswith("5 papers in") and beside_search_button(page)
        assert page.locator("#legend .legend-q").all_inner_texts() == [f"q{i}" for i in SELECTED]
        assert "facets" in page.locator("#legend").inner_text()
        help_text = page.locator("#mode-help").inner_text()
        assert "Temperature: low" in help_text and help_text not in page.locator("#results-col").inner_text()
        assert "minus a distance" in page.locator("#results-head").inner_text()
        gen = page_server.service.generation
        assert gen and page.locator("#generation").inner_text() == f"index {gen}"
        page.locator("#query-sentences .sentence.selected").first.evaluate("n => n.scrollIntoView({block: 'start'})")
        shot = screenshot_path(tmp_path, "screenshot.png")
        shot.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 20_000

        # a search the server refuses: its message beside the button, in view; the old results greyed out
        page.route("**/api/search", lambda route: route.fulfill(
            status=400, content_type="application/json", body=json.dumps({"error": "refused for the test"})))
        page.click("#search-btn")
        page.wait_for_selector("#status.error")
        assert page.locator("#status").inner_text() == "refused for the test" and beside_search_button(page)
        assert "stale" in page.locator("#results").get_attribute("class") and page.locator("#stale-note").is_visible()
        page.unroute("**/api/search")

        # a low temperature: most rows of a plan carry no weight; what is shown is still the plan drawn
        page.fill("#tau", "0.01")
        page.press("#tau", "Enter")  # Enter in the field searches
        page.wait_for_selector('#search-btn[aria-busy="false"]')
        page.wait_for_selector('#results-head:has-text("temperature 0.01")')
        assert "stale" not in page.locator("#results").get_attribute("class")
        low = page_server.service.search({"paper_id": QUERY, "sentences": SELECTED, "k": 5, "rerank": "ot", "tau": 0.01})
        assert hits.evaluate_all("ns => ns.map(n => n.dataset.id)") == [h["paper_id"] for h in low["hits"]]
        unweighted = sum(assert_shows_the_plan(hits.nth(n), hit, SELECTED) for n, hit in enumerate(low["hits"]))
        assert unweighted > 0  # the case of the issue: a sentence without weight is said to have none
        assert errors == []


def test_phone_without_facet_labels_feedback_in_view_and_no_stale_results(unlabelled_server, browser, tmp_path):
    with open_page(browser, unlabelled_server, PHONE) as (page, errors):
        searches = []
        page.on("request", lambda r: searches.append(r.url) if r.url.endswith("/api/search") else None)
        page.fill("#paper-filter", QUERY[:5])  # the start of an id
        page.wait_for_selector('#paper-count:not(:has-text("more match"))')  # the filtered list
        assert page.locator(".paper-item").first.get_attribute("data-id") == QUERY
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        assert in_viewport(page, "#select-head")  # scrolled to the sentences
        assert page.locator(".facet-btn:visible").count() == 0 and page.locator("#select-all").is_visible()
        assert page.locator("#search-btn").is_disabled()
        assert page.locator("#status").inner_text() == "Select at least one sentence to search."
        for i in SELECTED:
            page.click(f'#query-sentences .sentence[data-index="{i}"]')

        # fields the server would refuse: refused here with their labels, nothing replaced, nothing sent
        for field, value, message in [("#tau", "0", "Temperature 0 is out of range: use a number from 0.000001"),
                                      ("#tau", "", "Temperature is empty"),
                                      ("#shortlist", "-5", "Shortlist -5 is out of range: use a whole number from 10")]:
            page.fill(field, value)
            page.click("#search-btn")
            assert page.locator("#status").inner_text().startswith(message)
            assert beside_search_button(page) and page.locator(field).get_attribute("aria-invalid") == "true"
            page.fill(field, {"#tau": "1", "#shortlist": "1000"}[field])
        assert searches == []

        page.locator("#search-btn").evaluate("b => { for (let i = 0; i < 12; i++) b.click(); }")  # rapid clicks
        page.wait_for_selector('#search-btn[aria-busy="false"]')
        page.wait_for_selector("#results .hit")
        assert len(searches) == 1
        assert page.locator("#results .hit").first.bounding_box()["y"] < PHONE["height"] / 2  # scrolled to results
        assert "facets" not in page.locator("#legend").inner_text()
        page.screenshot(path=str(screenshot_path(tmp_path, "screenshot-phone.png")))

        # no word of a title broken across lines, grid headers on one line, id and score under the title
        broken = page.evaluate("""() => {
            const out = [];
            for (const node of document.querySelectorAll('.hit-title, .grid th')) {
              const text = node.firstChild;
              if (!text || text.nodeType !== 3) continue;
              for (const m of text.textContent.matchAll(/\\S+/g)) {
                const range = document.createRange();
                range.setStart(text, m.index);
                range.setEnd(text, m.index + m[0].length);
                const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                if (lines.size > 1) out.push(m[0]);
              }
            }
            return out; }""")
        assert broken == []
        title, meta = page.locator(".hit-title").first.bounding_box(), page.locator(".hit-meta").first.bounding_box()
        assert meta["y"] >= title["y"] + title["height"] - 1
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]

        # results of another selection are marked; of another paper, cleared
        page.click("#clear-selection")
        assert "stale" in page.locator("#results").get_attribute("class")
        assert page.locator("#stale-note").inner_text().startswith("Out of date: these results are for q5, q9")
        page.click(f'#query-sentences .sentence[data-index="{SELECTED[0]}"]')
        page.click(f'#query-sentences .sentence[data-index="{SELECTED[1]}"]')
        assert "stale" not in page.locator("#results").get_attribute("class")  # the selection searched again
        page.fill("#paper-filter", "")
        page.wait_for_selector('#paper-count:has-text("more match")')
        other = page.locator(f'.paper-item:not([data-id="{QUERY}"])').first.get_attribute("data-id")
        page.click(f'.paper-item[data-id="{other}"]')
        page.wait_for_selector(f'#query-title:has-text("({other})")')
        assert page.locator("#results .hit").count() == 0 and page.locator("#legend").is_hidden()
        assert QUERY in page.locator("#results-head").inner_text()
        assert errors == []


def test_single_match_mode_more_papers_narrow_window_and_favicon(page_server, browser):
    """Min-L2 answers show nearest sentences with distances (no plan, no percentage); every paper is
    reachable from the list, each once even after a double click; at 420 px nothing is wider than the
    window; the favicon is served."""
    with open_page(browser, page_server, {"width": 420, "height": 900}) as (page, errors):
        assert page.locator(".paper-item").count() == 30
        page.locator("#more-papers").evaluate("b => { b.click(); b.click(); }")  # a double click
        page.locator(".paper-item").nth(30).wait_for()  # a selector, not a script: the page's CSP forbids eval
        page.wait_for_load_state("networkidle")
        n_papers = page_server.service.index.n_papers
        ids = page.locator(".paper-item").evaluate_all("ns => ns.map(n => n.dataset.id)")
        assert len(ids) == len(set(ids)) == n_papers and page.locator("#more-papers").is_hidden()
        assert page.locator("#paper-count").inner_text() == f"{n_papers} shown"
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        page.click('.facet-btn[data-facet="method"]')
        page.select_option("#rerank", "minl2")
        assert page.locator("#tau-label").is_hidden() and "minus that distance" in page.locator("#mode-help").inner_text()
        search_and_wait(page)
        assert page.locator(".plan").count() == 0 and page.locator(".grid.dist").count() > 0
        tags = page.locator(".align-tag").all_inner_texts()
        assert tags and all("%" not in t and " · " in t for t in tags)
        assert "%" not in page.locator("#legend").inner_text()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 420, f"the page is {width} px wide in a 420 px window"
        icon = page.request.get(page_server.url + "favicon.ico")
        assert icon.status == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert page.locator('link[rel="icon"]').get_attribute("href") == "/static/favicon.svg"
        assert errors == []


def searched_as_the_service(page, server, body: dict):
    """Click Search; the hits the page shows, and the service's own answer to the same request (`body` on top
    of the picked paper and selection), whose order the page must show."""
    page.click("#search-btn")
    page.wait_for_selector("#results .hit .stage-score")
    expected = server.service.search({"paper_id": QUERY, "sentences": SELECTED, **body})
    hits = page.locator("#results .hit")
    assert hits.evaluate_all("ns => ns.map(n => n.dataset.id)") == [h["paper_id"] for h in expected["hits"]]
    return hits, expected


def test_pipeline_choice_and_each_hits_stage_scores(page_server, browser):
    """The user picks the fused first stage and the best-passage re-ranker; each hit shows its stage scores."""
    with open_page(browser, page_server, {"width": 1280, "height": 900}) as (page, errors):
        pick(page)
        page.select_option("#stages", "ann,bm25")
        page.select_option("#rerank", "maxpassage")
        assert "best run of consecutive sentences" in page.locator("#mode-help").inner_text()
        hits, expected = searched_as_the_service(page, page_server, {"k": 10, "stages": "ann,bm25",
                                                                     "rerank": "maxpassage"})
        for n, hit in enumerate(expected["hits"]):
            chips = hits.nth(n).locator(".stage-score")
            assert chips.evaluate_all("ns => ns.map(n => n.dataset.stage)") == list(hit["stages"])
            shown = [float(t.split()[-1]) for t in chips.all_inner_texts()]
            assert len(shown) == len(hit["stages"]) and all(abs(a - b) <= 6e-4 for a, b in zip(shown, hit["stages"].values()))
        assert "maxpassage" in expected["hits"][0]["stages"] and "ann" in expected["hits"][0]["stages"]
        assert "fused (dense + lexical)" in page.locator("#results-head").inner_text()
        assert errors == []


@pytest.fixture(scope="module")
def cross_page_server(page_server, tiny_cross_encoder_dir):
    """The same index served with a (tiny, random) cross-encoder the page can add as its last stage."""
    from aspire.retrieval.crossencoder import load_cross_stage
    from aspire.serve import ServiceHolder

    server = serve(ServiceHolder(page_server.holder.index_dir, ["rerank=minl2", "cross_top=8"],
                                 cross_encoder=load_cross_stage(tiny_cross_encoder_dir, max_length=128)))
    yield server
    server.shutdown()
    server.server_close()


def test_cross_encoder_choice_only_when_loaded_and_its_scores_and_time(page_server, cross_page_server, browser):
    with open_page(browser, page_server) as (page, errors):  # no cross-encoder: no choice
        page.click(f'.paper-item[data-id="{QUERY}"]')
        page.wait_for_selector('#query-sentences .sentence[data-index="0"]')
        assert page.locator("#rerank").is_visible() and page.locator("#cross-label").is_hidden()
        assert page.locator("#cross").input_value() == "off"
        assert errors == []
    with open_page(browser, cross_page_server, {"width": 1280, "height": 900}) as (page, errors):
        pick(page)
        assert page.locator("#cross-label").is_visible() and page.locator("#cross").input_value() == "off"
        assert "top 8" in page.locator('#cross option[value="on"]').inner_text()
        page.select_option("#k", "5")
        page.select_option("#cross", "on")
        assert "Cross-encoder (last stage)" in page.locator("#mode-help").inner_text()
        hits, expected = searched_as_the_service(page, cross_page_server, {"k": 5, "rerank": "minl2",
                                                                           "cross_encoder": True})
        for n, hit in enumerate(expected["hits"]):
            chips = hits.nth(n).locator(".stage-score")
            assert chips.evaluate_all("ns => ns.map(n => n.dataset.stage)") == ["ann", "minl2", "crossencoder"]
            shown = float(chips.nth(2).inner_text().split()[-1])
            assert chips.nth(2).inner_text().startswith("cross-encoder ")
            assert abs(shown - hit["stages"]["crossencoder"]) <= 6e-4
        assert "of which cross-encoder" in page.locator("#status").inner_text()
        assert "cross-encoder re-scored the top 8" in page.locator("#results-head").inner_text()
        assert errors == []
