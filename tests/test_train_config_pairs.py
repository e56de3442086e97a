"""The co-cited pairs' own `data` settings in a multi-task run with no `cocite` task: nothing reads them. A quick
`data.max_examples=50` run of configs/query_adapter_context2doc.yaml trained on all 4,188 context2doc pairs, and
`data.hard_negatives` of a distill run was never opened, both without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from aspire.config import ConfigError, load_config
from aspire.train.config import Config, DataConfig

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("config, overrides, named", [
    ("query_adapter_context2doc.yaml", ["data.max_examples=50"], r"data\.max_examples=50 with tasks \['context2doc'\]"),
    ("distill_mpnet.yaml", ["data.hard_negatives=runs/cc/hard.jsonl", "data.example_negatives=true"],
     r"data\.hard_negatives='runs/cc/hard\.jsonl', data\.example_negatives=True with tasks \['distill'\]"),
    ("ts_aspire.yaml", ["tasks=[{name: crop}]", "data.both_directions=false"],
     r"data\.both_directions=False with tasks \['crop'\]"),
])
def test_a_pair_setting_without_the_cocite_task_is_refused_naming_it(config, overrides, named):
    with pytest.raises(ConfigError, match=named + r": only the co-cited pairs read"):
        load_config(Config, REPO / "configs" / config, overrides)


@pytest.mark.parametrize("config, overrides, key, value", [
    ("ts_aspire.yaml", ["data.max_examples=50", "data.both_directions=false"], "max_examples", 50),  # no tasks
    ("contrastive_abstract.yaml", ["data.max_examples=50", "data.example_negatives=true"], "example_negatives", True),
    ("distill_mpnet.yaml", ["data.max_sentences=8", "data.dev_batches=2"], "max_sentences", 8),  # read by every task
])
def test_the_pair_settings_are_taken_where_the_pairs_train(config, overrides, key, value):
    assert getattr(load_config(Config, REPO / "configs" / config, overrides).data, key) == value


def test_the_pair_settings_are_data_settings():
    from aspire.train.config import PAIR_KEYS

    assert set(PAIR_KEYS) <= set(vars(DataConfig()))
