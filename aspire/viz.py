"""Plots that show why two papers match (matplotlib; notebooks only call these).

    pair_alignment(query (1, S, D), cand (1, T, D), ot_settings) -> PairAlignment
        the sentence L2 distances (S, T), the single-match (min-L2) pair, and one OT plan per setting
    plot_distances(cost, query_texts, cand_texts)   heatmap of sentence distances, texts on the axes,
                                                    optionally one pair outlined (the single match)
    plot_plan(plan, query_texts, cand_texts)        a transport plan: mass moved between sentence pairs
                                                    (optionally only some query rows, e.g. the selected)
    plot_alignment(alignment)                       distances + single-match pair, then each OT plan below
    plot_ranked_list(hits)                          ranked papers with their aligned sentence pairs
    plot_grades_by_rank(rankings)                   relevance grade at each rank, one row per ranking

Query sentences outside the query's mask (aspect-conditional retrieval: not selected) are drawn
hatched and their labels greyed; they carry no mass in the plans and cannot be the single match. A sentence that
has no vector (an encoder with `overflow="truncate"` leaves the sentences past its `max_length` out: zero vectors
outside the mask) has no distance either: its cells are blank, and `plot_alignment` names it.
Every plot returns the matplotlib Figure it drew on; each but `plot_alignment` (which lays out its own panels)
takes an optional `ax` to draw on. Figures drawn here fit a screen (at most `MAX_WIDTH` inches wide) and no
text is smaller than `FONT` points. Sentence texts and titles of papers are drawn as written: a `$...$` in an
abstract is not read as matplotlib mathtext (which drew `$5 and $10` as math and raised on LaTeX it does not
parse, such as `$3{n \\choose 4}$`: 29 sentences of CSFCube).
"""

from __future__ import annotations

import numbers
import textwrap
import unicodedata
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import torch

from aspire.batch import DocBatch
from aspire.config import is_whole
from aspire.scoring import get_scorer, l2_cost
from aspire.text import cut_whole

UNSELECTED_COLOR = "#9a9a9a"
PAIR_COLOR = "#d62728"
MAX_WIDTH = 10.0  # inches: about 1000 pixels at matplotlib's default 100 dpi
FONT, TITLE_FONT = 9, 10  # points: tick labels, numbers in cells and list lines; titles


@dataclass
class PlanView:
    """One OT plan between a query and a candidate: `plan (S, T)`, `dist = <cost, plan>`; `settings` as given,
    `label` with the scorer's `tau` and `eps` too."""

    label: str
    plan: np.ndarray
    dist: float
    settings: dict = field(default_factory=dict)


@dataclass
class PairAlignment:
    """How one query paper aligns with one candidate paper.

    Attributes:
        query_texts, cand_texts: S query and T candidate sentence texts.
        query_mask: (S,) bool, the query sentences taking part (the aspect selection).
        cost: (S, T) L2 distance of every sentence pair (unselected query rows included); NaN in the row or column
            of a sentence with no vector (one an encoder with `overflow="truncate"` left out, past its limit).
        pair: (i, j) the single-match pair, the selected pair of least distance.
        minl2_dist: the single-match distance `cost[i, j]`.
        plans: one PlanView per OT setting.
        query_id, cand_id: the papers' ids.
    """

    query_texts: list[str]
    cand_texts: list[str]
    query_mask: np.ndarray
    cost: np.ndarray
    pair: tuple[int, int]
    minl2_dist: float
    plans: list[PlanView]
    query_id: str = ""
    cand_id: str = ""


def _numpy(t) -> np.ndarray:
    """A tensor as a numpy array: float64 kept (`.float()` cut a float64 paper's distances to float32, ~2e-7 off, so
    `minl2_dist` was no longer `cost[pair]`), lower precisions as float32 (numpy has no bfloat16)."""
    t = t.detach().cpu()
    return (t if t.dtype == torch.float64 else t.float()).numpy()


