"""Round-14 checks of the trainer against independent references: a hand-written loop (torch AdamW and transformers'
linear schedule) step for step, the warm-up against transformers' `get_linear_schedule_with_warmup` (it held the peak
rate for two updates), an exact resume mid-epoch (weights, optimizer, scheduler, RNG), the tasks' shares over many
batches, best-checkpoint selection on the dev loss, and the errors of a train split smaller than a batch and of a
damaged checkpoint (they named no key, or no file, or trimmed the metrics log before failing)."""

from __future__ import annotations

import copy
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.train import checkpoint as ckpt
from aspire.train.__main__ import main
from aspire.train.data import load_split
from aspire.train.mixing import CYCLE, MixSampler
from aspire.train.state import METRICS, linear_schedule
from aspire.train.trainer import Trainer, build_model, run
from tests.test_train import read_metrics, tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
CROP_TASK = "{name: crop, sources: [cocite], benchmarks_dir: null, dev_share: 0.4, span_max: 2}"


def no_dropout(model):
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def hf_rates(warmup: int, total: int) -> list[float]:
    """The factor of each update under transformers' get_linear_schedule_with_warmup (the reference)."""
    from transformers import get_linear_schedule_with_warmup

    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    sched = get_linear_schedule_with_warmup(opt, warmup, total)
    out = []
    for _ in range(total):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


# ---- the loop against a hand-written one ------------------------------------------------------------------
def test_the_trainer_matches_a_hand_written_loop_step_for_step(tiny_model_dir, examples_dir, tmp_path):
    """Two epochs of 2 steps of 2 micro-batches of 3 pairs, clipped at 0.5, no warm-up: bit-identical weights to a
    plain loop with torch's AdamW (the trainer's two decay groups) and transformers' linear schedule, the batches the
    seeded permutations of each epoch; the logged rate of each update is the reference scheduler's."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=ts", "data.use_dev=false",
                      "train.grad_accum=2", "train.batch_size=3", "train.max_steps=0", "train.epochs=2",
                      "train.clip_norm=0.5", "train.warmup_steps=0", "train.lr=3e-3", "data.max_examples=12")
    model = no_dropout(build_model(cfg))
    reference = copy.deepcopy(model)
    train = load_split(cfg.data, "train")
    trainer = Trainer(cfg, model, train, None)
    assert (len(train), trainer.steps_per_epoch, trainer.total_steps) == (12, 2, 4)
    trainer.train()

    from transformers import get_linear_schedule_with_warmup

    decay = [p for n, p in reference.named_parameters() if p.ndim > 1 and "LayerNorm" not in n]
    rest = [p for n, p in reference.named_parameters() if not (p.ndim > 1 and "LayerNorm" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.train.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=cfg.train.lr)
    sched = get_linear_schedule_with_warmup(opt, 0, 4)
    rates = []
    for epoch in range(2):
        perm = torch.randperm(12, generator=torch.Generator().manual_seed(cfg.train.seed * 1_000_003 + epoch))
        batches = [perm[k * 3 : (k + 1) * 3].tolist() for k in range(4)]
        for s in range(2):
            for b in batches[2 * s : 2 * s + 2]:
                (reference(trainer.collate([train[i] for i in b]))["loss"] / 2).backward()
            torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
            rates.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
            opt.zero_grad()
    got, want = model.state_dict(), reference.state_dict()
    assert max(float((got[k] - want[k]).abs().max()) for k in want) == 0.0
    assert max(float((got[k] - v).abs().max()) for k, v in no_dropout(build_model(cfg)).state_dict().items()) > 1e-3
    logged = [r["lr"] for r in read_metrics(tmp_path / "r") if "lr" in r]
    assert logged == pytest.approx(rates, rel=1e-12, abs=0)


# ---- the learning-rate schedule ---------------------------------------------------------------------------
@pytest.mark.parametrize("warmup,total", [(4, 10), (1, 5), (2, 3), (0, 4), (7, 40)])
def test_the_warm_up_reaches_the_peak_once_then_decays_as_transformers(warmup, total):
    """From update `warmup` on the factors are transformers' exactly; before it they rise linearly from above 0 and
    stay below 1: the peak is one update. It held the peak for two (updates warmup - 1 and warmup), and
    warmup_steps=1 warmed up nothing (the first update already at the full rate)."""
    f = linear_schedule(warmup, total)
    ours, ref = [f(s) for s in range(total)], hf_rates(warmup, total)
    assert ours[warmup:] == pytest.approx(ref[warmup:], rel=1e-12, abs=0)
    ramp = ours[: warmup + 1]
    assert all(0 < a < b for a, b in zip(ramp, ramp[1:]))  # strictly rising: the first update moves, the peak once
    assert ramp[-1] == 1.0 and sum(x == 1.0 for x in ours) == 1
    assert np.allclose(np.diff(ramp), ramp[0]) if warmup else True  # linear, equal steps


def test_a_warm_up_as_long_as_the_run_never_reaches_the_rate_as_the_warning_says(tiny_model_dir, examples_dir,
                                                                                 tmp_path, caplog):
    """train.warmup_steps == the run's steps: the trainer warns the rate never reaches train.lr; it did, at the last
    update. The logged rates are the warm-up's (update + 1) / (warmup + 1) x lr."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=cocite_vector", "data.use_dev=false",
                      "train.max_steps=3", "train.warmup_steps=3", "train.lr=1e-3")
    run(cfg)
    assert "train.warmup_steps 3 >= the run's 3 steps: the rate never reaches train.lr" in caplog.text
    logged = [r["lr"] for r in read_metrics(tmp_path / "r") if "lr" in r]
    assert logged == pytest.approx([2.5e-4, 5e-4, 7.5e-4], rel=1e-12)


