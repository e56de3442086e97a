"""Round 19: small defects that round-18 helpers found outside their files, each confirmed and fixed: two-fold's
missing common options, the suite's `--data` help, the index refusal's `add` hint, base.yaml's override form, the
dev-loss log under data.dev_batches, a NaN loss of a left-out anchor in the training loss, and VectorCosine reading
sentence 0 of a several-sentence batch."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import torch

from aspire.batch import DocBatch

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


# ---- 1. two-fold takes -q / --log-level ------------------------------------------------------------------------

def test_two_fold_takes_quiet_and_log_level(tmp_path, capsys):
    from aspire.cli import main as aspire_main

    missing = tmp_path / "no-run"
    with pytest.raises(SystemExit) as stop:  # once "unrecognized arguments: -q"
        aspire_main(["two-fold", "--candidate", str(missing), "-q", "--log-level", "WARNING"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "unrecognized arguments" not in err and f"no results.json in {missing}" in err
    with pytest.raises(FileNotFoundError, match="no results.json"):  # DEBUG: the error itself, as every command
        aspire_main(["two-fold", "--candidate", str(missing), "--log-level", "DEBUG"])


def test_two_fold_quiet_still_chooses_and_keeps_warnings(tmp_path, capsys, caplog):
    """`-q` on a real choice: the table still printed, the tie warning still said."""
    from aspire.benchmarks.csfcube import FACETS
    from aspire.evaluate.two_fold import main

    folds = {g: {s: {"MAP": 50.0, "NDCG%20": 60.0} for s in ("fold1_dev", "fold2_dev", "fold1_test", "fold2_test")}
             for g in ("all", *FACETS)}
    for name in ("a", "b"):  # tied on every dev figure
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"folds": folds}), encoding="utf-8")
    with caplog.at_level("WARNING", logger="aspire.evaluate.two_fold"):
        assert main(["--candidate", str(tmp_path / "*"), "-q"]) == 0
    out = capsys.readouterr().out
    assert f"chosen on fold1_dev: {tmp_path / 'a'}" in out and "candidates tie" in caplog.text


# ---- 2. `aspire evaluate suite --help` names each data folder once ------------------------------------------------

def test_suite_data_help_names_each_folder_once():
    from aspire.benchmarks import BENCHMARKS
    from aspire.cli.evaluate_suite import suite_args

    parser = argparse.ArgumentParser()
    suite_args(parser)
    text = next(a.help for a in parser._actions if "--data" in a.option_strings)
    named = text.removeprefix("folder holding ").split(", ")
    assert sorted(named) == sorted({b.folder + "/" for b in BENCHMARKS.values()})  # acl-anthology/ three times once
    assert len(named) == len(set(named))


# ---- 3. the refusal to build over an index names a runnable `aspire index add` -----------------------------------

def test_index_exists_hint_is_a_runnable_add_command(tmp_path):
    from aspire.index.__main__ import _parser
    from aspire.index.disk import IndexExistsError, refuse_existing_index

    out = tmp_path / "idx"
    (out / "gen-000001").mkdir(parents=True)
    (out / "gen-000001" / "manifest.json").write_text("{}", encoding="utf-8")
    (out / "CURRENT").write_text("gen-000001", encoding="utf-8")
    with pytest.raises(IndexExistsError) as refused:
        refuse_existing_index(out)
    hint = re.search(r"use `aspire index (add [^`]*)`", str(refused.value))
    assert hint, str(refused.value)  # once "use `add` to extend it": `add` takes --index, not the build's --out
    args = _parser().parse_args(hint[1].split())
    assert args.command == "add" and args.index == str(out) and args.corpus == "FILE"


# ---- 4. base.yaml's run line uses the one override form ------------------------------------------------------------

def test_base_yaml_run_line_uses_section_key_value(capsys):
    from aspire.cliutil import normalize_overrides

    line = next(ln for ln in (REPO / "configs" / "base.yaml").read_text().splitlines() if "python -m aspire.train " in ln)
    overrides = re.search(r"\[([^\]]*?)\s*\.\.\.\]", line)[1].split()
    assert overrides and all(re.fullmatch(r"[a-z_]+\.[a-z_]+=\S+", o) for o in overrides), line  # once --train.x=
    assert normalize_overrides(overrides) == overrides
    assert "deprecat" not in capsys.readouterr().err.lower()


# ---- 5. the dev-loss log counts what dev_loss scores under data.dev_batches -----------------------------------------

def test_dev_loss_log_counts_the_examples_dev_loss_scores(tiny_model_dir, examples_dir, tmp_path, caplog):
    from aspire.train.data import load_dev_split, load_split
    from aspire.train.trainer import DEV_SEED, Trainer, build_model
    from tests.test_train import tiny_config

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", "train.batch_size=4",
                      "data.dev_batches=1")
    train, dev = load_split(cfg.data, "train"), load_dev_split(cfg.data)
    assert len(dev) >= 8
    with caplog.at_level("INFO", logger="aspire.train.trainer"):
        trainer = Trainer(cfg, build_model(cfg), train, dev)
    scored = []
    loader = trainer._loader

    def counting(data, sampler, seed):
        if seed == DEV_SEED:
            scored.extend(i for batch in sampler for i in batch)
        return loader(data, sampler, seed)

    trainer._loader = counting
    trainer.dev_loss()
    assert len(scored) == 4  # 1 batch of 4
    said = re.search(r"the dev loss scores (\d+) of the (\d+) examples of the dev split", caplog.text)
    assert said and (int(said[1]), int(said[2])) == (len(scored), len(dev)), caplog.text  # once 8 of the 10
    assert "data.dev_batches=1" in caplog.text


def test_dev_loss_log_silent_when_every_example_is_scored(tiny_model_dir, examples_dir, tmp_path, caplog):
    """A cap above the dev split's batches changes nothing; the whole-batch tail is still said."""
    from aspire.train.data import load_dev_split, load_split
    from aspire.train.trainer import Trainer, build_model
    from tests.test_train import tiny_config

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", "train.batch_size=4",
                      "data.dev_batches=100000")
    train, dev = load_split(cfg.data, "train"), load_dev_split(cfg.data)
    with caplog.at_level("INFO", logger="aspire.train.trainer"):
        Trainer(cfg, build_model(cfg), train, dev)
    whole = len(dev) - len(dev) % 4
    if whole < len(dev):
        assert f"the dev loss scores {whole} of the {len(dev)} examples of the dev split (whole batches of " \
               "train.batch_size=4)" in caplog.text
    else:
        assert "the dev loss scores" not in caplog.text