def pair_alignment(query: DocBatch, cand: DocBatch,
                   ot_settings: Sequence[Mapping] | Mapping = ({"eps": 0.05},)) -> PairAlignment:
    """Distances, single-match pair and OT plans between one query `(1, S, D)` and one candidate `(1, T, D)`.

    The query's mask selects the sentences that are matched (all sentences still get a row in
    `cost`); the candidate's every sentence is matched (a candidate with a narrowed mask raises
    ValueError). A sentence with no vector, which an encoder with `overflow="truncate"` left out past its limit (a zero
    vector outside the mask), keeps its row or column, with no distance (NaN) and no mass. Without sentence texts, the
    padding of a batch row is no sentence: the query's rows end at its last selected or non-zero vector, the
    candidate's at its last selected one. `ot_settings` are keyword
    arguments of the "ot" scorer (`tau`, `eps`, ...), one plan each (one mapping alone: one plan); a plan's label
    names the settings given and the scorer's `tau` and `eps` where they were left to its defaults. A query or
    candidate with no sentence selected raises ValueError naming it.
    """
    if isinstance(ot_settings, Mapping):
        ot_settings = [ot_settings]
    elif not isinstance(ot_settings, (str, bytes)):  # a generator was used up by the checks below: no plan, no error
        ot_settings = list(ot_settings)
    if len(query) != 1 or len(cand) != 1:
        raise ValueError(f"pair_alignment takes one query and one candidate, got {len(query)} and {len(cand)}")
    if isinstance(ot_settings, (str, bytes)) or not ot_settings:
        raise ValueError(f"give at least one OT setting, e.g. [{{'eps': 0.05}}], got {ot_settings!r}")
    for k, settings in enumerate(ot_settings):  # a string once failed in get_scorer with a TypeError naming no setting
        if not isinstance(settings, Mapping):
            raise ValueError(f"ot_settings[{k}] must be a mapping of OT scorer arguments, e.g. {{'eps': 0.05}}, "
                             f"got {settings!r}")
    for side, batch in (("query", query), ("candidate", cand)):  # else the scorer's error, naming no paper
        if not bool(batch.mask[0].any()):
            pid = batch.paper_ids[0] if batch.paper_ids else "0"
            raise ValueError(f"pair_alignment: {side} {pid} has no sentence selected; select at least one")
    if query.sentences:
        S = len(query.sentences[0])
    else:  # no texts: a row of a padded batch ends at its last sentence, selected or not (padded rows are zero)
        real = (query.mask[0] | query.emb[0].ne(0).any(-1)).cpu().numpy()
        S = int(np.flatnonzero(real)[-1]) + 1 if real.any() else 0
    selected = np.flatnonzero(cand.mask[0].cpu().numpy())  # the candidate's sentences taking part
    if cand.sentences:
        T = len(cand.sentences[0])
    else:  # no texts: the padding after the last selected sentence is no sentence
        T = int(selected[-1]) + 1 if len(selected) else 0
    for side, batch, n in (("query", query, S), ("candidate", cand, T)):  # else a cost with fewer rows than texts
        if n > batch.emb.shape[1]:
            pid = batch.paper_ids[0] if batch.paper_ids else "0"
            raise ValueError(f"pair_alignment: {side} {pid} has {n} sentence texts but {batch.emb.shape[1]} vectors")
    q_cut, c_cut = _no_vector(query, S), _no_vector(cand, T)
    if len(selected) + int(c_cut.sum()) != T:  # the columns drawn are the candidate's first T sentences: all that
        cid = cand.paper_ids[0] if cand.paper_ids else "0"  # have a vector must take part
        raise ValueError(f"pair_alignment matches the query with every sentence of the candidate, but candidate "
                         f"{cid} selects only sentences {selected.tolist()} of its {T}; only a query takes a "
                         "sentence selection")
    single = get_scorer("minl2").pairwise_dist_details(query, cand)
    cost = _numpy(l2_cost(query.emb[:1, :S], cand.emb[:1, :T])[0])  # (S, T): every query sentence, selected or not
    # a sentence the encoder left out has no distance: its zero vector's was drawn as one (a cut candidate was refused
    # as one that selects sentences)
    cost[q_cut] = np.nan
    cost[:, c_cut] = np.nan
    plans = []
    for settings in ot_settings:
        scorer = get_scorer("ot", **settings)
        match = scorer.pairwise_dist_details(query, cand)
        # the settings given, then the weights' temperature and the regularisation the plan ran with where not given
        ran = {**settings, **{k: getattr(scorer, k) for k in ("tau", "eps") if k not in settings}}
        label = ", ".join(f"{k}={v}" for k, v in ran.items())
        plans.append(PlanView(f"OT plan ({label})", _numpy(match.plan[0, :S, :T]), float(match.dist[0]), dict(settings)))
    return PairAlignment(
        query_texts=list(query.sentences[0]) if query.sentences else [f"sentence {i}" for i in range(S)],
        cand_texts=list(cand.sentences[0][:T]) if cand.sentences else [f"sentence {j}" for j in range(T)],
        query_mask=query.mask[0, :S].cpu().numpy(),
        cost=cost,
        pair=(int(single.query_sent[0]), int(single.cand_sent[0])),
        minl2_dist=float(single.dist[0]),
        plans=plans,
        query_id=query.paper_ids[0] if query.paper_ids else "",
        cand_id=cand.paper_ids[0] if cand.paper_ids else "",
    )


