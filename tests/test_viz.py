"""aspire.viz: alignment numbers behind the plots, and what the plots draw (texts, outlined pair, plan)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from aspire.batch import DocBatch  # noqa: E402
from aspire.search import AlignedPair, Hit  # noqa: E402
from aspire.viz import (  # noqa: E402
    FONT,
    MAX_ANNOTATED_COLUMNS,
    MAX_WIDTH,
    PAIR_COLOR,
    UNSELECTED_COLOR,
    pair_alignment,
    plot_alignment,
    plot_distances,
    plot_grades_by_rank,
    plot_plan,
    plot_ranked_list,
    sentence_label,
)

Q_TEXTS = ["we study graphs", "we propose a parser", "it is fast"]
C_TEXTS = ["parsing is hard", "our parser is new", "graphs are big", "results are good"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def batches(selection=None):
    g = torch.Generator().manual_seed(0)
    q = DocBatch.from_list([torch.randn(3, 5, generator=g)], ["Q"], [Q_TEXTS])
    c = DocBatch.from_list([torch.randn(4, 5, generator=g)], ["C"], [C_TEXTS])
    return (q if selection is None else q.select_sentences([selection])), c


def test_pair_alignment_matches_brute_force():
    q, c = batches([0, 2])
    al = pair_alignment(q, c, [{"eps": 0.05}, {"eps": 1.0}])
    brute = torch.cdist(q.emb[0], c.emb[0]).numpy()  # (3, 4), every query row
    np.testing.assert_allclose(al.cost, brute, atol=1e-5)
    sel = np.array([0, 2])
    i, j = np.unravel_index(np.argmin(brute[sel]), (2, 4))
    assert al.pair == (int(sel[i]), int(j))
    assert al.minl2_dist == pytest.approx(brute[sel[i], j], abs=1e-5)
    assert al.query_mask.tolist() == [True, False, True]
    assert al.query_texts == Q_TEXTS and al.cand_texts == C_TEXTS
    for view in al.plans:
        assert view.plan.shape == (3, 4)
        assert view.plan.sum() == pytest.approx(1.0, abs=1e-3)
        assert np.all(view.plan[1] == 0)  # the unselected sentence carries no mass
        assert view.dist == pytest.approx(float((view.plan * al.cost).sum()), rel=1e-4)
    # a larger entropic regularisation spreads the plan: more cells carry mass
    sharp, smooth = (np.count_nonzero(v.plan > 1e-3) for v in al.plans)
    assert smooth > sharp


def test_pair_alignment_refuses_batches():
    q, c = batches()
    with pytest.raises(ValueError, match="one query and one candidate"):
        pair_alignment(DocBatch.concat([q, q]), c)
    with pytest.raises(ValueError, match="at least one OT setting"):
        pair_alignment(q, c, [])


def test_distance_heatmap_has_texts_and_outlines_the_single_match():
    q, c = batches([0, 2])
    al = pair_alignment(q, c)
    fig = plot_distances(al.cost, al.query_texts, al.cand_texts, pair=al.pair, query_mask=al.query_mask,
                         query_labels=[None, "method_label", None])
    ax = fig.axes[0]
    ylabels = [t.get_text() for t in ax.get_yticklabels()]
    assert ylabels[0].startswith("q0 we study graphs")
    assert ylabels[1].startswith("q1 [method] we propose")
    assert to_hex(ax.get_yticklabels()[1].get_color()) == UNSELECTED_COLOR
    assert to_hex(ax.get_yticklabels()[0].get_color()) != UNSELECTED_COLOR
    xlabels = [t.get_text().replace("\n", " ") for t in ax.get_xticklabels()]
    assert [x.split(" ", 1)[1] for x in xlabels] == C_TEXTS
    np.testing.assert_allclose(ax.images[0].get_array(), al.cost)
    outlined = [p for p in ax.patches if isinstance(p, Rectangle) and to_hex(p.get_edgecolor()) == PAIR_COLOR]
    assert len(outlined) == 1
    i, j = al.pair
    assert outlined[0].get_xy() == (j - 0.5, i - 0.5)
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert [p.get_xy()[1] for p in hatched] == [0.5]  # only the unselected row q1


def test_plan_heatmap_shows_mass_in_percent():
    q, c = batches()
    al = pair_alignment(q, c, [{"eps": 0.1}])
    fig = plot_plan(al.plans[0].plan, al.query_texts, al.cand_texts)
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), 100 * al.plans[0].plan)
    shown = [t for t in fig.axes[0].texts]
    assert len(shown) == int((100 * al.plans[0].plan >= 0.5).sum())


def test_plot_alignment_one_panel_per_plan():
    q, c = batches([1])
    al = pair_alignment(q, c, [{"eps": 0.05}, {"eps": 0.5, "tau": 10.0}])
    fig = plot_alignment(al)
    images = [ax for ax in fig.axes if ax.images]
    assert len(images) == 3
    assert "single match q1-c" in images[0].get_title()
    assert "eps=0.5, tau=10.0" in images[2].get_title()
    with pytest.raises(ValueError, match="texts"):
        plot_distances(al.cost, al.query_texts[:2], al.cand_texts)
    with pytest.raises(ValueError, match=f"1 query labels for the matrix's {len(al.query_texts)} query sentences"):
        plot_alignment(al, query_labels=["method_label"])  # once an IndexError from inside matplotlib's drawing
    one = pair_alignment(q, c, {"eps": 0.5, "tau": 10.0})  # one setting alone, not in a list: once a TypeError
    assert [v.settings for v in one.plans] == [{"eps": 0.5, "tau": 10.0}]


def test_ranked_list_lists_hits_and_aligned_sentences():
    hits = [Hit(1, "P1", "A parser", -0.4, [AlignedPair(1, 2, 0.4, 0.9, "we propose a parser", "our parser")]),
            Hit(2, "P2", "Graphs", -0.7, [AlignedPair(0, 0, 0.7, 1.0, "we study graphs", "graphs are big")])]
    fig = plot_ranked_list(hits, grades={"P1": 3})
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts[0].startswith("1. -0.400  P1  A parser") and texts[0].endswith("[grade 3]")
    assert "q1 -> s2" in texts[1] and texts[2] == "q: we propose a parser" and texts[3] == "s: our parser"
    assert texts[4].startswith("2. -0.700  P2") and "grade" not in texts[4]
    assert [t.get_text() for t in plot_ranked_list([]).axes[0].texts] == ["no hits"]


def test_grades_by_rank_counts_relevant():
    fig = plot_grades_by_rank({"method": [3, 0, 2, None], "result": [0, 1]})
    ax = [a for a in fig.axes if a.images][0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["method  (2 with grade >= 2)", "result  (0 with grade >= 2)"]
    grid = ax.images[0].get_array()
    assert grid.shape == (2, 4) and bool(grid.mask[0, 3]) and bool(grid.mask[1, 2])


def test_sentence_label_wraps_and_cuts():
    label = sentence_label("q", 4, "word " * 40, width=20, lines=2, facet="result")
    lines = label.split("\n")
    assert lines[0].startswith("q4 [result]") and len(lines) == 2 and lines[1].endswith("…")
    assert all(len(line) <= 20 for line in lines)


WORDS = "relational similarity between pairs of words is measured by latent analysis of the patterns in a corpus".split()


def _long_texts(n: int, seed: int) -> list[str]:
    return [" ".join(WORDS[(seed + i) % 7:] + WORDS[: (seed + i) % 7]) for i in range(n)]


def _rendered(fig) -> tuple[int, list[float]]:
    """Width in pixels as a notebook shows it (100 dpi, tight box), and the size of every visible text."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    width = int.from_bytes(buf.getvalue()[16:20], "big")
    return width, [t.get_fontsize() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]


