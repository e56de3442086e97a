"""Round 17: the experiment scripts (`experiments/`) against the package as it is now: every script imports and answers
`--help` (check_known_answers.py included, which an earlier round left out); a script's quick mode writes no committed
result file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_reliability_round10_experiments import _script  # an experiment script as a module

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"




# ---- check_known_answers.py ---------------------------------------------------------------------------------------


def test_check_known_answers_quick_leaves_the_committed_table_alone(monkeypatch, tmp_path, capsys):
    """`--quick` (3 of the 7 checks, 8 of 34 figures) wrote its table over experiments/results/known_answers.json, the
    committed record of every figure, whatever `--out` said; it now writes OUT/known_answers.json, and `--results`
    names the file."""
    module = _script("check_known_answers")
    monkeypatch.setattr(module, "REPO", tmp_path)  # where the committed table would be written: a scratch copy

    def checks(out, quick):
        assert quick
        yield "a figure", {"x": 1.0}, lambda: {"x": 1.0}, 1e-9

    monkeypatch.setattr(module, "checks", checks)
    out = tmp_path / "runs"
    monkeypatch.setattr(sys, "argv", ["check_known_answers.py", "--quick", "--out", str(out)])
    assert module.main() == 0
    assert not (tmp_path / "experiments" / "results" / "known_answers.json").exists()
    rows = json.loads((out / "known_answers.json").read_text())["rows"]
    assert [(r["check"], r["figure"], r["ok"]) for r in rows] == [("a figure", "x", True)]

    named = tmp_path / "elsewhere" / "table.json"
    monkeypatch.setattr(sys, "argv", ["check_known_answers.py", "--quick", "--out", str(out), "--results", str(named)])
    assert module.main() == 0
    assert json.loads(named.read_text())["rows"][0]["now"] == 1.0
    capsys.readouterr()


# ---- train_processes_real.py --------------------------------------------------------------------------------------


def test_train_processes_real_gives_overrides_in_the_form_the_trainer_reads(monkeypatch, tmp_path, capsys):
    """Every config override went to `python -m aspire.train` as `--section.key=value`, a form the command now reads
    with a note that it will go; they are `section.key=value`, and each one is a key of the run's config."""
    from aspire.config import load_config
    from aspire.train.config import Config

    module = _script("train_processes_real")
    commands = []

    def run(cmd, env, log):
        commands.append(cmd)
        return 0.0

    def run_killed(cmd, env, out_dir, kill_after, log):
        commands.append(cmd)
        return 0.0, kill_after

    def summary(out_dir, seconds):
        return {"seconds": seconds, "end_step": 4, "weights_digest": ["d", "d"], "losses": [], "dev_losses": []}

    monkeypatch.setattr(module, "run", run)
    monkeypatch.setattr(module, "run_killed", run_killed)
    monkeypatch.setattr(module, "summary", summary)
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(sys, "argv", ["train_processes_real.py", "--steps", "4", "--kill-after", "2", "--save-every",
                                      "2", "--out", str(tmp_path / "runs")])
    module.main()
    capsys.readouterr()
    assert len(commands) == 6
    for cmd in commands:
        train = cmd[cmd.index("aspire.train") + 1:]
        overrides = [a for a in train if "=" in a]
        assert overrides and all(not a.startswith("-") for a in overrides), train
        assert [a for a in train if a.startswith("-")] in (["--config"], ["--config", "--resume"])
        load_config(Config, REPO / "configs" / "tsot_aspire.yaml", overrides)  # every key known (ValueError if not)
    assert "train.stop_after=2" in commands[4]


# ---- bench_evaluate.py --------------------------------------------------------------------------------------------


def test_bench_evaluate_says_how_many_pools_it_ranks(shared_data):
    """Its docstring said it ranks "all 150 facet pools"; CSFCube has 50 (query, facet) pools, which its loop over
    `pool_set.pools[facet]` ranks."""
    from aspire.benchmarks.csfcube import load_csfcube

    pool_set = load_csfcube(shared_data / "csfcube")
    counts = {facet: len(pools) for facet, pools in pool_set.pools.items()}
    doc = " ".join(_script("bench_evaluate").__doc__.split())
    assert f"rank all {sum(counts.values())} facet pools" in doc
    assert ", ".join(f"{n} {facet}" for facet, n in counts.items()) in doc


# ---- profile_ot_scorer.py -----------------------------------------------------------------------------------------


def test_profile_ot_scorer_reads_the_pool_bench_sinkhorn_saves(tmp_path, monkeypatch):
    """`bench_sinkhorn.cached_pool` saves `{"pool": tensor, "made_by": ...}`; the profile passed what `torch.load` gave
    straight to `make_case` (`'dict' object has no attribute 'shape'`, before any timing). It reads the pool from the
    record, takes a bare tensor (the older caches) and names a file holding neither."""
    import torch

    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    bench_sinkhorn, profile = _script("bench_sinkhorn"), _script("profile_ot_scorer")
    pool = torch.randn(60, 8)
    path = tmp_path / "pool.pt"
    bench_sinkhorn.cached_pool(path, {"source": "synthetic"}, lambda: pool)
    assert isinstance(torch.load(path), dict)  # the record, as the benchmark writes it
    read = profile.read_pool(path)
    assert torch.equal(read, pool)
    _, x, y, cost, a, b = bench_sinkhorn.make_case(read, 4, 5, seed=1)
    assert cost.shape == (4, 5, 5)

    torch.save(pool, tmp_path / "bare.pt")
    assert torch.equal(profile.read_pool(tmp_path / "bare.pt"), pool)
    torch.save({"made_by": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="other.pt: not a sentence pool"):
        profile.read_pool(tmp_path / "other.pt")