def _no_vector(batch: DocBatch, n: int) -> np.ndarray:
    """(n,) bool: which of the first `n` sentences of the batch's only paper have no vector, a zero one outside the
    mask (an encoder with `overflow="truncate"` leaves the sentences past its `max_length` so)."""
    return (~batch.mask[0, :n] & batch.emb[0, :n].eq(0).all(-1)).cpu().numpy()


# ---- helpers ----------------------------------------------------------------------------------
MAX_ANNOTATED_COLUMNS = 16  # past this many candidate sentences, 9-pt numbers no longer fit in a cell
ROW_INCHES = 0.34  # one matrix row: room for a two-line 9-pt sentence label
MIN_PANEL_ROWS = 2  # a panel of plot_alignment is at least this many rows high: room for its colour bar's label


def sentence_label(prefix: str, i: int, text: str, width: int = 48, lines: int = 2,
                   facet: str | None = None) -> str:
    """`"q3 [method] first words…"` wrapped to `width` characters, at most `lines` lines (both integers >= 1). A line
    break or the cut before "…" never parts a letter from its combining marks, unless they alone pass `width`."""
    for name, value in (("width", width), ("lines", lines)):  # lines=0 raised an IndexError, lines=-1 kept all but one
        if not is_whole(value, 1):
            raise ValueError(f"sentence_label: {name} must be an integer >= 1, got {value!r}")
    head = f"{prefix}{i}" + (f" [{facet}]" if facet else "")
    wrapped = _WholeLetterWrapper(width=width).wrap(f"{head} {text}") or [head]
    if len(wrapped) > lines:
        wrapped = wrapped[:lines]
        wrapped[-1] = cut_whole(wrapped[-1], width - 1).rstrip() + "…"
    return "\n".join(wrapped)


class _WholeLetterWrapper(textwrap.TextWrapper):
    """`textwrap`'s wrapper, but a word longer than a line is broken before a letter, never between a letter and its
    combining marks (textwrap's own break began the next line with a dangling accent)."""

    def _handle_long_word(self, reversed_chunks, cur_line, cur_len, width):
        super()._handle_long_word(reversed_chunks, cur_line, cur_len, width)  # moved cur_line[-1] off the chunk
        head, rest = cur_line[-1], reversed_chunks[-1]
        keep = len(cut_whole(head + rest, len(head)))
        if keep == len(head) or (not keep and len(cur_line) == 1):  # a letter whose marks fill a line stays cut:
            return  # textwrap must move on
        if keep:
            cur_line[-1] = head[:keep]
        else:  # the line's other words end it; the letter starts the next
            cur_line.pop()
        reversed_chunks[-1] = head[keep:] + rest


def _short_facet(label: str | None) -> str | None:
    return label.removesuffix("_label") if label else None


def _matrix_width(T: int) -> float:
    """Inches for a matrix of T columns with sentence labels on its left and a colour bar on its right."""
    return min(MAX_WIDTH, 4.4 + 0.45 * T)


