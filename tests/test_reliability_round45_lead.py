"""Round 45, the lead's mends: what the round's helpers found outside their files."""

import json

from aspire.encoders.pretrained import resolve_model
from aspire.paths import model_folder


def test_model_folder_reads_the_folder_resolve_model_loads(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-000010" / "model").mkdir(parents=True)
    (run / "checkpoint-000010" / "model" / "config.json").write_text("{}", encoding="utf-8")
    (run / "latest").write_text(json.dumps({"checkpoint": "checkpoint-000010"}), encoding="utf-8")
    assert model_folder(run) == resolve_model(run) == run / "checkpoint-000010" / "model"  # a run: its checkpoint
    (run / "config.json").write_text("{}", encoding="utf-8")  # a model folder that also holds a run pointer
    assert model_folder(run) == resolve_model(run) == run  # once the checkpoint for export, the folder for loading


def test_a_device_option_that_takes_auto_names_it_among_the_choices():
    import argparse

    import pytest

    from aspire.cliutil import device_name, device_or_auto

    with pytest.raises(argparse.ArgumentTypeError, match=r"unknown device 'gpu'; use auto, cpu, cuda, cuda:N or mps"):
        device_or_auto("gpu")  # it takes auto, but its error left it out
    with pytest.raises(argparse.ArgumentTypeError, match=r"unknown device 'gpu'; use cpu, cuda, cuda:N or mps"):
        device_name("gpu")  # an option that does not take auto says so
    assert device_or_auto("auto") == "auto"


def test_the_encoder_refuses_title_and_segment_flags_that_are_not_booleans(tiny_model_dir):
    import pytest

    from aspire.encoders import load_encoder

    for name in ("include_title", "segment_ids"):
        for odd in ("no", 1, None):
            with pytest.raises(ValueError, match=f"{name} must be true or false, got {odd!r}"):
                load_encoder(tiny_model_dir, **{name: odd})  # "no" is truthy: it turned the title on, unsaid
    assert load_encoder(tiny_model_dir, include_title=True).include_title is True