# ---- resuming -----------------------------------------------------------------------------------------------
def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("settings", [("model.kind=ts",),
                                      ("model.kind=max", "loss.kind=mnrl", f"tasks=[{{name: cocite}}, {CROP_TASK}]",
                                       "mix.mode=alternating")], ids=["ts", "tasks"])
def test_a_run_resumed_mid_epoch_ends_as_the_straight_run(settings, tiny_model_dir, examples_dir, tmp_path):
    """Stopped at step 2 of an epoch of 3 or 4 steps (2 micro-batches each, dropout on), then resumed: the final weights,
    optimizer and scheduler state, step, epoch, position, RNG states and metrics are the straight run's."""
    s = ("train.grad_accum=2", "train.batch_size=3", "train.max_steps=0", "train.epochs=2", "train.eval_every=0",
         "train.save_every=0", "data.max_examples=18", *settings)
    straight = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", *s))
    part = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *s, "train.stop_after=2"))
    assert part["step"] == 2 and ckpt.load_state(tmp_path / "b" / "checkpoint-000002")["position"] == 4
    resumed = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *s), resume=True)
    assert resumed["step"] == straight["step"] >= 6 and resumed["weights_digest"] == straight["weights_digest"]
    a, b = (ckpt.load_state(tmp_path / d / ckpt.read_pointer(tmp_path / d)["checkpoint"]) for d in "ab")
    for key in ("optimizer", "scheduler", "step", "epoch", "position", "rng", "best_dev_loss"):
        assert same(a[key], b[key]), key
    strip = lambda d: [{k: v for k, v in r.items() if k != "triples_per_s"} for r in read_metrics(tmp_path / d)]  # noqa: E731
    assert strip("a") == strip("b")


# ---- the tasks' shares ---------------------------------------------------------------------------------------
def test_each_task_gets_its_ratio_of_the_batches_over_many_steps():
    """Over 20 cycles of alternating batches a task's share of the pairs is its ratio's share to within one slot of
    the 60-slot cycle; a mixed batch splits by ratio exactly when the batch size allows; sequential stages own their
    steps' micro-batches in order."""
    sizes, offsets, ratios = [90, 45, 70], [0, 90, 135], [1.0, 0.3, 0.7]
    task = lambda i: max(t for t, o in enumerate(offsets) if i >= o)  # noqa: E731
    alt = MixSampler(sizes, offsets, "alternating", ratios, 4, seed=5, epoch=0)
    counts = Counter(task(i) for g in range(20 * CYCLE) for i in alt.batch(g))
    total = sum(counts.values())
    for t, r in enumerate(ratios):
        assert abs(counts[t] / total - r / sum(ratios)) <= 1 / CYCLE
    mixed = MixSampler(sizes, offsets, "mixed", [2.0, 1.0, 3.0], 12, seed=5, epoch=0)
    counts = Counter(task(i) for g in range(200) for i in mixed.batch(g))
    assert counts == {0: 800, 1: 400, 2: 1200}
    seq = MixSampler(sizes, offsets, "sequential", [1.0] * 3, 4, seed=5, epoch=0, stage_batches=[3, 2, 4])
    assert [task(b[0]) for b in seq] == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert all(len({task(i) for i in b}) == 1 for b in seq)