# ---- 6. a NaN / inf loss of a left-out anchor leaves the training loss alone --------------------------------------

@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_loss_of_a_left_out_anchor_leaves_loss_and_gradient_finite(tiny_model_dir, tmp_path, bad):
    from aspire.train.data import TripletCollator, load_split
    from aspire.train.trainer import build_model
    from tests.test_train import tiny_config, write_examples_dir

    examples = write_examples_dir(tmp_path / "examples")
    cfg = tiny_config(tiny_model_dir, examples, tmp_path / "run", "model.kind=cocite_vector")
    model = build_model(cfg).eval()  # no dropout: two passes agree
    data = load_split(cfg.data, "train")
    batch = TripletCollator(model.tokenize, data.papers)([data[i] for i in range(8)])
    real = model._term_loss

    def left_out(fill):
        def term_loss(*args):
            per_anchor, valid = real(*args)
            first = torch.arange(len(valid)) == 0
            return torch.where(first, torch.full_like(per_anchor, fill), per_anchor), valid & ~first
        return term_loss

    model._term_loss = left_out(bad)
    out = model(batch)
    out["loss"].backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(out["loss"]) and grads and all(bool(torch.isfinite(g).all()) for g in grads)
    model.zero_grad()
    model._term_loss = left_out(7.0)  # a finite value there: the same loss, as row 0 counts for no task
    same = model(batch)
    torch.testing.assert_close(out["loss"], same["loss"])
    torch.testing.assert_close(out["task_loss"], out["loss/vector"][None])  # the mean over the anchors counted
    assert int(out["task_rows"][0]) == int(same["task_rows"][0]) <= 7


# ---- 7. VectorCosine refuses several vectors a paper and an unselected vector -------------------------------------

def docs(emb: torch.Tensor, mask: torch.Tensor | None = None, ids: list[str] | None = None) -> DocBatch:
    mask = torch.ones(emb.shape[:2], dtype=torch.bool) if mask is None else mask
    return DocBatch(emb, mask, ids if ids is not None else [f"p{i}" for i in range(len(emb))])


def test_vector_cosine_refuses_several_vectors_a_paper():
    from aspire.scoring.vector import VectorCosine

    torch.manual_seed(0)
    one, three = docs(torch.randn(2, 1, 5)), docs(torch.randn(2, 3, 5))
    cos = VectorCosine()
    for call in (cos.score, cos.pairwise_score, cos.dist, cos.pairwise_dist):
        with pytest.raises(ValueError, match=r"single-vector papers \(B, 1, D\) expected.*\(2, 3, 5\)"):
            call(one, three)  # once the cosine of sentence 0 alone
        with pytest.raises(ValueError, match=r"single-vector papers"):
            call(three, one)


def test_vector_cosine_refuses_an_unselected_vector_naming_the_paper():
    from aspire.scoring.vector import VectorCosine

    torch.manual_seed(0)
    good = docs(torch.randn(3, 1, 4))
    masked = docs(torch.randn(3, 1, 4), torch.tensor([[True], [False], [True]]), ["A", "B", "C"])
    cos = VectorCosine()
    with pytest.raises(ValueError, match=r"papers \['B'\] of the candidates have no selected vector"):
        cos.score(good, masked)
    with pytest.raises(ValueError, match=r"papers \['B'\] of the queries have no selected vector"):
        cos.score(masked, good)
    with pytest.raises(ValueError, match=r"papers \['B'\] of the second papers"):
        cos.pairwise_dist(good, masked)


def test_vector_cosine_of_single_vectors_is_the_cosine():
    """The checks pass what is right: all-pairs and aligned cosines against numpy."""
    import numpy as np

    from aspire.scoring.vector import VectorCosine

    torch.manual_seed(0)
    a, b = torch.randn(3, 1, 6), torch.randn(3, 1, 6)
    an, bn = a[:, 0].numpy(), b[:, 0].numpy()
    want = (an @ bn.T) / np.linalg.norm(an, axis=1)[:, None] / np.linalg.norm(bn, axis=1)[None, :]
    cos = VectorCosine()
    np.testing.assert_allclose(cos.score(docs(a), docs(b)).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cos.pairwise_dist(docs(a), docs(b)).numpy(), 1 - np.diag(want), rtol=1e-5, atol=1e-6)
