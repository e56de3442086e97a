"""aspire.viz and the notebooks against independent references: the alignments drawn equal a numpy brute force
(distances, single-match pair) and POT's log-domain Sinkhorn (plans, OT distances) at the same weights and
regularisation; a plan's label names the settings it ran with; the aspect notebook's stored outputs support its prose."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import ot  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from aspire.batch import DocBatch  # noqa: E402
from aspire.viz import pair_alignment, plot_alignment  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _weights(minima: np.ndarray, tau: float) -> np.ndarray:
    """softmax(-minima / tau), written out."""
    w = np.exp(-(minima - minima.min()) / tau)
    return w / w.sum()


@pytest.mark.parametrize("seed", range(6))
def test_pair_alignment_equals_numpy_and_pot_on_padded_rows_and_a_partial_selection(seed):
    rng = np.random.default_rng(seed)
    S, T, D = int(rng.integers(2, 7)), int(rng.integers(1, 7)), 6
    q, c, longer = (torch.tensor(rng.normal(size=(n, D)), dtype=torch.float32) for n in (S, T, 9))
    q_texts, c_texts = [f"query sentence {i}" for i in range(S)], [f"candidate sentence {j}" for j in range(T)]
    batch = DocBatch.from_list([q, c, longer], ["Q", "C", "L"], [q_texts, c_texts, [f"l{i}" for i in range(9)]])
    chosen = sorted(rng.choice(S, size=int(rng.integers(1, S + 1)), replace=False).tolist())
    query, cand = batch.index([0]).select_sentences([chosen]), batch.index([1])  # both padded to 9 sentences
    settings = [{"tau": 0.5, "eps": 0.05}, {"tau": 5000.0, "eps": 0.2}]
    al = pair_alignment(query, cand, settings)

    Q, C = q.double().numpy(), c.double().numpy()
    cost = np.sqrt(((Q[:, None] - C[None]) ** 2).sum(-1))  # (S, T) brute force
    assert al.query_texts == q_texts and al.cand_texts == c_texts  # row i is sentence i's text, no padding rows
    np.testing.assert_allclose(al.cost, cost, atol=1e-5)
    assert al.query_mask.tolist() == [i in chosen for i in range(S)]
    sub = cost[chosen]  # the selected query sentences only
    i, j = np.unravel_index(np.argmin(sub), sub.shape)
    assert al.pair == (chosen[i], int(j)) and al.minl2_dist == pytest.approx(sub.min(), abs=1e-5)
    for s, view in zip(settings, al.plans):
        a, b = _weights(sub.min(1), s["tau"]), _weights(sub.min(0), s["tau"])
        plan = np.zeros((S, T))
        plan[chosen] = ot.sinkhorn(a, b, sub, s["eps"], method="sinkhorn_log", numItermax=100_000, stopThr=1e-12)
        np.testing.assert_allclose(view.plan, plan, atol=2e-4)
        assert view.dist == pytest.approx(float((plan * cost).sum()), abs=1e-3)


def test_a_plans_label_names_the_tau_and_eps_it_ran_with():
    g = torch.Generator().manual_seed(0)
    q = DocBatch.from_list([torch.randn(3, 5, generator=g)], ["Q"], [["a", "b", "c"]])
    c = DocBatch.from_list([torch.randn(4, 5, generator=g)], ["C"], [["d", "e", "f", "h"]])
    al = pair_alignment(q, c, [{"eps": 0.05}, {"tau": 7.0}, {"eps": 0.5, "tau": 10.0}])
    # once "OT plan (eps=0.05)": the weights' temperature the plan ran with (1.0, the scorer's default) unnamed
    assert [v.label for v in al.plans] == ["OT plan (eps=0.05, tau=1.0)", "OT plan (tau=7.0, eps=0.05)",
                                           "OT plan (eps=0.5, tau=10.0)"]
    assert [v.settings for v in al.plans] == [{"eps": 0.05}, {"tau": 7.0}, {"eps": 0.5, "tau": 10.0}]  # as given
    explicit = pair_alignment(q, c, {"eps": 0.05, "tau": 1.0}).plans[0]
    np.testing.assert_array_equal(al.plans[0].plan, explicit.plan)  # the label names what ran
    titles = [ax.get_title() for ax in plot_alignment(al).axes if ax.images]
    assert titles[1].startswith("OT plan (eps=0.05, tau=1.0); <D, P> = ")


def test_the_aspect_notebook_prints_the_moved_papers_distances_and_they_support_its_prose():
    nb = nbformat.read(NOTEBOOKS / "aspect_conditional_retrieval.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                      if o.output_type == "stream")
    ranks = re.search(r"(\d+): rank (\d+) by method, (\d+) by result", printed)
    found = dict((name, (float(single), float(ot_dist))) for name, single, ot_dist in re.findall(
        r"(method|result) sentences: single match q\d+-c\d+ = ([\d.]+), OT <D, P> = ([\d.]+)", printed))
    # once the moved paper's distances were not shown, and the check behind the prose could not fail (two disjoint
    # selections always give single matches through different query sentences)
    assert ranks and sorted(found) == ["method", "result"], "the moved paper's ranks and distances are not printed"
    higher, lower = ("method", "result") if int(ranks[2]) < int(ranks[3]) else ("result", "method")
    assert found[higher][0] < found[lower][0] and found[higher][1] < found[lower][1]
    prose = nb.cells[-1].source
    assert "nearer the\n  selection that ranks it higher" in prose
    assert "yes  the moved paper is nearer the selection that ranks it higher, by single match and by OT" in printed
    assert "NO " not in printed
