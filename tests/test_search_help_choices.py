"""`aspire search --help` names each first stage once: one choice, "ann,bm25", holds the separator argparse puts
between choices, so its default display read `{ann,bm25,ann,bm25,whole}` (four choices or five?)."""

from __future__ import annotations

import pytest

from aspire.cli.search import build_parser
from aspire.index.config import STAGES


def test_the_stages_choices_are_shown_apart():
    text = build_parser("aspire search").format_help()
    assert "{ann|bm25|ann,bm25|whole}" in text and "{ann,bm25,ann,bm25,whole}" not in text
    assert set("|".join(STAGES).split("|")) == {"ann", "bm25", "ann,bm25", "whole"}


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_is_still_a_choice(stage):
    assert build_parser("aspire search").parse_args(["--index", "IDX", "--stages", stage]).stages == stage
