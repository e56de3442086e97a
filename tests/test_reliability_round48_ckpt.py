"""Round 48: checkpoints (`aspire.train.checkpoint`) checked with a tiny model built in code, temp dirs and a
brute-force pruning rule."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from aspire.train import checkpoint as ckpt


def _trained():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 6)).pow(2).sum().backward()
        opt.step()
        sched.step()
    return model, opt, sched


def _save_model(out: Path, step: int, model, opt, sched, best: bool = False) -> Path:
    def write(d: Path) -> None:
        (d / ckpt.MODEL_DIR).mkdir()
        torch.save(model.state_dict(), d / ckpt.MODEL_DIR / "weights.pt")
    state = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": torch.get_rng_state(),
             "step": step}
    record = {"checkpoint": ckpt.checkpoint_name(step), "step": step, "dev_loss": 1.0 / (step + 1)} if best else None
    return ckpt.save_checkpoint(out, step, write, state, best=record)


# ---- the fix: a truncated trainer state is refused naming its file ------------------------------------------------
def test_a_trainer_state_truncated_anywhere_is_a_value_error_naming_the_file(tmp_path):
    """A state file cut past its first part raised a bare `OSError: [Errno 22] Invalid argument` (no file named; 106 of
    204 cut points here), which `damaged_torch_file` let through as if it named the file. Now every cut is a
    ValueError naming trainer_state.pt."""
    model, opt, sched = _trained()
    path = _save_model(tmp_path, 3, model, opt, sched) / ckpt.STATE_FILE
    data = path.read_bytes()
    for cut in range(0, len(data), max(1, len(data) // 60)):
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=str(path)):
            ckpt.load_state(path.parent)


def test_a_missing_or_folder_trainer_state_still_raises_its_os_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / ckpt.STATE_FILE)):
        ckpt.load_state(tmp_path)
    (tmp_path / ckpt.STATE_FILE).mkdir()
    with pytest.raises(IsADirectoryError, match=str(tmp_path / ckpt.STATE_FILE)):
        ckpt.load_state(tmp_path)


# ---- the fix: a negative `keep` is refused, not read as 0 ---------------------------------------------------------
@pytest.mark.parametrize("keep", [-1, 1.0, True])
def test_prune_refuses_a_keep_that_is_not_a_whole_number_before_removing(tmp_path, keep):
    """keep=-1 removed every unprotected checkpoint, as keep=0 does."""
    model, opt, sched = _trained()
    for step in (1, 2, 3, 4):
        _save_model(tmp_path, step, model, opt, sched)
    with pytest.raises(ValueError, match="keep"):
        ckpt.prune_checkpoints(tmp_path, keep)
    assert len(list(tmp_path.glob("checkpoint-*"))) == 4


# ---- checked, correct ---------------------------------------------------------------------------------------------
def test_save_then_load_gives_identical_weights_optimizer_and_next_random_draws(tmp_path):
    model, opt, sched = _trained()
    torch.manual_seed(123)
    torch.rand(3)
    final = _save_model(tmp_path, 7, model, opt, sched)
    expected_draws = torch.rand(5)  # the uninterrupted run's next numbers
    torch.manual_seed(999)  # a fresh process's RNG
    state = ckpt.load_state(final)
    torch.set_rng_state(state["rng"])
    assert torch.equal(torch.rand(5), expected_draws)
    weights = torch.load(final / ckpt.MODEL_DIR / "weights.pt")
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    model2, opt2, sched2 = _trained()
    with torch.no_grad():
        for p in model2.parameters():
            p.add_(1.0)
    model2.load_state_dict(weights)
    opt2.load_state_dict(state["optimizer"])
    sched2.load_state_dict(state["scheduler"])
    for a, b in zip(opt.state_dict()["state"].values(), opt2.state_dict()["state"].values()):
        assert all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)
    x = torch.randn(4, 6)
    for o, m, s in ((opt, model, sched), (opt2, model2, sched2)):  # one more step agrees bit for bit
        o.zero_grad()
        m(x).pow(2).sum().backward()
        o.step()
        s.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    assert ckpt.read_pointer(tmp_path) == {"checkpoint": "checkpoint-000007", "step": 7}


@pytest.mark.parametrize("keep", [0, 1, 2, 3, 6])
def test_pruning_matches_a_brute_force_rule_for_every_best_position(tmp_path, keep):
    model, opt, sched = _trained()
    steps = [5, 10, 100, 999, 1000]
    for best_at in steps:
        out = tmp_path / f"b{best_at}-k{keep}"
        for step in steps:
            _save_model(out, step, model, opt, sched, best=step == best_at)
        ckpt.prune_checkpoints(out, keep)
        newest = set(sorted(steps)[max(len(steps) - keep, 0):]) if keep else set()
        expected = sorted(newest | {best_at, steps[-1]})
        assert sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) == expected
        for name in (ckpt.LATEST, ckpt.BEST):  # each pointer names a whole checkpoint
            assert (out / ckpt.read_pointer(out, name)["checkpoint"] / ckpt.STATE_FILE).is_file()
        assert not list(itertools.chain(out.glob(".tmp-*"), out.glob(".replaced-*")))
