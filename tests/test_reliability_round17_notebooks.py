"""Round 17, notebooks: what the stored notebooks print and say, checked against an independent reference."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
QUERY = "2468783"  # the aspect notebook's query


def _stream(cell) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


@pytest.mark.slow
def test_aspect_notebook_moved_paper_is_the_largest_move_of_every_indexed_paper(shared_data):
    """The notebook says its plotted paper is "the paper whose rank moves most between the method and the result
    query" of the 40 indexed papers. It took the largest move among the papers in both top-20 lists only:
    20121139 (rank 4 -> 16, 12 places), while 18997693 went 16 -> 34 (18 places). Reference: POT's Sinkhorn on
    the encoder's own vectors, ranked here."""
    ot = pytest.importorskip("ot")
    from aspire.data.papers import read_papers
    from aspire.encoders import load_encoder

    nb = nbformat.read(NOTEBOOKS / "aspect_conditional_retrieval.ipynb", as_version=4)
    printed = [m for c in nb.cells if c.cell_type == "code"
               for m in [re.search(r"^(\d+): rank (\d+) by method, (\d+) by result", _stream(c), re.M)] if m]
    assert len(printed) == 1, "the cell printing the moved paper is not found"
    moved, by_method, by_result = printed[0].group(1), int(printed[0].group(2)), int(printed[0].group(3))

    csf = shared_data / "csfcube"
    grades = {f: dict(zip(a[QUERY]["cands"], a[QUERY]["relevance_adju"])) for f in ("method", "result")
              for a in [json.loads((csf / f"test-pid2anns-csfcube-{f}.json").read_text())]}
    pool = sorted(grades["method"], key=lambda c: (-max(grades["method"][c], grades["result"][c]), c))[:40]
    papers = {p.paper_id: p for p in read_papers(csf / "abstracts-csfcube-preds.jsonl").papers}
    encoder = load_encoder("minilm")
    vectors = {}
    for pid in [QUERY, *pool]:
        one = encoder.encode([papers[pid]], progress=False)
        vectors[pid] = one.emb[0, : int(one.mask[0].sum())].double().numpy()
    labels = papers[QUERY].labels
    ranks = {}
    for facet in ("method", "result"):
        q = vectors[QUERY][[i for i, label in enumerate(labels) if label == f"{facet}_label"]]
        dist = {}
        for pid in pool:
            cost = np.sqrt(((q[:, None] - vectors[pid][None]) ** 2).sum(-1))
            x, y = np.exp(-cost.min(1)), np.exp(-cost.min(0))  # softmax(-min / tau), tau = 1 (the searcher's)
            plan = ot.sinkhorn(x / x.sum(), y / y.sum(), cost, 0.05, method="sinkhorn_log", stopThr=1e-10,
                               numItermax=100_000)
            dist[pid] = float((plan * cost).sum())
        ranks[facet] = {pid: r for r, pid in enumerate(sorted(pool, key=dist.get), 1)}
    move = {pid: abs(ranks["method"][pid] - ranks["result"][pid]) for pid in pool}
    largest = max(move.values())
    assert [p for p in pool if move[p] == largest] == [moved], (
        f"the notebook plots {moved} (moves {move[moved]}), the largest move is {largest}")
    assert (by_method, by_result) == (ranks["method"][moved], ranks["result"][moved])


@pytest.mark.parametrize("name", ["alignment_visualisation.ipynb", "aspect_conditional_retrieval.ipynb"])
def test_notebook_names_a_query_not_graded_for_both_facets(name, shared_data, monkeypatch):
    """The first cell invites another QUERY (its comment says why this one); a query graded for the background facet
    only (10695055) raised a bare KeyError: '10695055'. Now the message says so and lists the six that are graded for
    both (from the annotation files, read here)."""
    monkeypatch.setenv("ASPIRE_DATA", str(shared_data))
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    source = nb.cells[1].source
    setup = source[source.index("DATA = "):]  # the data set-up, without the cell's plotting imports
    assert f'QUERY = "{QUERY}"' in setup
    anns = [json.loads((shared_data / "csfcube" / f"test-pid2anns-csfcube-{f}.json").read_text())
            for f in ("method", "result")]
    both = sorted(set(anns[0]) & set(anns[1]))
    assert "10695055" not in both and QUERY in both
    scope = {"json": json, "os": __import__("os"), "Path": Path}
    exec(setup, scope)  # the stored query runs
    with pytest.raises(AssertionError, match=f"query 10695055 is not graded for both .*: {', '.join(both)}$"):
        exec(setup.replace(f'QUERY = "{QUERY}"', 'QUERY = "10695055"'), dict(scope))