@pytest.mark.parametrize("T", [4, 12, 30])
def test_figures_fit_a_screen_and_no_text_is_small(T):
    g = torch.Generator().manual_seed(T)
    q = DocBatch.from_list([torch.randn(12, 5, generator=g)], ["Q"], [_long_texts(12, 0)]).select_sentences([[5, 9]])
    c = DocBatch.from_list([torch.randn(T, 5, generator=g)], ["C"], [_long_texts(T, 3)])
    al = pair_alignment(q, c, [{"tau": 0.5}, {"tau": 5000.0}])
    pairs = [AlignedPair(5, 1, 0.9, 0.5, " ".join(WORDS * 3), " ".join(WORDS * 3))]
    figs = [plot_alignment(al, title="a long title " * 4),
            plot_distances(al.cost, al.query_texts, al.cand_texts, pair=al.pair, query_mask=al.query_mask),
            plot_plan(al.plans[0].plan, al.query_texts, al.cand_texts, rows=[5, 9]),
            plot_ranked_list([Hit(r, f"P{r}", " ".join(WORDS * 2), -0.5, pairs) for r in range(1, 6)]),
            plot_grades_by_rank({name: [3, 0, 2, 1] * (T // 2) for name in ("all sentences", "method", "result")})]
    for fig in figs:
        assert fig.get_size_inches()[0] <= MAX_WIDTH
        width, sizes = _rendered(fig)
        assert width <= 1.05 * 100 * MAX_WIDTH, f"{width} px wide"
        assert sizes and min(sizes) >= FONT
    numbers = [t for t in figs[1].axes[0].texts]
    assert len(numbers) == (2 * T if T <= MAX_ANNOTATED_COLUMNS else 0)  # the two selected rows, when they fit


def test_plan_rows_draw_only_the_chosen_query_sentences():
    q, c = batches([0, 2])
    al = pair_alignment(q, c)
    fig = plot_plan(al.plans[0].plan, al.query_texts, al.cand_texts, query_mask=al.query_mask, rows=[0, 2])
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.images[0].get_array(), 100 * al.plans[0].plan[[0, 2]])
    assert [t.get_text().split(" ")[0] for t in ax.get_yticklabels()] == ["q0", "q2"]
    fig = plot_alignment(al)
    panels = [a for a in fig.axes if a.images]
    assert [a.images[0].get_array().shape[0] for a in panels] == [3, 2]  # distances: every row; plan: the selected
