"""Facet labels of abstract sentences, and choosing a query's sentences by facet or by position.

Papers may carry one label a sentence (`Paper.labels`, read from `pred_labels`; CSFCube's are
`background_label`, `objective_label`, `method_label`, `result_label`). `FACETS` groups stored
labels into the three facets a user asks for; `objective` counts as background, as in CSFCube.

`resolve_selection("method,3", labels)` -> 0-based sentence positions in the order the items name them
(not sorted; `aspire.index.config.check_selection` range-checks, merges and sorts them): each
comma-separated item is a 0-based position or a name (a facet, or a stored label itself, any case).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Sequence

from aspire.config import is_bool

FACETS = {
    "background": ("background_label", "objective_label", "background", "objective"),
    "method": ("method_label", "method"),
    "result": ("result_label", "result"),
}
# the control code a query may ask for (`aspire.encoders.codes.query_code`): its selection's facet, none, or one
FACET_CODE_CHOICES = ("auto", "none", *FACETS)
POSITION = re.compile(r"-?[0-9]+")  # a typed 0-based position (negative ones are refused by the range check)


def facet_of(label: str | None) -> str | None:
    """The facet ("background", "method", "result") of a stored label in any case (`pred_labels` are free strings:
    "Method_Label" is the method's, as `resolve_selection` reads it), else None."""
    key = label.lower() if isinstance(label, str) else label
    for facet, names in FACETS.items():
        if key in names:
            return facet
    return None


def title_labelled(labels: list[str] | None, n_sentences: int) -> list[str] | None:
    """A paper's labels for its `n_sentences` encoded sentences: an encoder that adds the title as sentence 0
    (`include_title`, or a paper without abstract sentences) gives it the label "title", which is no facet's."""
    return ["title", *labels] if labels is not None and n_sentences == len(labels) + 1 else labels


def _integer(x) -> int | None:
    """`x` as an int when it is one integer scalar (int, numpy integer, 0-d integer array or tensor), else None."""
    if getattr(x, "ndim", 0) != 0:
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def parse_selection(spec: str | int | Sequence[int | str], paper_id: str = "") -> list[int | str]:
    """`"0,2"` / `"method"` / `["method", 3]` / `3` -> items: ints (0-based positions) and lower-case names.
    Positions may be numpy or 0-d tensor integers. Raises ValueError, naming `paper_id` when given, for an empty
    selection or item, for an item that is neither an integer nor a string (a bool, a float such as 2.0, bytes), and
    for a typed `-0` (a negative position is refused by the range check, and `-0` would read as sentence 0)."""
    whose = f" for paper {paper_id!r}" if paper_id else ""
    if isinstance(spec, str):
        items = spec.split(",")
    elif isinstance(spec, (bytes, bytearray)):  # iterated, b"0,2" once gave positions 48, 44, 50
        raise ValueError(f"sentence selection{whose}: expected positions or facet names, got bytes {spec!r} "
                         "(decode them to a string)")
    elif is_bool(spec) or _integer(spec) is not None:  # one position (a bool is refused below)
        items = [spec]
    elif isinstance(spec, Iterable):
        items = list(spec)
    else:
        raise ValueError(f"sentence selection{whose}: expected positions or facet names, got {type(spec).__name__} "
                         f"{spec!r}")
    out: list[int | str] = []
    for item in items:
        if is_bool(item):
            raise ValueError(f"sentence selection{whose}: expected a position or a facet name, got {item!r}")
        if not isinstance(item, str):  # a tensor(0) or 2.0 was once read as the name 'tensor(0)' or '2.0'
            position = _integer(item)
            if position is None:
                raise ValueError(f"sentence selection{whose}: expected a 0-based position (an integer) or a facet "
                                 f"name, got {type(item).__name__} {item!r}")
            out.append(position)
            continue
        text = item.strip()
        if not text:
            raise ValueError(f"sentence selection {spec!r}{whose} has an empty item")
        if POSITION.fullmatch(text) and text.startswith("-") and int(text) == 0:  # int() reads it as the first sentence
            raise ValueError(f"sentence selection {spec!r}{whose}: {text!r} is no 0-based position (no position is "
                             "negative; the first sentence is 0)")
        out.append(int(text) if POSITION.fullmatch(text) else text.lower())  # "--1", "²": names, not int()'s error
    if not out:
        raise ValueError(f"the sentence selection{whose} is empty; give at least one 0-based position or facet name")
    return out


def selection_facet(spec: str | Sequence[int | str] | None) -> str | None:
    """The one facet a selection asks for (`"method"`, `"method_label"` -> method), or None when it
    names positions, several facets or none (the facet whose control code a query gets)."""
    if spec is None:
        return None
    items = parse_selection(spec)
    facets = {facet_of(x) if isinstance(x, str) else None for x in items}
    return facets.pop() if len(facets) == 1 else None


def resolve_selection(spec: str | Sequence[int | str], labels: Sequence[str] | None,
                      paper_id: str = "") -> list[int]:
    """0-based positions of the sentences `spec` selects (ints pass through unchecked, in order given;
    names add every sentence whose label is that facet or that label). Raises ValueError naming the
    paper when the selection (or an item of it) is empty, a name selects nothing or the paper has no labels."""
    items = parse_selection(spec, paper_id)
    names = [x for x in items if isinstance(x, str)]
    if not names:
        return [int(x) for x in items]
    who = f"paper {paper_id!r}" if paper_id else "the query paper"
    if labels is None:
        raise ValueError(f"{who} has no facet labels (give papers with pred_labels), so {names[0]!r} selects "
                         "nothing; select its sentences by 0-based position instead, e.g. 0,2")
    chosen: list[int] = []
    for item in items:
        if isinstance(item, int):
            chosen.append(item)
            continue
        # a stored label in any case: "METHOD_LABEL" is a method sentence by name and by facet alike
        hits = [i for i, lab in enumerate(labels) if lab.lower() == item or facet_of(lab) == item]
        if not hits:
            known = sorted(set(labels))
            raise ValueError(f"{who} has no {item!r} sentence; its labels: {', '.join(known)} "
                             f"(facets: {', '.join(FACETS)})")
        chosen += hits
    return sorted(set(chosen), key=chosen.index)
