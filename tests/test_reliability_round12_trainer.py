"""Round-12 correctness checks of the trainer and the document model against independent references."""

from __future__ import annotations

import copy

import pytest
import torch
from test_formats import perturb_adapters
from test_train import tiny_config

from aspire.config import ConfigError
from aspire.data.papers import Paper
from aspire.train import checkpoint as ckpt
from aspire.train.data import EpochBatchSampler, TripletCollator, load_split
from aspire.train.document_model import DocumentModel
from aspire.train.tasks import build_tasks
from aspire.train.trainer import DEV_SEED, Trainer, build_model, run

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def no_dropout(model):
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def test_a_step_of_grad_accum_micro_batches_takes_the_mean_of_their_gradients(tiny_model_dir, examples_dir, tmp_path):
    """TrainConfig: a step is `grad_accum` micro-batches, each its own in-batch negatives, the step's gradient the
    mean of their losses' gradients: checked exactly in float64 against the two micro-batches by hand."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=ts", "train.grad_accum=2",
                      "train.max_steps=1", "train.clip_norm=1e6", "data.use_dev=false", "train.batch_size=3")
    model = no_dropout(build_model(cfg)).double()
    reference = copy.deepcopy(model)
    train = load_split(cfg.data, "train")
    trainer = Trainer(cfg, model, train, None)
    grads = {}
    trainer.optimizer.register_step_pre_hook(lambda *_: grads.update(
        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    trainer.train()
    batches = list(EpochBatchSampler(len(train), 3, cfg.train.seed, 0))[:2]
    losses = [reference(trainer.collate([train[i] for i in b]))["loss"] for b in batches]
    (sum(losses) / 2).backward()
    ref = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
    assert grads.keys() == ref.keys() and len(ref) > 10
    assert max(float((grads[n] - ref[n]).abs().max()) for n in ref) < 1e-12
    assert sum(float(g.abs().sum()) for g in ref.values()) > 0


PAPERS = [
    Paper("a", "the model", ["we propose a new method.", "results show it improves the task."]),
    Paper("b", "neural text", ["the data is text.", "two documents.", "we show state of the art."]),
]
CROP_TASK = "{name: crop, sources: [cocite], benchmarks_dir: null, dev_share: 0.4, span_max: 2}"


@pytest.mark.parametrize("adapter", [True, False])
def test_encode_after_another_tasks_batch_uses_the_first_tasks_code_and_adapter(adapter, tiny_model_dir, examples_dir,
                                                                                 tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=max", "loss.kind=mnrl",
                      "model.control_codes=task", f"tasks=[{{name: cocite}}, {CROP_TASK}]", "mix.mode=alternating",
                      *(["model.adapter.kind=lora", "model.adapter.per_task=true"] if adapter else []))
    model = build_model(cfg)
    perturb_adapters(model.encoder)
    model.save_pretrained(tmp_path / "saved")  # inference: the first task's (cocite) code and adapter
    expected = DocumentModel.from_pretrained(tmp_path / "saved").encode(PAPERS).emb
    data = build_tasks(cfg, "train")
    crop = [data.examples[data.offsets[1] + i] for i in range(4)]
    batch = TripletCollator(model.tokenize, data.papers, data.weights, data.sources, ["cocite", "crop"])(crop)
    assert batch.task == "crop"
    model(batch)  # a training step of the second task switches the encoder to its code and adapter
    with torch.no_grad():
        as_crop = model.embed(model.tokenize(PAPERS, ["crop"] * len(PAPERS))).emb
    assert not torch.allclose(as_crop, expected, atol=1e-4)  # the two tasks encode differently
    assert torch.allclose(model.encode(PAPERS).emb, expected, atol=1e-6)
    assert model.encoder.code == "[COCITE]"


def test_dev_evaluations_leave_the_training_trajectory_as_it_is(tiny_model_dir, examples_dir, tmp_path):
    """The dev loss between steps (and before the first) takes nothing from the training RNG or mode."""
    digests = []
    for name, extra in (("a", ["train.eval_every=0", "train.save_every=0"]), ("b", ["train.eval_every=1", "train.dev_before=true"])):
        cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / name, "model.kind=ts", *extra)
        digests.append(run(cfg)["weights_digest"])
    assert digests[0] == digests[1]


def test_dev_loss_is_the_triple_weighted_mean_over_the_seed_0_whole_batches(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=ts", "train.batch_size=3")
    model = build_model(cfg)
    train, dev = load_split(cfg.data, "train"), load_split(cfg.data, "dev")
    trainer = Trainer(cfg, model, train, dev)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    value = trainer.dev_loss()
    assert torch.equal(before, torch.get_rng_state()) and model.training
    model.eval()
    total = count = 0.0
    assert len(dev) % 3  # a tail that fills no batch: left out
    with torch.no_grad():
        for b in EpochBatchSampler(len(dev), 3, DEV_SEED, 0):
            out = model(trainer.collate([dev[i] for i in b]))
            total += float(out["loss"]) * int(out["triples"])
            count += int(out["triples"])
    assert value == pytest.approx(total / count, rel=1e-6)


@pytest.mark.parametrize("unread", ["train.dev_before=true", "data.dev_batches=2"])
def test_dev_settings_without_a_dev_split_are_refused_naming_them(unread, tiny_model_dir, examples_dir, tmp_path):
    with pytest.raises(ConfigError, match=rf"{unread.split('=')[0]} with data.use_dev=false: no dev loss is taken"):
        tiny_config(tiny_model_dir, examples_dir, tmp_path, "data.use_dev=false", unread)
    tiny_config(tiny_model_dir, examples_dir, tmp_path, "data.use_dev=true", unread)  # read with a dev split


def test_pruning_keeps_the_newest_checkpoints_past_a_million_steps(tmp_path):
    for step in (999_998, 999_999, 1_000_000, 1_000_001):
        ckpt.save_checkpoint(tmp_path, step, lambda path: None, {"step": step})
        ckpt.prune_checkpoints(tmp_path, keep=2)
    kept = sorted(p.name for p in tmp_path.glob("checkpoint-*"))
    assert kept == [ckpt.checkpoint_name(1_000_000), ckpt.checkpoint_name(1_000_001)]


def test_two_fresh_lora_runs_of_one_config_train_the_same_weights(tiny_model_dir, examples_dir, tmp_path):
    """LoRA's A matrices are random: they were drawn from whatever the process RNG held when the model was built
    (unseeded in a new process), so two runs of one config and train.seed trained different models."""
    digests = []
    for name, seed in (("a", 1), ("b", 2)):
        torch.manual_seed(seed)  # what came before the run in this process
        cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / name, "model.kind=max", "model.adapter.kind=lora",
                          "train.max_steps=2", "train.eval_every=0", "train.save_every=0")
        digests.append(run(cfg)["weights_digest"])
    assert digests[0] == digests[1]
