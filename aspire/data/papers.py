"""Papers: the unit of input. `Paper` holds an id, a title and the abstract as a list of sentences."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Paper:
    """One paper: `sentences` is the abstract already split; `labels` (optional) one facet label a sentence."""

    paper_id: str
    title: str
    sentences: list[str]
    labels: list[str] | None = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)
