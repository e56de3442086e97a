"""The page server's error messages, round 64 (a sweep of its request handling).

Fixed:
- a value cut short for an error message (`aspire.serve.requests._short`: `limit=`, an unknown field, an unknown
  rerank) could part a letter from its combining accent ("e" + U+0301 cut to a bare "e"), as could a query
  parameter's name (`aspire.serve.app._printable`) and the path of an unknown route; all cut with
  `aspire.text.cut_whole` now, the figures' cut (`aspire.viz`, moved so that the server need not load torch);
- a search whose `sentences` held one item that is not an integer (`[0, true]`) was refused as "got a list of 2",
  the list's length, which the rule allows: the message now names the item and its value.

Checked as they are (no change): negative, zero, huge or non-integer `k`, an empty selection, positions out of range,
an unknown paper id, unknown fields and non-object bodies are all refused with a 4xx naming the field; ids with HTML
in them come back as JSON text (the page writes no HTML from data).
"""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import quote

import pytest
from serve_support import encoder_fixture, index_fixture, request, running  # noqa: F401 (fixtures encoder, index)

from aspire.serve import ServiceHolder
from aspire.text import cut_whole

ACCENTED = "e\u0301"  # "é" as a letter and its combining acute accent


@pytest.fixture(scope="module")
def server(index):
    with running(ServiceHolder(index, ["k=3"])) as srv:
        yield srv


def _error(srv, method: str, path: str, body=None) -> tuple[int, str]:
    status, _, raw = request(srv, method, path, body)
    return status, json.loads(raw)["error"]


def test_cut_whole_keeps_a_letter_with_its_accents():
    assert cut_whole("ab" + ACCENTED + "c", 3) == "ab"  # text[3] is the accent: the "e" goes with it
    assert cut_whole("ab" + ACCENTED + "c", 4) == "ab" + ACCENTED
    assert cut_whole("abc", 2) == "ab"
    assert cut_whole("a\u0301\u0301", 1) == ""  # the letter and its marks do not fit: none of them
    assert cut_whole("abc", 10) == "abc"


def test_the_cut_helper_loads_without_torch():
    code = "import sys, aspire.text, aspire.serve.requests; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("method, path, body, want", [
    # `limit`'s value, cut to 40 characters: "'" + 37 letters + "e" was the 39 kept
    ("GET", "/api/papers?limit=" + quote("a" * 37 + ACCENTED + "x"), None, "got '" + "a" * 37 + "…"),
    ("POST", "/api/search", {"paper_id": "q", "sentences": [0], "rerank": "a" * 37 + ACCENTED + "x"},
     "unknown rerank '" + "a" * 37 + "…"),
    ("POST", "/api/search", {"paper_id": "q", "sentences": [0], "a" * 37 + ACCENTED + "x": 1},
     "unknown field(s) '" + "a" * 37 + "…"),
    # a query parameter's name, cut to 40 characters
    ("GET", "/api/info?" + quote("a" * 39 + ACCENTED + "x") + "=1", None,
     "unknown query parameter(s) '" + "a" * 39 + "'"),
    # an unknown route's path, cut to 100 characters
    ("GET", "/" + quote("a" * 98 + ACCENTED + "x"), None, "no such route '/" + "a" * 98 + "'"),
])
def test_a_value_cut_for_a_message_keeps_its_accented_letter_whole(server, method, path, body, want):
    status, message = _error(server, method, path, body)
    assert 400 <= status < 500
    assert want in message, message
    assert ACCENTED[1] not in message  # the letter went whole: no accent left behind either


@pytest.mark.parametrize("sentences, item, shown", [
    ([0, True], 1, "true"),
    (["0"], 0, "'0'"),
    ([0, 1, 1.5], 2, "1.5"),
    ([[0]], 0, "a list of 1"),
])
def test_a_selection_item_that_is_no_integer_is_named(server, sentences, item, shown):
    status, message = _error(server, "POST", "/api/search", {"paper_id": "q", "sentences": sentences})
    assert status == 400
    assert message.startswith("sentences must be ")
    assert f"its item {item} is {shown}, not an integer" in message, message
