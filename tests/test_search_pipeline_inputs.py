"""`--search-pipeline` overrides are checked before any paper is encoded (a typo once surfaced only after every
candidate of context2doc had been encoded)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from aspire.config import ConfigError
from aspire.evaluate.search_run import rank_pools_by_search, run_search_pipeline


def test_a_mistyped_pipeline_key_is_refused_before_the_model_or_the_pools_are_touched(tmp_path):
    """The model named does not exist and no pool set is given: only the overrides' check can stop these calls."""
    with pytest.raises(ConfigError, match="stagse"):
        run_search_pipeline(SimpleNamespace(candidates=[]), tmp_path / "out", "x", "/no/such/model", ["stagse=ann"])
    with pytest.raises(ConfigError, match="stagse"):
        rank_pools_by_search(None, {}, None, ["stagse=ann"])  # no pool set, no encoder: never reached
    assert not (tmp_path / "out").exists()


def test_a_search_pipeline_run_shallower_than_r_at_100_is_refused():
    """`context2doc --search-pipeline --depth 5` reported R@5 under the name R@100."""
    with pytest.raises(ValueError, match="context2doc depth 5 is below 100, the depth R@100 is reported at"):
        run_search_pipeline(SimpleNamespace(candidates=list(range(768))), "out", "x", "/no/such/model", depth=5)


def test_the_reviewer_search_pipeline_checks_its_keys_first_too():
    from aspire.evaluate.search_run import run_reviewers_search

    with pytest.raises(ConfigError, match="stagse"):
        run_reviewers_search(None, "out", "x", "/no/such/model", ["stagse=ann"])  # no reviewer set: never reached
