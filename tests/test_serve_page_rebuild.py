"""The page open across a rebuild of its index lists the rebuilt index's papers.

The page noticed the new generation (its label, the index's counts read again) but kept the old paper list: papers
the index no longer held stayed listed (opening one answered "unknown paper_id"), the new ones were missing, and
"more papers" went on at the old list's offset into the new index's order, skipping the papers before it.
"""

from __future__ import annotations

from serve_support import PAPERS, browser_page, build_index, needs_chromium, running, wait_until

from aspire.data.papers import Paper
from aspire.encoders import load_encoder
from aspire.serve import ServiceHolder

NEW = [PAPERS[1], PAPERS[2], Paper("e", "evidence", ["we collect evidence.", "results improve."]),
       Paper("f", "features", ["features of a model.", "we show results."])]


@needs_chromium
def test_a_rebuild_noticed_by_the_page_lists_the_new_index_s_papers(tiny_model_dir, tmp_path):
    encoder = load_encoder(tiny_model_dir)
    index = build_index(encoder, PAPERS, tmp_path / "index", str(tiny_model_dir))
    holder = ServiceHolder(index, check_every=None)
    listed = "ns => ns.map(n => n.dataset.id)"
    with running(holder) as srv, browser_page(srv) as page:
        assert page.locator(".paper-item").evaluate_all(listed) == [p.paper_id for p in PAPERS]
        build_index(encoder, NEW, index, str(tiny_model_dir))
        assert holder.reload()["reloaded"]
        page.click('.paper-item[data-id="a"]')  # a paper of both: its answer names the new generation
        page.wait_for_selector("#generation.changed")
        wait_until(lambda: page.locator(".paper-item").evaluate_all(listed) == [p.paper_id for p in NEW],
                   "the page lists the rebuilt index's papers")
        assert page.inner_text("#paper-count") == "4 shown"
        assert page.locator(".paper-item.current").evaluate_all(listed) == ["a"]
        wait_until(lambda: page.inner_text("#index-info").startswith("4 papers"), "the page reads the new counts")
