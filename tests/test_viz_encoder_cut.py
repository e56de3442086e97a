"""aspire.viz on papers an encoder with overflow="truncate" cut: the sentences past its max_length have no vector (a zero
one outside the mask). A cut candidate was refused as one that "selects only sentences [0] of its 20", and a cut query's
rows were drawn with the distances of a zero vector; now such a sentence keeps its row or column with no distance (NaN)
and no mass, and plot_alignment names it."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from aspire.data.papers import read_papers  # noqa: E402
from aspire.encoders import load_encoder  # noqa: E402
from aspire.scoring import get_scorer  # noqa: E402
from aspire.viz import UNSELECTED_COLOR, pair_alignment, plot_alignment  # noqa: E402


def _kept(batch) -> np.ndarray:
    """(n,) bool: which of the paper's n sentences the encoder kept."""
    return batch.mask[0, : len(batch.sentences[0])].numpy()


@pytest.fixture()
def encoded(tiny_model_dir, shared_data):
    """Two CSFCube papers (12 and 20 sentences), both past the tiny model's 128 pieces, encoded with the given
    overflow: (the 12-sentence paper, the 20-sentence paper)."""
    wanted = {"2468783", "11473206"}
    papers = {p.paper_id: p for p in read_papers(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl").papers
              if p.paper_id in wanted}

    def encode(overflow):
        batch = load_encoder(tiny_model_dir, overflow=overflow).encode([papers["2468783"], papers["11473206"]])
        return batch.index([0]), batch.index([1])  # padded to 20 sentences: `_kept` reads a paper's own

    yield encode
    plt.close("all")


def test_a_candidate_the_encoder_cut_is_aligned_over_its_encoded_sentences(encoded):
    query, cand = encoded("truncate")
    kept = _kept(cand)
    assert 0 < kept.sum() < len(cand.sentences[0])  # the encoder cut this candidate
    al = pair_alignment(query, cand, [{"eps": 0.05}, {"tau": 5000.0}])
    assert al.cand_texts == cand.sentences[0]  # every sentence keeps its column and text
    assert np.isnan(al.cost[:, ~kept]).all() and not np.isnan(al.cost[np.ix_(_kept(query), kept)]).any()
    for view in al.plans:  # the scorer's own plan and distance, no mass on the cut sentences
        match = get_scorer("ot", **view.settings).pairwise_dist_details(query, cand)
        np.testing.assert_allclose(view.plan, match.plan[0, : len(al.query_texts), : len(al.cand_texts)].numpy())
        assert view.dist == pytest.approx(float(match.dist[0])) and not view.plan[:, ~kept].any()
    assert al.minl2_dist == pytest.approx(float(get_scorer("minl2").pairwise_dist(query, cand)[0]))
    assert kept[al.pair[1]] and al.cost[al.pair] == pytest.approx(al.minl2_dist)
    fig = plot_alignment(al)
    first, last = np.flatnonzero(~kept)[[0, -1]]
    assert "no vector (left out by the encoder, past its max_length): " in fig._suptitle.get_text()
    assert fig._suptitle.get_text().endswith(f"c{first}-c{last}")
    ticks = [a for a in fig.axes if a.images][-1].get_xticklabels()  # the bottom panel's: the candidate sentences
    assert [to_hex(t.get_color()) == UNSELECTED_COLOR for t in ticks] == (~kept).tolist()


def test_a_query_the_encoder_cut_has_no_distances_on_its_cut_rows(encoded):
    query = encoded("truncate")[1]  # the 20-sentence paper as the query, cut
    cand = encoded("window")[0]  # every sentence encoded
    kept = _kept(query)
    assert 0 < kept.sum() < len(query.sentences[0])
    al = pair_alignment(query, cand)
    assert np.isnan(al.cost[~kept]).all()  # were the distances of a zero vector, drawn as the sentences'
    assert not np.isnan(al.cost[kept][:, _kept(cand)]).any()
    first, last = np.flatnonzero(~kept)[[0, -1]]
    assert plot_alignment(al)._suptitle.get_text().endswith(f"past its max_length): q{first}-q{last}")


def test_selecting_a_sentence_the_encoder_cut_says_so(encoded):
    """`select_sentences` (the alignment notebook's query selection) on a sentence past the encoder's max_length
    blamed "padding, or left out by an earlier selection"; it names the cut and what to do instead."""
    query, _ = encoded("truncate")
    kept = _kept(query)
    last = int(np.flatnonzero(~kept)[-1])
    with pytest.raises(ValueError, match=rf"paper 2468783: sentences \[{last}\] have no vector: the encoder cut the "
                                         r"paper at its max_length \(overflow='truncate'\)"):
        query.select_sentences([[0, last]])
    first, second = np.flatnonzero(kept)[:2].tolist()
    narrowed = query.select_sentences([[first]])
    with pytest.raises(ValueError, match=rf"sentences \[{second}\] are not selected in this batch \(padding, or "
                                         r"left out by an earlier selection\)"):
        narrowed.select_sentences([[second]])  # a sentence with a vector an earlier selection left out: as before
