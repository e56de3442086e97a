"""Round 47: aspire/viz.py against numpy brute force, aspire.scoring's OT scorer and its own docstrings."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from aspire.batch import DocBatch  # noqa: E402
from aspire.scoring import get_scorer  # noqa: E402
from aspire.viz import pair_alignment, plot_alignment, plot_distances, plot_plan, sentence_label  # noqa: E402
from tests.test_reliability_round39_viz import _close  # noqa: E402, F401 (closes each test's figures)
from tests.test_reliability_round39_viz import _pair as _pair39  # noqa: E402


def _pair(S, T, mask=None, seed=0, texts=None):
    """Round 39's query and candidate (float64), the query's sentence texts replaced by `texts` where given."""
    q, c = _pair39(S, T, mask=mask, seed=seed)
    return (q if texts is None else DocBatch(q.emb, q.mask, q.paper_ids, [list(texts)])), c


def test_single_match_is_the_brute_force_over_selected_query_sentences():
    q, c = _pair(4, 3, mask=[False, True, False, True], seed=3)
    al = pair_alignment(q, c)
    qe, ce = q.emb[0].numpy(), c.emb[0].numpy()
    best = min((float(np.sqrt(((qe[i] - ce[j]) ** 2).sum())), i, j) for i in (1, 3) for j in range(3))
    assert al.pair == (best[1], best[2])
    assert al.minl2_dist == pytest.approx(best[0], abs=1e-12)


def test_generator_of_ot_settings_gives_one_plan_each():
    # a generator was consumed by the argument checks: no plan at all, no error
    q, c = _pair(3, 2, mask=[True, False, True])
    al = pair_alignment(q, c, (dict(eps=e) for e in (0.05, 0.1)))
    assert [v.settings for v in al.plans] == [{"eps": 0.05}, {"eps": 0.1}]
    for view in al.plans:
        match = get_scorer("ot", **view.settings).pairwise_dist_details(q, c)
        np.testing.assert_array_equal(view.plan, match.plan[0].numpy())
        assert view.dist == float(match.dist[0])
        assert view.plan[1].sum() == 0  # the unselected query sentence carries no mass
        assert view.plan.sum() == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("draw", ["plan", "distances"])
def test_annotation_colour_follows_the_cell_colour(draw):
    # a 1x1 plan's "100" (and a 1x1 distance) was written in black on the darkest colour of the map
    if draw == "plan":
        fig = plot_plan(np.ones((1, 1)), ["a"], ["b"])
    else:
        fig = plot_distances(np.full((1, 1), 0.3), ["a"], ["b"])
    texts = fig.axes[0].texts
    assert len(texts) == 1 and texts[0].get_color() == "white"


def test_plan_annotations_are_the_cells_above_half_a_percent_rounded():
    plan = np.array([[0.004, 0.005, 0.0051, 0.2], [0.3, 0.0149, 0.4, 0.0710]])
    fig = plot_plan(plan, ["a", "b"], list("wxyz"))
    got = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in fig.axes[0].texts}
    assert got == {(0, 2): "1", (0, 3): "20", (1, 0): "30", (1, 1): "1", (1, 2): "40", (1, 3): "7"}


@pytest.mark.parametrize("S,T,mask", [(1, 1, [True]), (3, 2, [False, True, False])])
def test_edge_sizes_long_and_unicode_texts_draw(S, T, mask):
    texts = ["Ünïcödé — $5 and $10 " + "long " * 60] + [f"s {i}" for i in range(1, S)]
    q, c = _pair(S, T, mask=mask, texts=texts)
    fig = plot_alignment(pair_alignment(q, c, [{"eps": 0.05}, {"eps": 0.2}]))
    fig.canvas.draw()
    assert len(fig.axes) >= 3


@pytest.mark.parametrize("kw,name", [({"lines": 0}, "lines"), ({"lines": -1}, "lines"), ({"width": 0}, "width"),
                                     ({"width": 2.5}, "width")])
def test_sentence_label_refuses_bad_width_and_lines(kw, name):
    # lines=0 raised an IndexError, lines=-1 silently kept every line but one
    with pytest.raises(ValueError, match=name):
        sentence_label("q", 1, "word " * 40, **kw)


def test_bad_pairs_are_refused_naming_the_paper():
    q, c = _pair(2, 2, mask=[False, False])
    with pytest.raises(ValueError, match="query q"):
        pair_alignment(q, c)
    q, c = _pair(2, 2)
    two = DocBatch.from_list([torch.randn(2, 5, dtype=torch.float64)] * 2, ["a", "b"])
    with pytest.raises(ValueError, match="one query and one candidate"):
        pair_alignment(two, c)
