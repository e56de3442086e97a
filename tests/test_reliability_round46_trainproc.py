"""Round 46: `python -m aspire.train` user errors, `--help`, and the distance terms (aspire/train/__main__.py,
aspire/train/terms.py) checked against brute-force references. No defect was found; these pin the behaviour."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from aspire.batch import DocBatch
from aspire.train import terms
from aspire.train.__main__ import main
from aspire.train.config import ModelConfig

CFG = "configs/ts_aspire.yaml"


def _no_model(monkeypatch):
    from aspire.train import trainer

    def boom(*_a, **_k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(trainer.run, "__defaults__", (False, boom))


@pytest.mark.parametrize("argv, says", [
    ([], "--config"),
    (["--config", "no/such.yaml"], "no/such.yaml"),
    ([CFG, "train.bogus=1"], "train.bogus"),
    ([CFG, "train.lr=abc"], "train.lr"),
    ([CFG, "model.kind=zzz"], "'hybrid+ts'"),
    ([CFG, "--batch-size", "0"], "--batch-size"),
    ([CFG, "--device", "gpu"], "--device"),
])
def test_usage_errors_exit_2_naming_the_option_or_key(argv, says, capsys, monkeypatch):
    _no_model(monkeypatch)
    argv = ["--config", *argv] if argv[:1] == [CFG] else argv
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_out_dir_holding_another_run_exits_2_before_a_model_loads(tmp_path, capsys, monkeypatch):
    _no_model(monkeypatch)
    (tmp_path / "checkpoint-000010").mkdir()
    assert main(["--config", CFG, f"train.out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint-000010" in err and "train.out_dir" in err


def test_resume_without_checkpoint_and_unknown_encoder_exit_2(tmp_path, capsys, monkeypatch):
    _no_model(monkeypatch)
    assert main(["--config", CFG, "--resume", f"train.out_dir={tmp_path / 'none'}"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["--config", CFG, "model.encoder=no_such_model_zz", f"train.out_dir={tmp_path}"]) == 2
    assert "no_such_model_zz" in capsys.readouterr().err


def test_help_imports_no_torch():
    code = ("import sys\nfrom aspire.train.__main__ import main\ntry:\n    main(['--help'])\n"
            "except SystemExit as e:\n    assert e.code == 0\nassert 'torch' not in sys.modules, 'torch imported'\n"
            "assert 'transformers' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--resume" in done.stdout and "train.device" in done.stdout


def _batch(gen, b=3, s=4, d=5):
    mask = torch.rand(b, s, generator=gen) > 0.3
    mask[:, 0] = True
    emb = torch.randn(b, s, d, generator=gen) * mask[..., None]
    return DocBatch(emb, mask, [str(i) for i in range(b)], [["x"] * s] * b, torch.randn(b, d, generator=gen))


def _cos(x, y):
    return torch.nn.functional.cosine_similarity(x[:, None], y[None], dim=-1)


@pytest.mark.parametrize("name", ["whole", "facet"])
def test_hybrid_pass_terms_match_hand_cosines(name):
    gen = torch.Generator().manual_seed(0)
    a, b = _batch(gen), _batch(gen)
    q = a.whole if name == "whole" else (a.emb * a.mask[..., None]).sum(1) / a.mask.sum(1, keepdim=True)
    ref = _cos(q, b.whole)
    t = terms.PassCosine(name)
    torch.testing.assert_close(t.sim(a, b), ref)
    torch.testing.assert_close(t.pairwise_sim(a, b), ref.diag())
    torch.testing.assert_close(t.dist(a, b), 1 - ref)
    torch.testing.assert_close(t.pairwise_dist(a, b), 1 - ref.diag())


def test_cosine_vector_and_minl2_terms_match_brute_force():
    gen = torch.Generator().manual_seed(1)
    one = torch.ones(3, 1, dtype=torch.bool)
    a1, b1 = DocBatch(torch.randn(3, 1, 5, generator=gen), one), DocBatch(torch.randn(3, 1, 5, generator=gen), one)
    ref = _cos(a1.emb[:, 0], b1.emb[:, 0])
    c = terms.CosineTerm()
    torch.testing.assert_close(c.sim(a1, b1), ref)
    torch.testing.assert_close(c.pairwise_dist(a1, b1), 1 - ref.diag())
    l2 = torch.cdist(a1.emb[:, 0], b1.emb[:, 0])
    v = terms.VectorDist()
    torch.testing.assert_close(v.dist(a1, b1), l2)
    torch.testing.assert_close(v.pairwise_sim(a1, b1), -l2.diag())
    a, b = _batch(gen), _batch(gen)
    ref = torch.stack([torch.stack([torch.cdist(a.emb[i][a.mask[i]], b.emb[j][b.mask[j]]).min() for j in range(3)])
                       for i in range(3)])
    m = terms.ScorerDist(terms.make_scorer("minl2", ModelConfig()), "minl2")
    torch.testing.assert_close(m.dist(a, b), ref)
    torch.testing.assert_close(m.pairwise_dist(a, b), ref.diag())
    torch.testing.assert_close(m.sim(a, b), -ref)


def test_make_scorer_passes_the_config_settings_and_unknown_kind_lists_valid():
    ot = terms.make_scorer("ot", ModelConfig(kind="ot", ot_eps=0.3, ot_tau=2.0, ot_tol=1e-3, ot_max_iter=7))
    assert (ot.eps, ot.tau, ot.sinkhorn_kw["tol"], ot.sinkhorn_kw["max_iter"]) == (0.3, 2.0, 1e-3, 7)
    assert terms.make_scorer("attention", ModelConfig(kind="att", att_tau=0.5)).tau == 0.5
    assert terms.kind_terms("ts+ot") == (("aligned", "ot"), "ot")
    with pytest.raises(ValueError, match=r"unknown model kind 'zz'; valid kinds: .*'hybrid\+ts'"):
        terms.kind_terms("zz")
