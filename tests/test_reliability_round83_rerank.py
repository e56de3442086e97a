"""The evaluators' cross-encoder (`--rerank DIR`): it runs on `--device`, and its `--rerank-max-length` is checked
before the first stage."""

from __future__ import annotations

import json

import pytest
from test_benchmarks import make_reviewer_set

import aspire.scoring.crossencoder as scoring_ce
from aspire.benchmarks import context2doc as c2d
from aspire.cli.evaluate import check_cross_encoder, main
from aspire.retrieval.crossencoder import RerankOptions
from tests.test_reliability_round41_c2dbench import _all_test_split, _write


@pytest.fixture()
def toy_context2doc(tmp_path, monkeypatch):
    """`context2doc` reads a toy benchmark (2 queries, 3 candidates) whatever its --data and --split."""
    source = _write(tmp_path)
    _, split = _all_test_split(tmp_path, source)
    bench = c2d.load_context2doc(tmp_path, "test", split)
    calls = []

    def load(data, split):
        calls.append(split)
        return bench

    monkeypatch.setattr(c2d, "load_context2doc", load)
    return calls


@pytest.fixture()
def devices(monkeypatch):
    """The `device` every cross-encoder is loaded with, the load itself unchanged."""
    seen = []
    load = scoring_ce.load_cross_encoder

    def recording(model, max_length=None, device=None, seed=0):
        seen.append(device)
        return load(model, max_length, device, seed)

    monkeypatch.setattr(scoring_ce, "load_cross_encoder", recording)
    return seen


def _first_stage_args(command, tmp_path, small_csfcube=None):
    if command == "context2doc":
        return ["context2doc", "--bm25"]
    if command == "reviewers":
        return ["reviewers", "--data", str(make_reviewer_set(tmp_path / "rm")), "--bm25"]
    return ["csfcube", "--data", str(small_csfcube), "--bm25"]


@pytest.mark.parametrize("command", ["context2doc", "reviewers", "csfcube"])
def test_each_evaluator_loads_its_cross_encoder_on_the_device_given(command, tmp_path, tiny_cross_encoder_dir,
                                                                    toy_context2doc, devices, request, capsys):
    """`--device` is "torch device for encoding and scoring", but the evaluators built their cross-encoder without
    it (the CPU, always): `--device cuda --rerank DIR` scored every pair on the CPU. A run of BM25 alone refused
    `--device` as unread ("running no model") although its cross-encoder reads it. Now the device given reaches the
    cross-encoder's load and the record; without --device it is the load's default."""
    csf = request.getfixturevalue("small_csfcube") if command == "csfcube" else None
    common = [*_first_stage_args(command, tmp_path, csf), "--rerank", str(tiny_cross_encoder_dir), "--rerank-top", "2"]
    assert main([*common, "--device", "cpu", "--out", str(tmp_path / "given")]) == 0, capsys.readouterr().err
    assert devices == ["cpu"]
    assert json.loads((tmp_path / "given" / "results.json").read_text())["rerank"]["device"] == "cpu"
    assert main([*common, "--out", str(tmp_path / "default")]) == 0, capsys.readouterr().err
    assert devices == ["cpu", None]
    assert json.loads((tmp_path / "default" / "results.json").read_text())["rerank"]["device"] is None


def test_rerank_options_build_their_reranker_on_their_device(tiny_cross_encoder_dir, devices):
    reranker = RerankOptions(str(tiny_cross_encoder_dir), top_n=2, device="cpu").reranker()
    assert devices == ["cpu"] and reranker.model.device.type == "cpu"


# ---- --rerank-max-length past the model's positions, before the first stage -------------------------------------

def test_a_rerank_max_length_past_the_models_positions_is_refused_before_the_first_stage(
        tmp_path, tiny_cross_encoder_dir, toy_context2doc, capsys):
    """The tiny cross-encoder holds 128 positions. `--rerank-max-length 256` was refused only when the cross-encoder
    loaded, after the benchmark was read and its first stage run (a model's encoding, on a real run); now the
    command's up-front check of --rerank refuses it with the same message, naming both options."""
    status = main(["context2doc", "--bm25", "--rerank", str(tiny_cross_encoder_dir), "--rerank-max-length", "256",
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert (f"--rerank {tiny_cross_encoder_dir} --rerank-max-length 256: cross-encoder model "
            f"'{tiny_cross_encoder_dir}': max_length 256 is past the 128 word pieces") in err, err
    assert toy_context2doc == []  # the benchmark was never read
    assert not (tmp_path / "out").exists()


def test_check_cross_encoder_takes_a_length_within_the_models_positions(tiny_cross_encoder_dir):
    check_cross_encoder(str(tiny_cross_encoder_dir), 128)  # the limit itself
    check_cross_encoder(str(tiny_cross_encoder_dir))  # the model's own length
    with pytest.raises(ValueError, match="--rerank-max-length 129: .*give 128 or fewer"):
        check_cross_encoder(str(tiny_cross_encoder_dir), 129)