def _fit_width(fig) -> None:
    """Widen `fig`, up to `MAX_WIDTH` inches, until no title or label runs past its left or right edge: a figure sized by
    its columns was narrower than a panel's title over a candidate of few sentences, and its OT distance was cut
    ("<D, P> = 0.69" of 0.690). A panel's title is centred on its matrix, which takes the added width: it moves by half
    of it."""
    for _ in range(3):
        fig.draw_without_rendering()
        renderer, width = fig.canvas.get_renderer(), fig.bbox.width
        texts = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label,
                                                 ax.yaxis.label)]
        texts += [fig._suptitle] if fig._suptitle is not None else []
        boxes = [t.get_window_extent(renderer) for t in texts if t.get_visible() and t.get_text()]
        over = max([0.0] + [max(b.x1 - width, -b.x0) for b in boxes]) / fig.dpi  # inches
        inches = fig.get_figwidth()
        if over <= 0.01 or inches >= MAX_WIDTH:
            return
        fig.set_figwidth(min(MAX_WIDTH, inches + 2 * over + 0.1))


def _new_ax(ax, size: tuple[float, float]):
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=size, layout="constrained")
        return fig, ax
    return ax.figure, ax


def _matrix(values: np.ndarray, query_texts: Sequence[str], cand_texts: Sequence[str], ax, *, cmap: str,
            query_mask: np.ndarray | None, fmt: str, annotate: bool, title: str, colorbar_label: str,
            query_labels: Sequence[str | None] | None, cand_labels: Sequence[str | None] | None,
            show_query_texts: bool, rows: Sequence[int] | None = None, vmin: float | None = None,
            vmax: float | None = None, hide_below: float = -np.inf):
    """Draw the query rows `rows` (default all) of one (S, T) matrix, sentence texts on the axes; returns the AxesImage.
    Cells of value `hide_below` or less get no number."""
    S, T = values.shape
    if len(query_texts) != S or len(cand_texts) != T:
        raise ValueError(f"matrix is {S}x{T} but got {len(query_texts)} query and {len(cand_texts)} candidate texts")
    for side, labels, n in (("query", query_labels, S), ("candidate", cand_labels, T)):
        if labels is not None and len(labels) != n:
            hint = (" (is the title sentence 0? aspire.data.facets.title_labelled(labels, n) labels it)"
                    if len(labels) == n - 1 else "")
            raise ValueError(f"{len(labels)} {side} labels for the matrix's {n} {side} sentences{hint}")
    rows = np.arange(S) if rows is None else _positions(rows, "rows")
    if not len(rows):  # once drawn as an empty plot
        raise ValueError("rows is empty: give at least one query sentence to draw (default: all)")
    outside = [int(r) for r in rows if not 0 <= r < S]
    if outside:
        raise ValueError(f"rows {outside} are not query sentences of the {S}x{T} matrix (0 to {S - 1})")
    query_mask = np.ones(S, dtype=bool) if query_mask is None else np.asarray(query_mask, dtype=bool).reshape(-1)
    if len(query_mask) != S:
        raise ValueError(f"query_mask has {len(query_mask)} entries for the matrix's {S} query sentences")
    mask = query_mask[rows]
    shown = values[rows]  # (R, T)
    image = ax.imshow(shown, cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax, interpolation="nearest")
    bar = ax.figure.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    bar.set_label(colorbar_label, fontsize=FONT)
    bar.ax.tick_params(labelsize=FONT)
    for r in np.flatnonzero(~mask):  # unselected query sentences: hatched, not matched
        ax.add_patch(_patch((-0.5, r - 0.5), T, 1, fill=False, hatch="///", edgecolor=UNSELECTED_COLOR, lw=0))
    if annotate and T <= MAX_ANNOTATED_COLUMNS:
        # the text colour follows the colour the cell is drawn in (a midpoint of the data, not of the colour scale,
        # wrote a 1x1 plan's 100 in black on the darkest blue)
        luminance = image.cmap(image.norm(shown))[..., :3] @ np.array([0.299, 0.587, 0.114])  # (R, T)
        for r in np.flatnonzero(mask):  # unselected rows stay clean
            for j in range(T):
                v = shown[r, j]
                if not v > hide_below:  # `<` wrote a plan's 0.5% cell as "0" (0.5 rounds to even); NaN: no value
                    continue
                ax.text(j, r, format(v, fmt), ha="center", va="center", fontsize=FONT,
                        color="white" if luminance[r, j] < 0.5 else "black")
    ql = query_labels or [None] * S
    cl = cand_labels or [None] * T
    ax.set_yticks(range(len(rows)))
    if show_query_texts:
        ax.set_yticklabels([sentence_label("q", i, query_texts[i], width=44, facet=_short_facet(ql[i]))
                            for i in rows], fontsize=FONT, parse_math=False)
    else:
        ax.set_yticklabels([f"q{i}" for i in rows], fontsize=FONT)
    for r, tick in enumerate(ax.get_yticklabels()):  # the bare `q3` labels were left black
        if not mask[r]:
            tick.set_color(UNSELECTED_COLOR)
    ax.set_xticks(range(T))
    ax.set_xticklabels([sentence_label("c", j, t, width=30, lines=2 if T <= 20 else 1, facet=_short_facet(cl[j]))
                        for j, t in enumerate(cand_texts)], fontsize=FONT, rotation=90, parse_math=False)
    ax.set_title(title, fontsize=TITLE_FONT)
    return image


