"""The page's number fields take every value the server takes.

The temperature field was `step="0.1"` with `min` set to the server's smallest temperature (1e-06), which HTML makes
the step base: its valid values were 0.000001, 0.100001, ..., so the served default of 1 was `:invalid` (a step
mismatch, outlined red by browsers that mark invalid fields), and its arrows went from 1 to 1.000001, then 1.100001.
"""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

from serve_support import browser_page, encoder_fixture, index_fixture, needs_chromium, running  # noqa: F401 - fixtures

from aspire.serve import open_service

PAGE = Path(__file__).resolve().parents[1] / "aspire" / "serve" / "static" / "index.html"


class Inputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.inputs: dict[str, dict] = {}

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if tag == "input" and "id" in attrs:
            self.inputs[attrs["id"]] = attrs


def step_mismatch(value: float, attrs: dict, min_value: float | None) -> bool:
    """HTML's step rule for an <input type=number>: the step base is `min` when set; "any" takes every value."""
    step = attrs.get("step", "1")
    if step == "any":
        return False
    base = min_value if min_value is not None else float(attrs.get("min", 0))
    steps = (value - base) / float(step)
    return not math.isclose(steps, round(steps), abs_tol=1e-9)


def test_the_temperature_field_takes_the_served_temperatures_as_valid_values(index):
    parser = Inputs()
    parser.feed(PAGE.read_text(encoding="utf-8"))
    info = open_service(index).info()
    tau = parser.inputs["tau"]
    assert re.search(r'\$\("tau"\)\.min = info\.min_tau', (PAGE.parent / "app.js").read_text())  # the page sets it
    for value in (info["ot"]["tau"], 0.05, 0.25, 3.0, info["min_tau"], info["max_tau"]):
        assert not step_mismatch(value, tau, info["min_tau"]), (value, tau)


@needs_chromium
def test_the_temperature_field_is_valid_and_its_arrows_give_plain_numbers(index):
    service = open_service(index, ["rerank=ot"])
    with running(service) as srv, browser_page(srv) as page:
        page.click('.paper-item[data-id="q"]')
        page.wait_for_selector("#query-sentences .sentence")
        assert page.input_value("#tau") == "1"
        assert page.evaluate("document.getElementById('tau').validity.valid")
        page.focus("#tau")
        page.keyboard.press("ArrowUp")
        stepped = page.input_value("#tau")
        assert stepped in ("1.1", "2"), stepped  # once 1.000001
        page.click('#query-sentences .sentence[data-index="0"]')
        with page.expect_response("**/api/search") as sent:
            page.click("#search-btn")
        assert sent.value.status == 200 and json.loads(sent.value.request.post_data)["tau"] == float(stepped)
