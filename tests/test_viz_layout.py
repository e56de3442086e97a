"""plot_alignment's titles and colour-bar labels lie inside the figure and apart, for the smallest CSFCube inputs: a query
facet of one sentence (17 of CSFCube's 50 query facets) against a candidate of three. The figure, sized by its three
columns, was narrower than the panels' titles: the OT distances ran off its right edge ("<D, P> = 0.69" of 0.690),
the figure's title off both edges, and a one-row plan panel's "% of mass" crossed the panel titles above and below."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from aspire.data.papers import read_papers  # noqa: E402
from aspire.encoders import load_encoder  # noqa: E402
from aspire.viz import MAX_WIDTH, pair_alignment, plot_alignment  # noqa: E402

QUERY, CAND = "1936997", "18631267"  # '"Not not bad" is not "bad"...': one method sentence (2); a 3-sentence candidate


def _texts(fig):
    """Every title and axis label drawn, with its extent in pixels."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)] + [fig._suptitle]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t is not None and t.get_text()]


@pytest.mark.parametrize("selection", [[2], [0, 2]])
def test_titles_and_colour_bar_labels_lie_inside_the_figure_and_apart(tiny_model_dir, shared_data, selection):
    papers = {p.paper_id: p for p in read_papers(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl").papers
              if p.paper_id in (QUERY, CAND)}
    assert len(papers[QUERY].sentences) == len(papers[CAND].sentences) == 3
    assert [i for i, label in enumerate(papers[QUERY].labels) if label == "method_label"] == [2]
    batch = load_encoder(tiny_model_dir).encode([papers[QUERY], papers[CAND]])
    al = pair_alignment(batch.index([0]).select_sentences([selection]), batch.index([1]),
                        [{"tau": 0.5, "eps": 0.05}, {"tau": 5000.0, "eps": 0.05}])
    fig = plot_alignment(al, title=f"method query {QUERY} vs candidate {CAND} (grade 2)")
    try:
        texts = _texts(fig)
        width, height = fig.bbox.width, fig.bbox.height
        outside = [text for text, box in texts if box.x0 < 0 or box.x1 > width or box.y0 < 0 or box.y1 > height]
        assert not outside, f"drawn past the figure's edge: {outside}"
        crossing = [(a, b) for k, (a, box) in enumerate(texts) for b, other in texts[k + 1:] if box.overlaps(other)]
        assert not crossing, f"drawn over each other: {crossing}"
        assert fig.get_figwidth() <= MAX_WIDTH
        assert any(f"<D, P> = {view.dist:.3f}" in text for view in al.plans for text, _ in texts)
    finally:
        plt.close(fig)
