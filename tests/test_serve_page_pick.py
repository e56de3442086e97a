"""Two papers clicked in quick succession: the page shows the one clicked last, whichever answer comes last.

`pickPaper` showed every answer as it came: when the first paper's answer was slower than the second's, the page
ended on the first paper while the list marked the second as current."""

from __future__ import annotations

import threading

from serve_support import browser_page, encoder_fixture, index_fixture, needs_chromium, running  # noqa: F401 - fixtures

from aspire.serve import open_service


@needs_chromium
def test_the_paper_clicked_last_is_shown_when_an_earlier_answer_comes_later(index):
    service = open_service(index)
    answered = service.paper
    release = threading.Event()

    def slow_for_q(paper_id):
        if paper_id == "q":  # the first click's answer comes after the second's
            release.wait(10)
        return answered(paper_id)

    service.paper = slow_for_q
    with running(service) as srv, browser_page(srv) as page:
        page.click('.paper-item[data-id="q"]')
        page.click('.paper-item[data-id="a"]')
        page.wait_for_selector('#query-title:has-text("(a)")')
        with page.expect_response("**/api/paper?id=q"):
            release.set()
        page.wait_for_timeout(300)  # the late answer has been handled
        assert page.inner_text("#query-title").endswith("(a)")
        assert page.locator(".paper-item.current").evaluate_all("ns => ns.map(n => n.dataset.id)") == ["a"]
