"""`--search-pipeline` overrides are checked before any paper is encoded (a typo once surfaced only after every
candidate of context2doc had been encoded)."""

from __future__ import annotations

import pytest

from aspire.config import ConfigError
from aspire.evaluate.search_run import rank_pools_by_search, run_search_pipeline


def test_a_mistyped_pipeline_key_is_refused_before_the_model_or_the_pools_are_touched(tmp_path):
    with pytest.raises(ConfigError, match="stagse"):
        run_search_pipeline(None, tmp_path / "out", "x", "/no/such/model", ["stagse=ann"])  # not loaded: no such
    with pytest.raises(ConfigError, match="stagse"):
        rank_pools_by_search(None, {}, None, ["stagse=ann"])  # no pool set, no encoder: never reached
    assert not (tmp_path / "out").exists()
