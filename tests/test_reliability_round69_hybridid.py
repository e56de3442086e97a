"""Round 69: hybrid options the scores never read make no ensemble member of their own (`ensemble.member_run`).

`HybridScorer` reads the calibration of a weighted term only (and scores a term without one as (0, 1)), and its
`tau` / `eps` only for the `ot` term; yet two members differing only in a calibration of an unweighted term, in a
calibration of (0, 1), or in tau / eps with `ot` unweighted were two members, the same scores fused twice."""

from __future__ import annotations

import re

import pytest
import torch
import yaml

from aspire.evaluate.ensemble import load_ensemble
from aspire.scoring.scorers import HybridScorer
from tests.test_hybrid import _toy
from tests.test_reliability_round57_ensemble import _write

INERT = [  # (first, second): options of two hybrids whose scores are equal
    ("{}", "{calibration: {minl2: [1, 2], ot: [5, 0.1]}}"),  # default weights: whole + facet
    ("{weights: {whole: 1, minl2: 0.5}}", "{weights: {whole: 1, minl2: 0.5, ot: 0}, calibration: {ot: [3, 7]}}"),
    ("{weights: {whole: 1, minl2: 0.5}}", "{weights: {whole: 1, minl2: 0.5}, tau: 7, eps: 0.9}"),
    ("{tau: 2}", "{eps: 0.5}"),
    ("{weights: {whole: 1, ot: 0.5}}", "{weights: {whole: 1, ot: 0.5}, calibration: {whole: [0, 1], ot: [0.0, 1]}}"),
    ("{weights: {whole: 1, ot: 1}, calibration: {ot: [-1, 2]}, tau: 2}",
     "{weights: {whole: 1, ot: 1}, calibration: {ot: [-1, 2], facet: [4, 4], whole: [0, 1]}, tau: 2.0}"),
]
READ = [  # options that move the scores
    ("{weights: {whole: 1, ot: 0.5}}", "{weights: {whole: 1, ot: 0.5}, calibration: {whole: [0.1, 1]}}"),
    ("{}", "{calibration: {facet: [0, 2]}}"),
    ("{weights: {whole: 1, ot: 0.5}}", "{weights: {whole: 1, ot: 0.5}, tau: 7}"),
    ("{weights: {ot: 1}, eps: 0.5}", "{weights: {ot: 1}}"),
]


def _scorer(options: str) -> HybridScorer:
    return HybridScorer(**yaml.safe_load(options))


@pytest.mark.parametrize("first, second, equal", [(a, b, True) for a, b in INERT] + [(a, b, False) for a, b in READ])
def test_the_inert_options_leave_every_score_as_it_was(first, second, equal):
    """The premise, on random inputs: all-pairs and aligned scores are bitwise equal, or differ where an option is read."""
    q, c, aligned = _toy(1), _toy(2, b=4), _toy(3, b=4)
    a, b = _scorer(first), _scorer(second)
    assert torch.equal(a.score(q, c), b.score(q, c)) is equal
    assert torch.equal(a.pairwise_score(aligned, c), b.pairwise_score(aligned, c)) is equal


@pytest.mark.parametrize("first, second", INERT)
def test_hybrid_members_differing_in_an_inert_option_are_refused_naming_both(tmp_path, first, second):
    path = _write(tmp_path, [f"{{name: a, model: minilm, scorer: hybrid, scorer_options: {first}}}",
                             f"{{name: b, model: minilm, scorer: hybrid, scorer_options: {second}}}"])
    with pytest.raises(ValueError, match=re.escape(f"{path}: members[1] (b): the same run as members[0] (a): ")):
        load_ensemble(path)


@pytest.mark.parametrize("first, second", READ)
def test_hybrid_members_differing_in_an_option_the_scores_read_are_kept(tmp_path, first, second):
    path = _write(tmp_path, [f"{{name: a, model: minilm, scorer: hybrid, scorer_options: {first}}}",
                             f"{{name: b, model: minilm, scorer: hybrid, scorer_options: {second}}}"])
    config = load_ensemble(path)
    assert [m.name for m in config.members] == ["a", "b"]
    assert [m.scorer_options for m in config.members] == [yaml.safe_load(first), yaml.safe_load(second)]  # as written, for the runs


def test_the_members_options_are_kept_as_written_for_their_runs(tmp_path):
    """Identity only: a kept member's options reach its run unchanged (its results record them as written)."""
    path = _write(tmp_path, ["{name: a, model: minilm, scorer: hybrid, scorer_options: {calibration: {ot: [3, 7]}, "
                             "tau: 7}}", "{name: b, model: minilm, scorer: ot}"])
    assert load_ensemble(path).members[0].scorer_options == {"calibration": {"ot": [3, 7]}, "tau": 7}
