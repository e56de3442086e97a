"""aspire.viz and aspire.data.facets against hand computations (round 30): the numbers a view writes are the
matrix's own cells, rounded as documented, at the rows and columns their labels name; the single match is the
numpy argmin over the selected rows; bad inputs (a pair on an unselected row, a grade that is no number, a query
selecting nothing, selections of bytes, floats or masks) are refused by name; numpy and tensor integers are
positions."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from aspire.batch import DocBatch  # noqa: E402
from aspire.data.facets import parse_selection, resolve_selection  # noqa: E402
from aspire.viz import pair_alignment, plot_alignment, plot_distances, plot_grades_by_rank, plot_plan  # noqa: E402

LABELS = ["background_label", "objective_label", "method_label", "result_label", "method_label"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _cell_numbers(ax) -> dict[tuple[int, int], str]:
    """The numbers written in an axes' cells: (row, column) -> text."""
    return {(int(round(t.get_position()[1])), int(round(t.get_position()[0]))): t.get_text() for t in ax.texts}


def _batches(S: int, T: int, seed: int = 0, chosen=None):
    g = torch.Generator().manual_seed(seed)
    q = DocBatch.from_list([torch.randn(S, 4, generator=g)], ["Q"], [[f"query {i}" for i in range(S)]])
    c = DocBatch.from_list([torch.randn(T, 4, generator=g)], ["C"], [[f"cand {j}" for j in range(T)]])
    return (q if chosen is None else q.select_sentences([chosen])), c


# ---- viz: fixes ------------------------------------------------------------------------------------
def test_a_plan_cell_of_half_a_percent_is_not_written_as_zero():
    # 100 * 0.005 = 0.5 exactly, and format(0.5, ".0f") is "0": the cell was annotated "0" although the docstring
    # annotated only cells of at least 0.5% "with that share"; now cells of more than 0.5% are, each at least "1"
    plan = np.array([[0.005, 0.0049, 0.015, 0.025], [0.3, 0.3, 0.2999, 0.0502]])
    plan = plan / plan.sum()
    numbers = _cell_numbers(plot_plan(plan, ["a", "b"], list("defg")).axes[0])
    assert "0" not in numbers.values()
    pct = 100.0 * plan
    assert set(numbers) == {(r, c) for r in range(2) for c in range(4) if pct[r, c] > 0.5}
    for (r, c), text in numbers.items():  # each the cell's own share, to a whole percent
        assert int(text) == round(pct[r, c]) and int(text) >= 1


def test_the_single_match_outline_refuses_an_unselected_query_sentence():
    cost = np.arange(12.0).reshape(3, 4)  # the least distance, 0, is in row 0
    with pytest.raises(ValueError, match=r"query sentence 0 is not selected"):
        plot_distances(cost, list("abc"), list("defg"), pair=(0, 0), query_mask=[False, True, True])
    fig = plot_distances(cost, list("abc"), list("defg"), pair=(1, 0), query_mask=[False, True, True])
    assert fig.axes  # a selected row is outlined as before


def test_grades_that_are_no_numbers_are_refused_naming_the_ranking():
    with pytest.raises(ValueError, match=r"ranking 'method': the grade at rank 2 is '2'"):
        plot_grades_by_rank({"method": [1, "2"]})  # was TypeError: '<=' between int and str, naming nothing
    with pytest.raises(ValueError, match=r"ranking 'method'"):
        plot_grades_by_rank({"method": [True]})
    fig = plot_grades_by_rank({"method": [np.int64(3), 2.0, None, float("nan"), 0]})
    assert fig.axes[0].get_yticklabels()[0].get_text() == "method  (2 with grade >= 2)"


def test_pair_alignment_names_a_query_that_selects_no_sentence():
    q, c = _batches(3, 4)
    with pytest.raises(ValueError, match=r"query Q has no sentence selected"):
        pair_alignment(q.with_mask(torch.zeros(1, 3, dtype=torch.bool)), c)