# ---- model selection ------------------------------------------------------------------------------------------
def test_the_best_checkpoint_is_the_lowest_dev_loss_and_its_model_scores_it(tiny_model_dir, examples_dir, tmp_path):
    """Evaluated every step of 6: `best` names the step of the lowest logged dev loss (a later worse one does not
    move it), and the saved model of that checkpoint, loaded again, has that dev loss; pruning keeps it."""
    out = tmp_path / "r"
    cfg = tiny_config(tiny_model_dir, examples_dir, out, "model.kind=cocite_vector", "train.eval_every=1",
                      "train.lr=3e-2", "train.keep_checkpoints=1")
    run(cfg)
    dev = {r["step"]: r["dev_loss"] for r in read_metrics(out) if "dev_loss" in r}
    assert sorted(dev) == [1, 2, 3, 4, 5, 6] and len(set(dev.values())) == 6
    best = ckpt.read_pointer(out, ckpt.BEST)
    assert best["step"] == min(dev, key=dev.get) != 6 and best["dev_loss"] == dev[best["step"]]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == sorted({best["checkpoint"], "checkpoint-000006"})
    model = build_model(cfg, str(out / best["checkpoint"] / ckpt.MODEL_DIR))
    again = Trainer(cfg, model, load_split(cfg.data, "train"), load_split(cfg.data, "dev")).dev_loss()
    assert again == pytest.approx(best["dev_loss"], rel=1e-5)


def test_dev_records_carry_the_epoch_of_their_step(tiny_model_dir, examples_dir, tmp_path):
    """Two epochs of 3 steps, evaluated and logged every step: each dev record names the epoch its step trained in,
    as the step's train record does (at an epoch's last step the trainer's counters already say the next epoch,
    for the checkpoint; the dev record carried that number: 0, 0, 1, 1, 1, 2)."""
    out = tmp_path / "r"
    cfg = tiny_config(tiny_model_dir, examples_dir, out, "model.kind=cocite_vector", "train.eval_every=1",
                      "train.log_every=1", "train.batch_size=10", "train.max_steps=0", "train.epochs=2")
    run(cfg)
    records = read_metrics(out)
    dev = {r["step"]: r["epoch"] for r in records if "dev_loss" in r and r["step"] > 0}
    train = {r["step"]: r["epoch"] for r in records if "loss" in r}
    assert dev == train == {1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1}