def _matrix_values(values, name: str) -> np.ndarray:
    """`values` as a float (S, T) array; ValueError naming `name` for another shape or no sentences on a side (a 1-D
    array once raised numpy's unpacking error or an IndexError, and a 0-row matrix was drawn as an empty plot)."""
    array = np.asarray(values, dtype=float)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a (S, T) matrix of query by candidate sentences, got shape {array.shape}")
    if 0 in array.shape:
        raise ValueError(f"{name} is {array.shape[0]}x{array.shape[1]}: it needs at least one query and one candidate "
                         "sentence")
    return array


def _positions(values, name: str) -> np.ndarray:
    """`values` as an int array of positions; ValueError for booleans (a mask, e.g. `query_mask`: its True/False once
    read as positions 1/0) or non-integers (0.7 once read as 0)."""
    array = np.asarray(values).reshape(-1)
    if array.dtype == bool:
        raise ValueError(f"{name} must be integer positions, got a boolean mask; np.flatnonzero(mask) gives its "
                         "positions")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        if not np.issubdtype(array.dtype, np.number) or not np.all(np.isfinite(array)) or np.any(array % 1):
            raise ValueError(f"{name} must be integer positions, got {array.tolist()!r}")
    return array.astype(int)


def _patch(xy, w, h, **kw):
    from matplotlib.patches import Rectangle

    return Rectangle(xy, w, h, **kw)


