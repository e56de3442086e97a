"""Round 79: reading user data and training configs."""

from __future__ import annotations

import pytest

from aspire.config import ConfigError, load_config
from aspire.train.config import Config


# ---- config: a base-60 number's advice fits it ---------------------------------------------------------------
@pytest.mark.parametrize("text, value", [("1:30", "90"), ("-1:30.5", "-90.5")])
def test_base_60_number_is_not_told_to_drop_a_leading_zero(text, value):
    """`train.lr=1:30` was refused with "write the number without its leading 0", which it has not."""
    with pytest.raises(ConfigError) as err:
        load_config(Config, None, [f"train.lr={text}"])
    message = str(err.value)
    assert message.startswith(f"train.lr: {text} is the base-60 number {value} ")
    assert "leading 0" not in message
    assert f"write {value} for the number (or quote it, for text)" in message


def test_octal_number_keeps_its_advice():
    with pytest.raises(ConfigError, match=r"^train\.seed: 010 is the octal number 8 in YAML 1\.1 but 10 in YAML 1\.2: "
                                          r"write the number without its leading 0 \(or quote it, for text\)$"):
        load_config(Config, None, ["train.seed=010"])