# ---- data too small for a batch -------------------------------------------------------------------------------
@pytest.mark.parametrize("settings,said", [
    (("model.kind=cocite_vector", "train.batch_size=31"),
     r"the train split holds 30 example\(s\), fewer than one batch \(train.batch_size=31 x 1 rank\(s\)\)"),
    (("model.kind=cocite_vector", "data.max_examples=3"), r"holds 3 example\(s\).*train.batch_size=4"),
    (("model.kind=cocite_vector", "train.batch_size=2", "train.grad_accum=16"),
     r"an epoch holds 15 micro-batch\(es\) of train.batch_size=2 .* train.grad_accum=16"),
    (("model.kind=max", "loss.kind=mnrl", f"tasks=[{{name: cocite}}, {CROP_TASK}]", "mix.mode=mixed",
      "train.batch_size=40"), r"task 'crop': 9 example\(s\) .* its share 20 of train.batch_size=40"),
    (("model.kind=max", "loss.kind=mnrl", f"tasks=[{{name: cocite}}, {CROP_TASK}]", "mix.mode=alternating",
      "train.batch_size=31"), r"task 'cocite': 30 example\(s\) .* train.batch_size=31"),
], ids=["split", "max_examples", "grad_accum", "mixed", "alternating"])
def test_a_train_split_smaller_than_a_batch_is_refused_naming_the_key(settings, said, tiny_model_dir, examples_dir,
                                                                       tmp_path):
    """It was "30 examples do not fill one batch of 31 x 1 rank(s)" / "task 1: ..." / "15 micro-batches per epoch <
    grad_accum 16": no setting, no split, a task by number."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "data.use_dev=false", *settings)
    with pytest.raises(ValueError, match=said):
        run(cfg)


def test_an_empty_train_split_and_a_bad_key_are_named(tiny_model_dir, examples_dir, tmp_path, capsys):
    empty = tmp_path / "examples"
    shutil.copytree(examples_dir, empty)
    (empty / "examples.train.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"examples.train.jsonl holds no examples"):
        run(tiny_config(tiny_model_dir, empty, tmp_path / "r", "model.kind=cocite_vector", "data.use_dev=false"))
    with pytest.raises(SystemExit):
        main(["--config", str(Path(__file__).resolve().parents[1] / "configs" / "base.yaml"), "train.warmup=3"])
    assert "unknown config key(s) ['train.warmup']" in capsys.readouterr().err


# ---- damaged checkpoints ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stopped_run(tiny_model_dir, examples_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "run"
    run(tiny_config(tiny_model_dir, examples_dir, out, "model.kind=cocite_vector", "train.stop_after=4"))
    assert ckpt.read_pointer(out)["step"] == 4
    return out


def test_a_truncated_checkpoint_model_is_named_and_the_metrics_log_left_alone(stopped_run, tiny_model_dir,
                                                                              examples_dir, tmp_path):
    """A truncated model.safetensors was a bare "SafetensorError: Error while deserializing header" naming no file,
    raised after the metrics log had been trimmed to the checkpoint's step."""
    out = tmp_path / "run"
    shutil.copytree(stopped_run, out)
    weights = out / "checkpoint-000004" / ckpt.MODEL_DIR / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    metrics = (out / METRICS).read_text()
    assert '"event": "end"' in metrics  # what a trim drops
    # named by the encoder's own load (`load_weights`), before the trainer's catch-all would name it
    with pytest.raises(ValueError, match=r"checkpoint-000004/model: its weights file does not load \(Error while "
                                         r"deserializing header"):
        run(tiny_config(tiny_model_dir, examples_dir, out, "model.kind=cocite_vector"), resume=True)
    assert (out / METRICS).read_text() == metrics


@pytest.mark.parametrize("key,value", [("position", "x"), ("epoch", -1), ("world_size", 0)])
def test_a_trainer_state_with_a_damaged_counter_is_named_before_training(key, value, stopped_run, tiny_model_dir,
                                                                         examples_dir, tmp_path):
    """A position that is not an integer failed deep in the sampler ("'str' object cannot be interpreted as an
    integer"), after the metrics log was trimmed."""
    out = tmp_path / "run"
    shutil.copytree(stopped_run, out)
    path = out / "checkpoint-000004" / ckpt.STATE_FILE
    state = torch.load(path, weights_only=False)
    state[key] = value
    torch.save(state, path)
    metrics = (out / METRICS).read_text()
    with pytest.raises(ValueError, match=rf"trainer_state.pt: the trainer state's {key} must be an integer"):
        run(tiny_config(tiny_model_dir, examples_dir, out, "model.kind=cocite_vector"), resume=True)
    assert (out / METRICS).read_text() == metrics


def test_a_mixed_batch_that_the_ratios_do_not_split_whole_is_said(tiny_model_dir, examples_dir, tmp_path, caplog):
    """Two tasks of ratio 1 in mixed batches of 3 pairs train 2:1 in every batch, so over the whole run (MixSampler
    counts it), where the config says every batch holds each task in proportion to its ratio: it was silent."""
    from aspire.train.tasks import build_tasks

    tasks = (f"tasks=[{{name: cocite}}, {CROP_TASK}]", "mix.mode=mixed", "model.kind=max", "loss.kind=mnrl",
             "data.use_dev=false")
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", *tasks, "train.batch_size=3")
    data = build_tasks(cfg, "train")
    sampler = MixSampler(data.sizes, data.offsets, "mixed", [1.0, 1.0], 3, seed=0, epoch=0)
    counts = Counter(int(i >= data.offsets[1]) for g in range(60) for i in sampler.batch(g))
    assert counts == {0: 120, 1: 60}
    Trainer(cfg, build_model(cfg), data, None)
    assert ("every batch of train.batch_size=3 holds [2, 1] pair(s) of the tasks ['cocite', 'crop'], not their "
            "ratios' [1.5, 1.5]") in caplog.text
    caplog.clear()
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", *tasks, "train.batch_size=4")
    Trainer(cfg, build_model(cfg), data, None)
    assert "mix.mode mixed" not in caplog.text