# ---- facets: fixes -----------------------------------------------------------------------------
def test_numpy_and_tensor_integers_are_positions():
    # np.int64(3) was refused ("got int64 3"); tensor(0) became the name 'tensor(0)', and with no labels the
    # refusal told the caller to select by position, which is what they had done
    assert parse_selection(np.int64(3)) == [3]
    assert parse_selection(torch.tensor(2)) == [2]
    assert parse_selection(torch.tensor([0, 2])) == [0, 2]
    assert parse_selection([np.int32(1), "Method"]) == [1, "method"]
    assert resolve_selection(torch.tensor([4, 0]), None, "p1") == [4, 0]
    assert resolve_selection([np.int64(0), "method"], LABELS, "p1") == [0, 2, 4]


@pytest.mark.parametrize("spec, what", [
    (b"0,2", "bytes"),  # was positions [48, 44, 50]
    ([2.0], "float 2.0"),  # was the name '2.0'
    ([np.float64(1.5)], "1.5"),
    ([None], "NoneType"),  # was the name 'none'
    ([np.bool_(True)], "True"),  # was the name 'true'
    (torch.tensor([True, False]), "True"),  # a mask, not positions 1, 0
    (np.array([True, False]), "True"),
])
def test_selections_of_bytes_floats_and_masks_are_refused_naming_the_paper(spec, what):
    with pytest.raises(ValueError, match=r"for paper 'p7': expected (a (0-based )?position|positions)") as info:
        resolve_selection(spec, LABELS, "p7")  # refused as no position, not looked up as a name
    assert what in str(info.value)


# ---- checked and found correct (references: numpy brute force) ------------------------------------
@pytest.mark.parametrize("S, T, chosen", [(1, 1, None), (1, 5, None), (5, 1, [1, 3]), (4, 6, [2]), (6, 3, [0, 5])])
def test_views_show_the_numpy_argmin_and_cells_at_their_labels(S, T, chosen):
    q, c = _batches(S, T, seed=S * 10 + T, chosen=chosen)
    al = pair_alignment(q, c, [{"eps": 0.1}])
    Q, C = q.emb[0].double().numpy(), c.emb[0].double().numpy()
    cost = np.sqrt(((Q[:, None] - C[None]) ** 2).sum(-1))  # (S, T) brute force
    rows = list(range(S)) if chosen is None else chosen
    sub = cost[rows]
    i, j = np.unravel_index(np.argmin(sub), sub.shape)
    assert al.pair == (rows[i], int(j)) and al.minl2_dist == pytest.approx(sub.min(), abs=1e-5)
    assert al.query_texts == [f"query {k}" for k in range(S)] and al.cand_texts == [f"cand {k}" for k in range(T)]
    fig = plot_alignment(al)
    dist_ax, plan_ax = [ax for ax in fig.axes if ax.images]
    assert f"single match q{rows[i]}-c{j} = {sub.min():.3f}" in dist_ax.get_title()
    numbers = _cell_numbers(dist_ax)  # selected rows only, each the cell's distance to 2 decimals
    assert set(numbers) == {(r, k) for r in rows for k in range(T)}
    assert all(text == f"{cost[r, k]:.2f}" for (r, k), text in numbers.items())
    assert [t.get_text().split()[0] for t in plan_ax.get_yticklabels()] == [f"q{r}" for r in rows]
    plan = al.plans[0].plan
    assert plan[[r for r in range(S) if r not in rows]].sum() == 0  # unselected rows carry no mass
    for (r, k), text in _cell_numbers(plan_ax).items():  # plan panel: row r is the r-th selected sentence
        assert int(text) == round(100 * plan[rows[r], k])
    outline = [p for p in dist_ax.patches if p.get_label() == "single match (min L2)"]
    assert len(outline) == 1 and outline[0].get_xy() == (j - 0.5, rows[i] - 0.5)
