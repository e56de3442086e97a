"""Round 61: aspire/viz.py against its docstrings: greyed unselected labels and a ranked list's head line."""

import textwrap

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from aspire.search import AlignedPair, Hit  # noqa: E402
from aspire.viz import MAX_WIDTH, MIN_LIST_WIDTH, UNSELECTED_COLOR, plot_distances, plot_plan, plot_ranked_list  # noqa: E402
from tests.test_reliability_round39_viz import _close  # noqa: E402, F401 (closes each test's figures)
from tests.test_viz import _rendered  # noqa: E402

SHA = "3dc4580a154df87f3a56aa3d16b00c5a935ebe15"  # a paper id of the reviewer-matching archives: 40 characters
TITLE = "Cite-seeing and Reviewing: A Study on Citation Bias in Peer Review and in the Conferences That Run It"


@pytest.mark.parametrize("draw", [plot_distances, plot_plan])
@pytest.mark.parametrize("show_query_texts", [True, False])
def test_unselected_query_labels_are_greyed_with_or_without_texts(draw, show_query_texts):
    """The module docstring: unselected query sentences have their labels greyed (the bare `q1` of
    show_query_texts=False was black)."""
    fig = draw(np.array([[0.2, 0.3], [0.1, 0.4]]), ["a", "b"], ["x", "y"], query_mask=[True, False],
               show_query_texts=show_query_texts)
    ticks = fig.axes[0].get_yticklabels()
    assert [t.get_text().split(" ")[0] for t in ticks] == ["q0", "q1"]
    assert [to_hex(t.get_color()) for t in ticks] == ["#000000", UNSELECTED_COLOR]


@pytest.mark.parametrize("width", [100, 80])
def test_a_long_paper_id_leaves_its_title_what_the_head_line_has_left(width):
    """A 40-character id ran the head line (title cut to width - 35 whatever the id) 31 characters past `width`, and
    its grade past the right edge of a figure that should fit a screen."""
    pair = AlignedPair(1, 2, 0.5, 0.25, "we study citation bias " * 8, "reviewers cite " * 12)
    hits = [Hit(12, SHA, TITLE, -12.345, [pair]), Hit(13, "P13", TITLE, -12.5, [pair])]
    fig = plot_ranked_list(hits, grades={SHA: 3, "P13": 1}, width=width)
    heads = [t.get_text() for t in fig.axes[0].texts if t.get_text()[:3] in ("12.", "13.")]
    assert len(heads) == 2
    for head in heads:
        assert len(head) <= width, head
        assert "[...]" in head, head
    for head, start, grade in zip(heads, (f"12. -12.345  {SHA}  ", "13. -12.500  P13  "), ("  [grade 3]", "  [grade 1]")):
        # the title gets the room the rest leaves: a short id leaves it more than a fixed width - 35
        assert head == start + textwrap.shorten(TITLE, width - len(start) - len(grade)) + grade
    pixels, _ = _rendered(fig)
    assert pixels <= 1.05 * 100 * MAX_WIDTH, f"{pixels} px wide"


def test_an_id_too_long_for_the_width_still_draws_its_head_line():
    """Where the id leaves the title no room, the title is cut to shorten's placeholder (not an error)."""
    fig = plot_ranked_list([Hit(1, SHA * 2, TITLE, -0.5, [])], grades={SHA * 2: 2}, width=MIN_LIST_WIDTH)
    assert fig.axes[0].texts[0].get_text() == f"1. -0.500  {SHA * 2}  [...]  [grade 2]"
