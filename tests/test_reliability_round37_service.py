"""The page's search service, round 37 (correctness): answers against a brute-force ranking written here.

Min-L2 and OT (POT's Sinkhorn, weights softmax(-min distance / tau)) over only the selected sentences of the query
paper, their vectors read from the index (encoded in the context of the whole abstract); k beyond the index; repeated
queries; selections refused by name."""

from __future__ import annotations

import numpy as np
import ot
import pytest
from serve_support import encoder_fixture, index_fixture  # noqa: F401 (fixtures encoder, index)

from aspire.serve import RequestError, open_service


@pytest.fixture(scope="module")
def service(index):
    return open_service(index, ["k=3", "ot_max_iter=2000"])


def brute_force(service, paper_id, selected, method, tau):
    """[(paper_id, -distance)] best first over every other paper: min-L2 or entropic OT of the selected sentences."""
    s = service.searcher
    full = {pid: s.query_from_index(pid).emb[0].double().numpy() for pid in s.index.paper_ids}
    q = full[paper_id][sorted(set(selected))]
    out = {}
    for pid, cand in full.items():
        if pid == paper_id:
            continue
        dist = np.sqrt(((q[:, None] - cand[None]) ** 2).sum(-1))  # (n, T)
        if method == "minl2":
            out[pid] = dist.min()
        else:
            x = np.exp(-dist.min(1) / tau)
            y = np.exp(-dist.min(0) / tau)
            plan = ot.sinkhorn(x / x.sum(), y / y.sum(), dist, s.config.ot_eps, numItermax=100000, stopThr=1e-12)
            out[pid] = float((plan * dist).sum())
    return sorted(((pid, -d) for pid, d in out.items()), key=lambda t: -t[1]), full


@pytest.mark.parametrize("method", ["minl2", "ot"])
@pytest.mark.parametrize("selected", [[0], [2, 0], [1, 2], [0, 1, 2]])
def test_search_is_the_brute_force_ranking_over_the_selected_sentences(service, method, selected):
    body = {"paper_id": "q", "sentences": selected, "k": 10, "rerank": method, "shortlist": 10}
    out = service.search(body)
    want, full = brute_force(service, "q", selected, method, service.searcher.config.ot_tau)
    assert [h["paper_id"] for h in out["hits"]] == [pid for pid, _ in want]
    np.testing.assert_allclose([h["score"] for h in out["hits"]], [d for _, d in want], rtol=0, atol=2e-4)
    assert out["sentences"] == sorted(set(selected)) and out["plan_rows"] == sorted(set(selected))
    q = full["q"][sorted(set(selected))]
    for hit in out["hits"]:
        cand = full[hit["paper_id"]]
        np.testing.assert_allclose(hit["dist"], np.sqrt(((q[:, None] - cand[None]) ** 2).sum(-1)), atol=2e-5)
        if method == "ot":
            plan = np.array(hit["plan"])
            assert plan.shape == (len(q), len(cand))
            assert abs(plan.sum() - 1.0) < 1e-3
        else:
            assert hit["plan"] is None
    # k larger than the index: every other paper, and a note that says why there are fewer
    assert out["k"] == 10 and len(out["hits"]) == 4
    assert out["note"] == "the index holds only 4 other papers"
    assert service.search(body) == out  # the same request, the same answer


def test_a_requests_own_tau_is_the_brute_force_ot_at_that_tau_and_repeats(service):
    body = {"paper_id": "q", "sentences": [1], "k": 4, "rerank": "ot", "shortlist": 4, "tau": 0.2}
    out = service.search(body)
    want, _ = brute_force(service, "q", [1], "ot", 0.2)
    assert [h["paper_id"] for h in out["hits"]] == [pid for pid, _ in want]
    np.testing.assert_allclose([h["score"] for h in out["hits"]], [d for _, d in want], rtol=0, atol=2e-4)
    assert out["ot"]["tau"] == 0.2 and service.searcher.config.ot_tau == 1.0  # the shared searcher untouched
    assert service.search(body) == out


@pytest.mark.parametrize("sentences, message", [
    ([], "empty selection"),
    ([3], r"sentence positions \[3\] out of range 0..2 for paper 'q'"),
    ([-1, 5], r"sentence positions \[-1, 5\] out of range 0..2 for paper 'q'"),
    ([True], "sentences must be"),
    (["0"], "sentences must be"),
])
def test_selections_out_of_range_empty_or_not_integers_are_refused_by_name(service, sentences, message):
    with pytest.raises(RequestError, match=message) as err:
        service.search({"paper_id": "q", "sentences": sentences})
    assert err.value.status == 400
