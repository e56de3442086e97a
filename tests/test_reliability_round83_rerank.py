"""The evaluators' cross-encoder (`--rerank DIR`): it runs on `--device`, its `--rerank-max-length` is checked before
the first stage, and a `--rerank-top` deeper than the ranked lists is refused (context2doc's `--depth`) or recorded
as what was done, said once."""

from __future__ import annotations

import json
import logging

import pytest
from test_benchmarks import make_reviewer_set

import aspire.scoring.crossencoder as scoring_ce
from aspire.benchmarks import context2doc as c2d
from aspire.cli.evaluate import check_cross_encoder, main
from aspire.retrieval.crossencoder import RerankOptions, rerank_texts
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


# ---- --rerank-top deeper than the ranked lists -------------------------------------------------------------------

def test_context2doc_refuses_a_rerank_top_deeper_than_its_depth(tmp_path, tiny_cross_encoder_dir, toy_context2doc,
                                                                  capsys):
    """`--depth 100 --rerank-top 200` re-scored the 100 documents a query keeps, but results.json recorded top_n 200
    (and the experiment was named ce200); the depth is known before anything runs, so the pair is refused."""
    with pytest.raises(SystemExit) as stop:
        main(["context2doc", "--bm25", "--rerank", str(tiny_cross_encoder_dir), "--depth", "100",
              "--rerank-top", "200", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert "--rerank-top 200 is deeper than the 100 documents a query keeps (--depth)" in err, err
    assert toy_context2doc == []


def test_a_rerank_deeper_than_every_list_records_what_it_rescored_and_says_so_once(tiny_cross_encoder_dir, caplog):
    run = {"q1": [("a", 3.0), ("b", 2.0), ("c", 1.0)], "q2": [("a", 2.0), ("c", 1.0)]}
    texts = {d: f"the {d} model" for d in "abc"}
    queries = {"q1": "the model", "q2": "a task"}
    with caplog.at_level(logging.WARNING, logger="aspire"):
        ranked, record = rerank_texts(queries, texts, run, RerankOptions(str(tiny_cross_encoder_dir), top_n=5))
    assert record["top_n"] == 5 and record["reranked_per_list"] == {"most": 3, "fewest": 2}
    assert record["speed"]["pairs"] == 5
    said = [r.getMessage() for r in caplog.records if "deeper than every ranked list" in r.getMessage()]
    assert said == ["cross-encoder: the top 5 asked for is deeper than every ranked list: at most 3 documents a list "
                    "were re-scored"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aspire"):
        _, record = rerank_texts(queries, texts, run, RerankOptions(str(tiny_cross_encoder_dir), top_n=3))
    assert record["reranked_per_list"] == {"most": 3, "fewest": 2} and not caplog.records  # one list reaches 3


def test_reviewers_record_the_submissions_they_rescored(tmp_path, tiny_cross_encoder_dir, capsys):
    """Each reviewer rates 2 or 3 submissions: the default --rerank-top 50 re-scores those whole, recorded beside
    top_n 50, and not warned (a reviewer's list is meant to be re-scored whole)."""
    out = tmp_path / "out"
    assert main(["reviewers", "--data", str(make_reviewer_set(tmp_path / "rm")), "--bm25", "--rerank",
                 str(tiny_cross_encoder_dir), "--out", str(out)]) == 0
    rerank = json.loads((out / "results.json").read_text())["rerank"]
    assert rerank["top_n"] == 50 and rerank["reranked_per_list"] == {"most": 3, "fewest": 2}
    assert "deeper than every ranked list" not in capsys.readouterr().err
