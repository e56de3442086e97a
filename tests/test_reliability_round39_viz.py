"""Round 39: aspire/viz.py against float64 hand computations and aspire.scoring's OT scorer."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from aspire.batch import DocBatch  # noqa: E402
from aspire.scoring import get_scorer  # noqa: E402
from aspire.viz import pair_alignment, plot_alignment, plot_distances, plot_plan  # noqa: E402


def _pair(S, T, dtype=torch.float64, mask=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = DocBatch.from_list([torch.randn(S, 6, generator=g, dtype=dtype)], ["q"], [[f"qs {i}" for i in range(S)]])
    c = DocBatch.from_list([torch.randn(T, 6, generator=g, dtype=dtype)], ["c"], [[f"cs {j}" for j in range(T)]])
    if mask is not None:
        q = DocBatch(q.emb, torch.tensor([mask]), q.paper_ids, q.sentences)
    return q, c


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_float64_cost_is_the_float64_distance_and_minl2_dist_is_its_cell():
    # cost was cast to float32 (~2e-7 off a float64 hand computation, minl2_dist != cost[pair] by ~1e-8)
    q, c = _pair(5, 3, mask=[True, False, True, True, False])
    al = pair_alignment(q, c)
    ref = np.linalg.norm(q.emb[0].numpy()[:, None] - c.emb[0].numpy()[None], axis=-1)
    assert al.cost.dtype == np.float64
    np.testing.assert_allclose(al.cost, ref, rtol=0, atol=1e-12)
    assert al.minl2_dist == al.cost[al.pair]
    hidden = np.where(al.query_mask[:, None], ref, np.inf)
    assert al.pair == tuple(int(k) for k in np.unravel_index(hidden.argmin(), hidden.shape))


@pytest.mark.parametrize("S,T", [(1, 1), (1, 4), (4, 1), (3, 7)])
def test_plans_are_the_ot_scorers_and_figures_draw(S, T):
    mask = [True] * S if S == 1 else [True] + [False] + [True] * (S - 2)
    q, c = _pair(S, T, dtype=torch.float32, mask=mask)
    settings = [{"eps": 0.05}, {"tau": float("inf"), "eps": 0.1}]
    al = pair_alignment(q, c, settings)
    ref = np.linalg.norm(q.emb[0].double().numpy()[:, None] - c.emb[0].double().numpy()[None], axis=-1)
    np.testing.assert_allclose(al.cost, ref, atol=1e-5)
    for view, s in zip(al.plans, settings):
        match = get_scorer("ot", **s).pairwise_dist_details(q, c)
        np.testing.assert_array_equal(view.plan, match.plan[0].numpy())
        assert view.plan[~al.query_mask].sum() == 0  # unselected rows carry no mass
        np.testing.assert_allclose(view.plan.sum(1), match.query_weights[0].numpy(), atol=1e-3)
        np.testing.assert_allclose(view.plan.sum(0), match.cand_weights[0].numpy(), atol=1e-3)
        assert view.dist == pytest.approx(float((view.plan * ref).sum()), abs=1e-5)
    assert plot_alignment(al) is not None


@pytest.mark.parametrize("bad", [np.zeros(3), np.zeros((1, 2, 3))])
def test_plots_refuse_a_non_matrix_naming_it(bad):
    # once numpy's "not enough values to unpack" (plot_distances) or an IndexError (plot_plan)
    with pytest.raises(ValueError, match="cost must be a \\(S, T\\) matrix"):
        plot_distances(bad, ["a"], ["b", "c", "d"])
    with pytest.raises(ValueError, match="plan must be a \\(S, T\\) matrix"):
        plot_plan(bad, ["a"], ["b", "c", "d"])


def test_plots_refuse_empty_sentence_sets():
    # once drawn silently as an empty plot
    with pytest.raises(ValueError, match="cost is 0x3"):
        plot_distances(np.zeros((0, 3)), [], ["a", "b", "c"])
    with pytest.raises(ValueError, match="cost is 2x0"):
        plot_distances(np.zeros((2, 0)), ["a", "b"], [])
    with pytest.raises(ValueError, match="plan is 0x3"):
        plot_plan(np.zeros((0, 3)), [], ["a", "b", "c"])
    with pytest.raises(ValueError, match="rows is empty"):
        plot_plan(np.full((2, 3), 1 / 6), ["a", "b"], ["a", "b", "c"], rows=[])


def test_ot_settings_that_are_no_mappings_are_refused_naming_them():
    # once a TypeError from get_scorer's ** naming no setting
    q, c = _pair(2, 2)
    with pytest.raises(ValueError, match=r"ot_settings\[1\] must be a mapping"):
        pair_alignment(q, c, [{"eps": 0.05}, "eps"])
    with pytest.raises(ValueError, match="at least one OT setting"):
        pair_alignment(q, c, "eps")


def test_more_texts_than_vectors_is_refused_naming_the_paper():
    # once a (2, T) cost beside 3 query texts: the plots then failed far from here
    q = DocBatch(torch.randn(1, 2, 4), torch.ones(1, 2, dtype=torch.bool), ["q7"], [["a", "b", "c"]])
    c = DocBatch.from_list([torch.randn(3, 4)])
    with pytest.raises(ValueError, match="query q7 has 3 sentence texts but 2 vectors"):
        pair_alignment(q, c)


def test_padded_row_without_texts_ends_at_its_last_sentence():
    batch = DocBatch.from_list([torch.randn(2, 4), torch.randn(4, 4)])
    q = DocBatch(batch.emb[:1], batch.mask[:1])
    c = DocBatch.from_list([torch.randn(3, 4)])
    al = pair_alignment(q, c)
    assert al.cost.shape == (2, 3) and al.plans[0].plan.shape == (2, 3)
    assert al.query_texts == ["sentence 0", "sentence 1"]
