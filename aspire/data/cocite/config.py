"""Co-citation pipeline settings: one dataclass a stage, nested in `CociteConfig` (`configs/data_cocite.yaml`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal

from aspire.config import ConfigError, load_config, ranged

REPORT = "report.json"  # each stage's counts; written last, so its presence marks a finished stage
SPLITS = ("train", "dev")


@dataclass
class IngestConfig:
    placeholder: str = "[CIT]"  # replaces citation markers in `text_clean`
    splitter: str = "pysbd"  # input B only: a name in aspire.data.sentences.SPLITTERS, or "regex"
    on_error: Literal["raise", "skip"] = "raise"  # bad lines: stop, or skip and count them
    # leave out the context2doc benchmark's test sentences (aspire.benchmarks.context2doc), wherever they occur
    exclude_benchmark_test: bool = True
    # both inputs: leave out every cited paper of CSFCube or the reviewer set (by title, paper id, abstract key or
    # containment: aspire.benchmarks.heldout.cited_benchmark_papers) from the records / sentences citing it
    exclude_benchmark_papers: bool = True

    def held_out_inputs(self, held_out: Iterable[str] | None, held_out_papers, source: Path) -> tuple[set[str], bool]:
        """What the two switches hold out of `source`, an input's file: (the context2doc test sentences to drop,
        whether benchmark papers are taken out). ValueError for `exclude_benchmark_test` without `held_out`;
        `exclude_benchmark_papers` without `held_out_papers` removes nothing, with a warning (the command layer
        always passes them). The sentences come back stripped, as both inputs compare a record's sentence; a
        `held_out` that is one string (it would hold out its characters) or holds a non-string is a TypeError."""
        if isinstance(held_out, (str, bytes)):
            raise TypeError(f"held_out must be a collection of sentences, got a {type(held_out).__name__} "
                            f"{held_out!r:.60}")
        if held_out is not None:  # once: a generator read by the check below would hold out nothing after it
            held_out = list(held_out)
        odd = next((s for s in held_out or () if not isinstance(s, str)), None)
        if odd is not None:
            raise TypeError(f"held_out must hold sentences (strings), got {type(odd).__name__} {odd!r:.60}")
        if self.exclude_benchmark_test and held_out is None:
            raise ValueError("ingest.exclude_benchmark_test needs the held-out sentences (held_out=, from "
                             "aspire.benchmarks.context2doc.held_out_for); or set ingest.exclude_benchmark_test=false")
        if self.exclude_benchmark_papers and held_out_papers is None:
            logging.getLogger(__name__).warning(
                "ingest.exclude_benchmark_papers: no held_out_papers given (aspire.benchmarks.heldout."
                "cited_benchmark_papers): CSFCube and reviewer-set papers are NOT removed from %s", source)
        return ({sentence.strip() for sentence in held_out or ()} if self.exclude_benchmark_test else set(),
                self.exclude_benchmark_papers and held_out_papers is not None)


@dataclass
class FilterConfig:
    """Each filter is switched off by setting its bound to null (None)."""

    confirmed_only: bool = False  # keep only contexts whose every citation link is confirmed
    max_cited: int | None = ranged(3, ge=2)  # co-cited sets of at most this many papers (a set holds two or more)
    min_context_tokens: int | None = ranged(5, ge=0)
    max_context_tokens: int | None = ranged(60, ge=0)
    count_on: Literal["text", "text_clean"] = "text_clean"  # which context text the bounds count
    tokenizer: str = "regex"  # a name in TOKENIZERS
    min_abstract_sentences: int | None = ranged(3, ge=0)
    max_abstract_sentences: int | None = ranged(20, ge=0)
    max_sentence_tokens: int | None = ranged(80, ge=0)  # no abstract sentence longer than this
    # a context citing a paper whose abstract fails: drop that paper from the context's set
    # (the context stays if >= 2 cited papers remain) or drop the whole context
    bad_abstract: Literal["drop_paper", "drop_context"] = "drop_paper"
    dedup: Literal["text", "text_and_set", "none"] = "text"  # key for dropping repeated contexts

    def __post_init__(self) -> None:
        """ConfigError for a lower bound above its upper bound, at load time (once accepted: the filter stage ran and
        removed every context, or failed every abstract, before anything said the bounds could not both hold)."""
        for low, high, what in (("min_context_tokens", "max_context_tokens", "context"),
                                ("min_abstract_sentences", "max_abstract_sentences", "abstract")):
            lo, hi = getattr(self, low), getattr(self, high)
            if isinstance(lo, int) and isinstance(hi, int) and lo > hi:  # None: that bound is off
                raise ConfigError(f"filter.{low}={lo} is above filter.{high}={hi}: no {what} could pass; "
                                  "lower the first, raise the second, or set one to null")


@dataclass
class SplitConfig:
    dev_fraction: float = ranged(0.1, ge=0, lt=1)  # share of co-cited sets placed in dev (whole components at a time)
    seed: int = 13


@dataclass
class ExamplesConfig:
    num_negatives: int = ranged(1, ge=0)  # random negatives an example names (0: none)
    negatives_from: Literal["split", "all"] = "split"  # papers of the same split, or every paper
    seed: int = 13


@dataclass
class CociteConfig:
    ingest: IngestConfig = field(default_factory=IngestConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    examples: ExamplesConfig = field(default_factory=ExamplesConfig)


@dataclass
class AlignConfig:
    """The `align` stage's settings (`aspire.data.align`): here, free of torch, so a bad key is refused before the
    teacher model loads."""

    text_field: Literal["contexts_clean", "contexts"] = "contexts_clean"  # the contexts to align to
    max_seq_length: int | None = ranged(128, ge=1)  # teacher's input length for sentences and contexts (None: its own)
    encode_batch_size: int = ranged(64, ge=1)
    chunk: int = ranged(256, ge=1)  # examples aligned per tensor batch


def load_cocite_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> CociteConfig:
    """Defaults, then the YAML file (e.g. `configs/data_cocite.yaml`), then dotted overrides."""
    return load_config(CociteConfig, path, list(overrides))