# ---- plots ------------------------------------------------------------------------------------------
def plot_distances(cost: np.ndarray, query_texts: Sequence[str], cand_texts: Sequence[str], *, ax=None,
                   pair: tuple[int, int] | None = None, query_mask: np.ndarray | None = None,
                   query_labels: Sequence[str | None] | None = None, cand_labels: Sequence[str | None] | None = None,
                   title: str = "sentence L2 distances", annotate: bool = True, show_query_texts: bool = True):
    """Heatmap of the sentence distances `cost (S, T)` (darker = closer; NaN blank), texts on the axes.

    `pair` (i, j), when given, is outlined in red: the single-match pair, so a selected query sentence (a row
    `query_mask` leaves out raises ValueError). `annotate` writes each distance in its cell, to 2 decimals (up to 16
    candidate sentences; past that the numbers no longer fit). Returns the Figure.
    """
    cost = _matrix_values(cost, "cost")
    S, T = cost.shape
    if pair is not None:
        i, j = _positions(pair, "pair") if len(pair) == 2 else (-1, -1)
        if not (0 <= i < S and 0 <= j < T):
            raise ValueError(f"pair {tuple(pair)} is not a cell of the {S}x{T} distance matrix")
        pair = (int(i), int(j))
        if query_mask is not None and len(np.asarray(query_mask).reshape(-1)) == S \
                and not np.asarray(query_mask, dtype=bool).reshape(-1)[i]:  # once outlined on a hatched row
            raise ValueError(f"pair {pair}: query sentence {i} is not selected (query_mask), so it cannot be the "
                             "single match")
    fig, ax = _new_ax(ax, (_matrix_width(T), 2.8 + ROW_INCHES * S))
    _matrix(cost, query_texts, cand_texts, ax, cmap="viridis", query_mask=query_mask, fmt=".2f",
            annotate=annotate, title=title, colorbar_label="L2 distance", query_labels=query_labels,
            cand_labels=cand_labels, show_query_texts=show_query_texts)
    if pair is not None:
        i, j = pair
        ax.add_patch(_patch((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=PAIR_COLOR, lw=2.5,
                            label="single match (min L2)"))
    return fig


def plot_plan(plan: np.ndarray, query_texts: Sequence[str], cand_texts: Sequence[str], *, ax=None,
              query_mask: np.ndarray | None = None, query_labels: Sequence[str | None] | None = None,
              cand_labels: Sequence[str | None] | None = None, title: str = "OT plan",
              annotate: bool = True, show_query_texts: bool = True, rows: Sequence[int] | None = None):
    """Heatmap of a transport plan `plan (S, T)` (mass moved between sentence pairs, sums to 1).

    `rows` draws only those query sentences (e.g. the selected ones; default all). Cells holding more
    than 0.5% of the mass are annotated with that share in percent, rounded to a whole number (so at least 1;
    up to 16 candidate sentences).
    Returns the Figure.
    """
    plan = _matrix_values(plan, "plan")
    n_rows = plan.shape[0] if rows is None else len(rows)
    fig, ax = _new_ax(ax, (_matrix_width(plan.shape[1]), 2.8 + ROW_INCHES * n_rows))
    _matrix(100.0 * plan, query_texts, cand_texts, ax, cmap="Blues", query_mask=query_mask, fmt=".0f",
            annotate=annotate, title=title, colorbar_label="% of mass", query_labels=query_labels,
            cand_labels=cand_labels, show_query_texts=show_query_texts, rows=rows, vmin=0.0, hide_below=0.5)
    return fig


def plot_alignment(alignment: PairAlignment, *, query_labels: Sequence[str | None] | None = None,
                   cand_labels: Sequence[str | None] | None = None, title: str | None = None,
                   annotate: bool = True):
    """Panels stacked top to bottom: the distances with the single-match pair outlined, then each OT plan.

    The distance panel has every query sentence (unselected ones hatched); the plan panels only the
    selected ones (the others carry no mass). The panels share the candidate-sentence axis, labelled
    once at the bottom. Panel titles give the single-match and OT distances; sentences with no vector (left out by
    the encoder, see `pair_alignment`) are named under the figure's title, their labels greyed. Each panel is at least
    `MIN_PANEL_ROWS` rows high, and the figure is widened (up to `MAX_WIDTH`) until its titles fit. Returns the Figure.
    """
    import matplotlib.pyplot as plt

    S, T = alignment.cost.shape
    selected = np.flatnonzero(alignment.query_mask)
    heights = [max(S, MIN_PANEL_ROWS)] + [max(len(selected), MIN_PANEL_ROWS)] * len(alignment.plans)
    size = (_matrix_width(T), 2.9 + 0.45 * len(heights) + ROW_INCHES * sum(heights))
    fig, axes = plt.subplots(len(heights), 1, figsize=size, sharex=True, squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    axes = axes[:, 0]
    plot_distances(alignment.cost, alignment.query_texts, alignment.cand_texts, ax=axes[0], pair=alignment.pair,
                   query_mask=alignment.query_mask, query_labels=query_labels, cand_labels=cand_labels,
                   title=f"L2 distances; single match q{alignment.pair[0]}-c{alignment.pair[1]} "
                         f"= {alignment.minl2_dist:.3f}", annotate=annotate)
    for ax, view in zip(axes[1:], alignment.plans):
        plot_plan(view.plan, alignment.query_texts, alignment.cand_texts, ax=ax, query_mask=alignment.query_mask,
                  query_labels=query_labels, cand_labels=cand_labels, rows=selected,
                  title=f"{view.label}; <D, P> = {view.dist:.3f}", annotate=annotate)
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    blank = np.isnan(alignment.cost)
    q_cut, c_cut = np.flatnonzero(blank.all(axis=1)), np.flatnonzero(blank.all(axis=0))
    for j, tick in enumerate(axes[-1].get_xticklabels()):
        if j in c_cut:
            tick.set_color(UNSELECTED_COLOR)
    if title is None:
        title = f"query {alignment.query_id} vs candidate {alignment.cand_id}".strip()
    if len(q_cut) or len(c_cut):
        cut = ", ".join(_spans(prefix, ids) for prefix, ids in (("q", q_cut), ("c", c_cut)) if len(ids))
        title += f"\nno vector (left out by the encoder, past its max_length): {cut}"
    fig.suptitle(title, fontsize=TITLE_FONT + 1)
    _fit_width(fig)
    return fig


def _spans(prefix: str, ids: Sequence[int]) -> str:
    """Sentence positions as runs: `c5-c19`, `q2, q4-q5`."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{prefix}{r[0]}" + (f"-{prefix}{r[-1]}" if len(r) > 1 else "") for r in runs)


MIN_LIST_WIDTH = 41  # a head line of rank, score, an 8-digit id and a grade (about 35 characters) leaves its title room
PLACEHOLDER = " [...]"  # textwrap.shorten's
MIN_TITLE = len(PLACEHOLDER)  # shorten refuses a narrower room


def _columns(text: str) -> np.ndarray:
    """(len(text),) the columns `text` fills up to each character: a wide one (Chinese, Japanese) takes two."""
    return np.cumsum([2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text], dtype=int)


def _shorten(text: str, width: int) -> str:
    """`text` on one line in at most `width` columns: as `textwrap.shorten` cuts it (whole words, then " [...]") where
    that keeps at least half of the room, else cut within a word (never parting a letter from its accents).
    shorten kept whole words only, so a sentence of Chinese (no spaces) or one opening with a long URL became
    "[...]" alone (244 sentences of the shared ACL Anthology's Chinese abstracts), and it counted a wide character
    as one column though it is drawn about twice as wide."""
    flat = " ".join(text.split())
    if not flat or _columns(flat)[-1] <= width:
        return flat
    short = textwrap.shorten(flat, width)
    room = width - len(PLACEHOLDER)
    if _columns(short)[-1] <= width and len(short) - len(PLACEHOLDER) >= room // 2:
        return short
    head = cut_whole(flat, int(np.searchsorted(_columns(flat), room, side="right"))).rstrip()
    return head + PLACEHOLDER if head else short


def plot_ranked_list(hits: Sequence, *, ax=None, max_pairs: int = 2, grades: Mapping[str, int] | None = None,
                     title: str = "ranked papers", width: int = 100):
    """Ranked papers (aspire.search `Hit`s), each with its best aligned sentence pairs.

    One block per hit: rank, score, paper id, title (and relevance grade when `grades` maps the id),
    then up to `max_pairs` lines "q_i -> s_j (L2, weight)" with both sentences, each cut to `width`
    characters (at least `MIN_LIST_WIDTH`; a wide character, as Chinese ones are, counts two), within a word where
    whole words would keep less than half of it. The head line gives the title what is left of `width` beside rank,
    score, id and grade (at least `MIN_TITLE` characters, where a long id leaves less). Returns the Figure.
    """
    if isinstance(width, bool) or not isinstance(width, int) or width < MIN_LIST_WIDTH:
        raise ValueError(f"plot_ranked_list: width must be an integer >= {MIN_LIST_WIDTH} characters, got {width!r}")
    if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 0:  # -1 once cut the last pair
        raise ValueError(f"plot_ranked_list: max_pairs must be an integer >= 0, got {max_pairs!r}")
    blocks = []
    for hit in hits:
        grade = f"  [grade {grades[hit.paper_id]}]" if grades and hit.paper_id in grades else ""
        head = f"{hit.rank}. {hit.score:+.3f}  {hit.paper_id}  "
        # the title's room is what the head leaves (a fixed width - 35 ran a 40-character id's line past the figure)
        room = max(width - len(head) - len(grade), MIN_TITLE)
        lines = [("head", f"{head}{_shorten(hit.title, room)}{grade}")]
        for p in hit.pairs[:max_pairs]:
            lines.append(("pair", f"q{p.query_sentence} -> s{p.hit_sentence}   L2 {p.dist:.3f}   weight {p.weight:.2f}"))
            lines.append(("q", "q: " + _shorten(p.query_text or "", width)))
            lines.append(("s", "s: " + _shorten(p.hit_text or "", width)))
        blocks.append(lines)
    n_lines = sum(len(b) for b in blocks) + len(blocks)
    fig, ax = _new_ax(ax, (MAX_WIDTH - 1, 0.6 + 0.2 * max(n_lines, 1)))
    ax.set_axis_off()
    ax.set_title(title, fontsize=TITLE_FONT + 1, loc="left")
    style = {"head": dict(fontsize=TITLE_FONT, weight="bold", color="black"),
             "pair": dict(fontsize=FONT, color=PAIR_COLOR),
             "q": dict(fontsize=FONT, color="#1f4e79"),
             "s": dict(fontsize=FONT, color="#333333")}
    y, step = 1.0, 1.0 / max(n_lines, 1)
    for block in blocks:
        for kind, text in block:
            ax.text(0.0 if kind == "head" else 0.03, y, text, transform=ax.transAxes, va="top", parse_math=False,
                    **style[kind])
            y -= step
        y -= step
    if not blocks:
        ax.text(0.0, 1.0, "no hits", transform=ax.transAxes, va="top", fontsize=FONT)
    return fig


def plot_grades_by_rank(rankings: Mapping[str, Sequence[int | None]], *, ax=None, max_grade: int = 3,
                        title: str = "relevance grade at each rank"):
    """Relevance grades down each ranking: one row per ranking (e.g. per query facet), one cell per rank.

    `rankings` maps a name to the grades of its ranked papers, best first (None = not graded, drawn
    blank, as is NaN; a grade outside 0 to `max_grade` raises ValueError). Row labels give the number of papers
    graded >= 2 in the shown ranks. Returns the Figure.
    """
    names = list(rankings)
    depth = max((len(g) for g in rankings.values()), default=0)
    grid = np.full((len(names), depth), np.nan)
    for r, name in enumerate(names):
        for c, g in enumerate(rankings[name]):
            if g is not None and (isinstance(g, (bool, np.bool_)) or not isinstance(g, numbers.Real)):
                raise ValueError(f"ranking {name!r}: the grade at rank {c + 1} is {g!r}, not a number "
                                 "(None = not graded)")  # a string once raised TypeError naming no ranking
            if g is not None and g == g and not 0 <= g <= max_grade:  # once drawn in the nearest bound's colour
                raise ValueError(f"ranking {name!r}: the grade at rank {c + 1} is {g!r}, outside the scale 0 to "
                                 f"max_grade={max_grade}")
            grid[r, c] = np.nan if g is None else g
    fig, ax = _new_ax(ax, (min(MAX_WIDTH, 4.0 + 0.3 * depth), 1.2 + 0.4 * len(names)))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="YlOrRd", vmin=0, vmax=max_grade, aspect="auto")
    bar = ax.figure.colorbar(image, ax=ax, fraction=0.03, pad=0.01, ticks=range(max_grade + 1))
    bar.set_label("grade", fontsize=FONT)
    bar.ax.tick_params(labelsize=FONT)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([f"{n}  ({int(np.nansum(grid[r] >= 2))} with grade >= 2)" for r, n in enumerate(names)],
                       fontsize=FONT)
    ax.set_xticks(range(depth))
    ax.set_xticklabels([str(i + 1) for i in range(depth)], fontsize=FONT)
    ax.set_xlabel("rank", fontsize=FONT)
    ax.set_title(title, fontsize=TITLE_FONT)
    return fig
