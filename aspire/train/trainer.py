"""The trainer: one loop for single-process and `torchrun` (DDP) training of any `DocumentModel`.

AdamW with linear warm-up then linear decay, gradient accumulation, gradient clipping, seeded
epochs (`EpochBatchSampler`), dev loss on the held-out co-cited sets for model selection (`best`
pointer), atomic checkpoints (`aspire.train.checkpoint`) holding everything needed to continue
exactly (optimizer, scheduler, per-rank RNG states, step, epoch, position within the epoch, the
loss sums of the metrics window not yet logged), a tqdm bar and a JSONL metrics log (`metrics.jsonl`):
a run stopped and resumed logs the records of one run straight through (bar the timing). Under DDP
only rank 0 writes files. A run holds `out_dir/.lock` from start to end (rank 0 under DDP), so a
second run into the folder fails at once naming the first; free space for a checkpoint is checked
before training starts and before each save, and a full disk ends the run with one error line
(`aspire.storage.DiskFullError`), the last checkpoint kept for --resume. A step whose gradient norm is NaN or
infinite (a NaN or infinite loss) ends the run with a ValueError naming the step, before the update is applied.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from aspire.cliutil import check_folder
from aspire.config import is_whole, parse_yaml, save_config
from aspire.encoders.contextual import eval_mode
from aspire.io import write_json
from aspire.jsonsafe import dumps
from aspire.storage import check_free_space, on_disk_full
from aspire.train import checkpoint as ckpt
from aspire.train.config import Config, check_inputs, sequential_problem
from aspire.train.data import (
    EpochBatchSampler,
    TripletCollator,
    TripletDataset,
    load_dev_split,
    load_split,
    without_negative,
)
from aspire.train.document_model import DocumentModel
from aspire.train.mixing import MixSampler, split_batch
from aspire.train.process import (  # the process set-up steps, used by `run` and re-exported
    init_distributed,
    process_ranks,
    resolve_device,
    rng_state,
    rng_state_problem,
    seed_everything,
    set_rng_state,
)
from aspire.train.state import (  # noqa: F401  (the run bookkeeping, re-exported)
    METRICS,
    RESUME_FIXED,
    check_resume_config,
    check_resume_examples,
    example_digests,
    linear_schedule,
    trim_metrics,
    weights_digest,
)
from aspire.train.task_formats import apply_formats, check_formats, task_names
from aspire.train.tasks import MultiTaskData, build_tasks

log = logging.getLogger(__name__)


# the dev batches' seed, whatever train.seed is (0: the dev figures of seed-0 runs are unchanged)
DEV_SEED = 0


def build_model(cfg: Config, path: str | None = None) -> DocumentModel:
    """The config's DocumentModel from the pretrained encoder (with the config's control codes and
    adapters), or from a saved checkpoint `path` (which holds them). A fresh model's `model.encoder` names the
    encoder as any working directory loads it (`pinned_model`: a short name as given, a local folder its absolute
    path, a training run's folder the model folder of the checkpoint loaded from it), so its saved document_model.json
    (`aspire interpolate`'s default base, what `aspire export` checks a base against) does not depend on where a later
    command runs; the run's config.yaml keeps the setting as given, which --resume compares."""
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.encoders.pretrained import pinned_model

    if path is not None:
        model = DocumentModel.from_pretrained(path, cfg.loss)
        if model.model_cfg.kind != cfg.model.kind:  # config.yaml and document_model.json of one checkpoint disagree
            raise ValueError(f"{path}: a kind {model.model_cfg.kind!r} model, but the run's config (its checkpoint's "
                             f"config.yaml) says model.kind={cfg.model.kind!r}")
        return model
    settings = {"include_title": cfg.model.include_title}
    if cfg.model.max_length:
        settings["max_length"] = cfg.model.max_length
    check_formats(cfg)
    encoder = ContextualSentenceEncoder.from_pretrained(cfg.model.encoder, **settings)
    apply_formats(encoder, cfg.model, task_names(cfg))
    loaded = encoder.loaded_checkpoint.get("checkpoint")  # a run's folder: the checkpoint it gave, not a second read
    start = loaded["path"] if loaded else pinned_model(cfg.model.encoder)
    return DocumentModel(encoder, replace(cfg.model, encoder=start), cfg.loss, cfg.abstract, task_names(cfg))


class Trainer:
    """Train `model` on `train_data`, selecting on `dev_data`, writing to `cfg.train.out_dir`.

    Construction changes no process-wide state: under `torchrun` the process group is started
    before (`init_distributed`), and a fresh run's global RNGs are seeded by the caller
    (`seed_everything(train.seed + rank)`, as `run` does); a resumed run's RNG states are restored
    from `resume_state` here.

    Args:
        cfg: the resolved config (saved beside every checkpoint).
        model: the DocumentModel (on the CPU; moved to the configured device here).
        train_data, dev_data: datasets of examples (`dev_data` may be None: no model selection);
            `MultiTaskData` for a multi-task run (batches from `MixSampler`, per-task losses logged).
        resume_state: the trainer state of the checkpoint the model was loaded from, to continue.
        examples: {file: sha256} of the files the examples (and a distill task's teacher vectors) were read from when
            the run started (`example_digests`), saved in every checkpoint for a resume to compare (None: the resumed
            state's, if any).
    """

    def __init__(self, cfg: Config, model: DocumentModel, train_data: TripletDataset | MultiTaskData,
                 dev_data: TripletDataset | MultiTaskData | None = None, resume_state: dict | None = None,
                 examples: dict[str, str] | None = None) -> None:
        self.cfg, self.tc = cfg, cfg.train
        self.examples = examples if examples is not None else (resume_state or {}).get("examples")
        self.rank, self.world, local_rank = process_ranks()
        self.device = resolve_device(self.tc.device, local_rank)
        self.out_dir = Path(self.tc.out_dir)
        self.model = model.to(self.device)
        self.model.train()
        self.train_data, self.dev_data = train_data, dev_data
        self.tasks = train_data.names if isinstance(train_data, MultiTaskData) else None
        papers = {**train_data.papers, **(dev_data.papers if dev_data else {})}
        sources = set().union(*(getattr(d, "sources", set()) for d in (train_data, dev_data) if d is not None))
        weights = train_data.weights if self.tasks else (1.0,)
        merged = lambda name: {k: v for d in (train_data, dev_data) if d is not None  # noqa: E731
                               for k, v in getattr(d, name, {}).items()}
        self.collate = TripletCollator(model.tokenize, papers, weights, sources, task_names(cfg), merged("teacher"),
                                       merged("sentence_teacher"))
        # the encoder's pooler (and, per kind, other heads) gets no gradient: let DDP find unused parameters
        self.ddp = DistributedDataParallel(self.model, find_unused_parameters=True) if self.world > 1 else None
        if not self.tasks and len(train_data) < self.tc.batch_size * self.world:  # named here: the sampler knows no key
            raise ValueError(f"the train split holds {len(train_data)} example(s), fewer than one batch (train.batch_size="
                             f"{self.tc.batch_size} x {self.world} rank(s)): lower train.batch_size or add examples")
        self._check_negatives(train_data, "train")
        problem = sequential_problem(cfg) if self.tasks else None
        if problem:  # refused when the config loaded; again for a config changed since
            raise ValueError(problem)
        micro = len(self._sampler(0, 0))
        self._check_dev_batches()
        self.steps_per_epoch = micro // self.tc.grad_accum
        if self.steps_per_epoch == 0:
            raise ValueError(f"an epoch holds {micro} micro-batch(es) of train.batch_size={self.tc.batch_size} x "
                             f"{self.world} rank(s), fewer than one step of train.grad_accum={self.tc.grad_accum}: "
                             "lower train.grad_accum or train.batch_size")
        used = self.steps_per_epoch * self.tc.grad_accum * self.tc.batch_size * self.world
        if not self.tasks and used < len(train_data) and self.rank == 0:  # whole steps only: said, not silent
            log.info("an epoch trains on %d of the %d examples (whole steps of train.grad_accum %d x train.batch_size "
                     "%d x %d rank(s)); the others sit the epoch out, a new draw each epoch", used, len(train_data),
                     self.tc.grad_accum, self.tc.batch_size, self.world)
        if self.tasks and cfg.mix.mode == "mixed" and self.rank == 0:  # every batch alike: the run's shares are these
            ratios = [t.ratio for t in train_data.tasks]
            shares = split_batch(self.tc.batch_size, ratios)
            exact = [self.tc.batch_size * r / sum(ratios) for r in ratios]
            if any(abs(s - x) > 1e-9 for s, x in zip(shares, exact)):
                log.warning("mix.mode mixed: every batch of train.batch_size=%d holds %s pair(s) of the tasks %s, not "
                            "their ratios' %s: over the run too; choose a batch size that the ratios split whole",
                            self.tc.batch_size, shares, self.tasks, [round(x, 3) for x in exact])
        sequential = cfg.mix.mode == "sequential" and self.tasks
        self.total_steps = self.tc.max_steps or (1 if sequential else self.tc.epochs) * self.steps_per_epoch
        if self.tc.warmup_steps >= self.total_steps and self.rank == 0:
            log.warning("train.warmup_steps %d >= the run's %d steps: the rate never reaches train.lr %g",
                        self.tc.warmup_steps, self.total_steps, self.tc.lr)
        decay = [p for n, p in model.named_parameters() if p.ndim > 1 and "LayerNorm" not in n]
        no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and "LayerNorm" not in n)]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.tc.lr,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, linear_schedule(self.tc.warmup_steps, self.total_steps))
        self.step = self.epoch = self.position = 0
        self.best_dev = float("inf")
        self._saved_step = -1
        self._window = self._new_window()  # the micro-batches since the last logged step
        if resume_state is not None:
            self._restore(resume_state)

    # ---- state --------------------------------------------------------------------------------------
    def _restore(self, state: dict) -> None:
        if state["world_size"] != self.world:
            raise ValueError(f"checkpoint was written by {state['world_size']} process(es), resuming with {self.world}")
        problem = best_dev_problem(state["best_dev_loss"])
        if problem:  # refused before any state is restored and before any training
            raise ValueError(f"the trainer state's best_dev_loss is {problem}; resume from an earlier checkpoint by "
                             f"pointing `{ckpt.LATEST}` at it")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        # ints (`check_state` takes numpy integers too, which the step's JSON pointer could not hold)
        self.step, self.epoch, self.position = int(state["step"]), int(state["epoch"]), int(state["position"])
        self.best_dev = state["best_dev_loss"]
        self._saved_step = self.step  # the checkpoint resumed from: a finished run is not evaluated and saved again
        set_rng_state(state["rng"][self.rank], self.device)
        if state.get("window") is not None:  # (checkpoints written before it was saved: a fresh window)
            self._window = self._new_window(**state["window"][self.rank])

    def _state(self) -> dict:
        mine = (rng_state(self.device), self._window_state())
        ranks = [None] * self.world
        if self.world > 1:
            dist.all_gather_object(ranks, mine)
        else:
            ranks[0] = mine
        return {
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "step": self.step, "epoch": self.epoch, "position": self.position,
            "best_dev_loss": self.best_dev, "rng": [r for r, _ in ranks], "world_size": self.world,
            "window": [w for _, w in ranks], "examples": self.examples,
        }

    def save(self, best: dict | None = None) -> None:
        """Checkpoint the current step (once per step); `best`: this step is the new best, the `best` pointer's
        record, written before `latest` (`ckpt.save_checkpoint`), so a resume never misses it."""
        if self._saved_step == self.step:
            return
        self._saved_step = self.step
        state = self._state()  # collective under DDP: every rank takes part
        if self.rank == 0:
            def contents(path: Path) -> None:
                self.model.save_pretrained(path / ckpt.MODEL_DIR)
                save_config(self.cfg, path / "config.yaml")
            ckpt.save_checkpoint(self.out_dir, self.step, contents, state,
                                 needed=ckpt.checkpoint_bytes(self.model, state["optimizer"]), best=best)
            ckpt.prune_checkpoints(self.out_dir, self.tc.keep_checkpoints)  # an old best is no longer kept for it
        self._barrier()

    def _barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def _log(self, record: dict) -> None:
        if self.rank == 0:
            with on_disk_full(self.out_dir, f"{METRICS} (a torn last line is dropped on --resume)"):
                with open(self.out_dir / METRICS, "a", encoding="utf-8") as handle:
                    handle.write(dumps(record) + "\n")  # a NaN loss is written as null, with its reason

    # ---- loops --------------------------------------------------------------------------------------
    def _sampler(self, epoch: int, start: int, limit: int | None = None) -> EpochBatchSampler | MixSampler:
        """The training micro-batches of `epoch` from micro-batch `start` (a `MixSampler` for tasks)."""
        tc, data = self.tc, self.train_data
        if not self.tasks:
            return EpochBatchSampler(len(data), tc.batch_size, tc.seed, epoch, start, self.rank, self.world, limit=limit)
        stages = [t.steps * tc.grad_accum for t in data.tasks] if self.cfg.mix.mode == "sequential" else ()
        return MixSampler(data.sizes, data.offsets, self.cfg.mix.mode, [t.ratio for t in data.tasks], tc.batch_size,
                          tc.seed, epoch, start, self.rank, self.world, limit=limit, stage_batches=stages,
                          names=data.names)

    def _loader(self, data: TripletDataset, sampler: EpochBatchSampler, seed: int) -> DataLoader:
        # the loader's own generator keeps worker seeding off the global RNG, so resuming is exact; its seed taken
        # mod 2**64, the seeds torch takes (unchanged below it), as `EpochBatchSampler` takes its own
        return DataLoader(data, batch_sampler=sampler, collate_fn=self.collate, num_workers=self.tc.num_workers,
                          generator=torch.Generator().manual_seed(seed % 2**64))

    def _check_dev_batches(self) -> None:
        """Each dev split (a task's, with tasks) fills one batch, as `dev_loss` takes whole batches only: refused
        before the first step rather than at the first evaluation, after training."""
        if self.dev_data is None:
            return
        self._check_negatives(self.dev_data, "dev")
        for name, _, size in self._parts(self.dev_data):
            if size < self.tc.batch_size:
                split = f"task {name!r}'s dev split" if name else "the dev split"
                raise ValueError(f"{split} holds {size} example(s), fewer than one batch (train.batch_size="
                                 f"{self.tc.batch_size}), so no dev loss could be taken: lower train.batch_size, "
                                 "build a larger dev split, or set data.use_dev=false")
            # whole batches keep its in-batch negatives comparable; data.dev_batches (0 = all) caps their number
            batches, cap = size // self.tc.batch_size, self.cfg.data.dev_batches
            scored = min(batches, cap or batches) * self.tc.batch_size
            if scored < size and self.rank == 0:
                split = f"task {name!r}'s dev split" if name else "the dev split"
                capped = f", at most data.dev_batches={cap}" if cap and cap < batches else ""
                log.info("the dev loss scores %d of the %d examples of %s (whole batches of train.batch_size=%d%s)",
                         scored, size, split, self.tc.batch_size, capped)

    def _parts(self, data: TripletDataset | MultiTaskData) -> list[tuple[str | None, int, int]]:
        """The examples of `data` (train or dev) as `dev_loss` scores them: (task name, offset, size) a task, else
        one part (None, 0, all)."""
        return list(zip(data.names, data.offsets, data.sizes)) if self.tasks else [(None, 0, len(data))]

    def _check_negatives(self, data: TripletDataset | MultiTaskData, split: str) -> None:
        """A split (a task's, with tasks) none of whose examples any micro-batch can give a negative (`without_negative`)
        gave every step a loss of 0, training nothing without a word (the dev split: no dev loss, found at the first
        evaluation): refused before the first step, and a share of such examples, which add no loss, is said. With
        train.batch_size 1 a micro-batch holds one pair (DDP ranks do not share theirs), so an anchor's only negative
        is its hard one; else the other pairs of its batch (with tasks mixed in every batch, those of every task) give
        theirs, unless each is co-cited with the anchor, as in a split of one co-cited set."""
        matrix = self.cfg.loss.kind != "triplet"  # a matrix loss takes every hard negative of the batch, a triplet its own
        for name, offset, size in self._parts(data):
            examples = data.examples[offset : offset + size]
            pool = data.examples if split == "train" and self.cfg.mix.mode == "mixed" else examples
            candidates = set() if self.tc.batch_size == 1 else (
                {e.positive_source for e in pool} | ({e.negative for e in pool} - {None} if matrix else set()))
            lacking = len(without_negative(examples, candidates))
            part = f"task {name!r}'s {split} split" if name else f"the {split} split"
            outcome = ("every step's loss would be 0 and nothing would train" if split == "train" else
                       "no dev loss could be taken")
            if lacking == size:
                why = ("train.batch_size=1: an anchor's negatives are the other pairs of its micro-batch and its hard "
                       f"negative, and no example of {part} has a hard negative" if self.tc.batch_size == 1 else
                       f"no example of {part} ({size}) can have a negative: each of the {len(candidates)} papers its "
                       "pairs bring to a batch is co-cited with the anchor (a split of one co-cited set) and none has "
                       "a hard negative")
                fix = "raise train.batch_size" if self.tc.batch_size == 1 else "add examples of other co-cited sets"
                raise ValueError(f"{why}, so {outcome}: {fix}, or give hard negatives (data.hard_negatives)")
            if lacking and self.rank == 0:
                log.warning("%d of the %d examples of %s can have no negative (no hard negative, and every paper the "
                            "other pairs of a batch bring is co-cited with the anchor): they add no loss", lacking,
                            size, part)

    @torch.no_grad()
    def dev_loss(self) -> float:
        """Mean loss over the dev examples (fixed batches, eval mode), weighted by triples; with tasks,
        the weighted sum of the tasks' dev losses (each task's alone in `self.task_dev_loss`).

        The batches come from `DEV_SEED`, not `train.seed`: runs with other seeds, or started from another
        run's checkpoint, are selected and compared on the same dev triples and in-batch negatives.
        """
        data = self.dev_data
        losses = []
        with eval_mode(self.model):
            for t, (name, offset, size) in enumerate(self._parts(data)):
                sampler = EpochBatchSampler(size, self.tc.batch_size, DEV_SEED, 0,
                                            limit=self.cfg.data.dev_batches or None)
                shifted = [[offset + i for i in batch] for batch in sampler]
                total, count = 0.0, 0
                for batch in self._loader(data, shifted, DEV_SEED):
                    out = self.model(batch.to(self.device))
                    n = int(out["task_rows"][t])
                    total, count = total + float(out["task_loss"][t]) * n, count + n
                if count == 0:  # with tasks, the task's (its name is its dev split's)
                    split = f"task {name!r}'s dev batches" if name else "the dev batches"
                    raise ValueError(f"{split} hold no triples to select a model by; set data.use_dev=false")
                losses.append(total / count)
        if not self.tasks:
            return losses[0]
        self.task_dev_loss = dict(zip(self.tasks, losses))
        return sum(w * x for w, x in zip(data.weights, losses))

    def evaluate(self) -> None:
        """Dev loss on rank 0, then a checkpoint; a new best moves the `best` pointer to it."""
        if self.dev_data is None:
            self.save()
            return
        value = self.dev_loss() if self.rank == 0 else 0.0
        if self.world > 1:
            box = [value]
            dist.broadcast_object_list(box, src=0)
            value = box[0]
        per_task = {f"dev_loss/{k}": v for k, v in getattr(self, "task_dev_loss", {}).items()}
        # the epoch of the step just trained: at an epoch's last step the counters already say the next one (for
        # the checkpoint), and the dev record carried that number while the step's train record had its own
        epoch = self.epoch - 1 if self.position == 0 and self.step > 0 else self.epoch
        self._log({"step": self.step, "epoch": epoch, "dev_loss": value, **per_task})
        improved = value < self.best_dev  # a tie keeps the earlier checkpoint
        self.best_dev = min(self.best_dev, value)
        self.save(best={"checkpoint": ckpt.checkpoint_name(self.step), "step": self.step, "dev_loss": value,
                        **per_task} if improved else None)

    def train(self) -> dict:
        """Run to `total_steps` (or `train.stop_after` steps); returns `end_summary` of the last logged metrics and
        the end record (the step, the weights digest of every rank, the best dev loss)."""
        tc = self.tc
        if self.rank == 0:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            # every run ends in a checkpoint: room for one is checked before any training
            check_free_space(self.out_dir, ckpt.checkpoint_bytes(self.model, self.optimizer.state_dict()),
                             f"a checkpoint of this model in {self.out_dir}")
            with on_disk_full(self.out_dir, "config.yaml"):
                save_config(self.cfg, self.out_dir / "config.yaml")
        if self.step >= self.total_steps and self.rank == 0:
            log.info("%s is finished (step %d of %d): nothing to train", self.out_dir, self.step, self.total_steps)
        bar = tqdm(total=self.total_steps, initial=self.step, desc="training", unit="step",
                   disable=not tc.progress or self.rank != 0)
        module = self.ddp or self.model
        last: dict = {}
        if tc.dev_before and self.step == 0 and self.dev_data is not None and self.rank == 0:
            value = self.dev_loss()
            self._log({"step": 0, "epoch": 0, "dev_loss": value,
                       **{f"dev_loss/{k}": v for k, v in getattr(self, "task_dev_loss", {}).items()}})
        window = self._window
        window["t0"] = time.perf_counter()  # the set-up (and a dev_before) stays out of the throughput figure
        stop_at = min(self.total_steps, self.step + tc.stop_after) if tc.stop_after else self.total_steps
        while self.step < stop_at:
            sampler = self._sampler(self.epoch, self.position, limit=self.steps_per_epoch * tc.grad_accum)
            for batch in self._loader(self.train_data, sampler, tc.seed * 1_000_003 + self.epoch):
                sync = (self.position + 1) % tc.grad_accum == 0
                with module.no_sync() if (self.ddp is not None and not sync) else contextlib.nullcontext():
                    out = module(batch.to(self.device))
                    (out["loss"] / tc.grad_accum).backward()
                self.position += 1
                window["loss"] = window["loss"] + out["loss"].detach().double()  # on the device: no host sync
                window["triples"] = window["triples"] + out["triples"].double()
                window["task_loss"] = window["task_loss"] + (out["task_loss"] * out["task_rows"]).double()
                window["task_rows"] = window["task_rows"] + out["task_rows"].double()
                window["micro"] += 1
                if not sync:
                    continue
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip_norm)
                if not torch.isfinite(grad_norm):  # the same on every rank (gradients all-reduced): all stop together
                    raise ValueError(
                        f"step {self.step + 1}: the gradient norm is {float(grad_norm)} (a NaN or infinite loss or "
                        f"gradient); the update was not applied, which would have made every weight NaN for the rest "
                        f"of the run. The last checkpoint (at most step {self.step}) is kept for --resume: lower "
                        "train.lr or check the examples of this step")
                step_lr = self.scheduler.get_last_lr()[0]  # the rate this update used
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                bar.update(1)
                if self.step % tc.log_every == 0 or self.step == self.total_steps:
                    last = self._log_train(window, float(grad_norm), step_lr)
                    bar.set_postfix(loss=f"{last['loss']:.4f}")
                    window = self._window = self._new_window()
                if self.position == sampler.num_batches:  # epoch done: the checkpoint says "next epoch"
                    self.epoch, self.position = self.epoch + 1, 0
                paused = time.perf_counter()  # evaluation and saving stay out of the throughput figure
                if (tc.eval_every and self.step % tc.eval_every == 0) or self.step == self.total_steps:
                    self.evaluate()  # the last step always (save_every alone once saved it unevaluated)
                elif tc.save_every and self.step % tc.save_every == 0:
                    self.save()
                window["t0"] += time.perf_counter() - paused
                if self.step >= stop_at:
                    break
        bar.close()
        if self.step < self.total_steps:  # stopped by `stop_after`: checkpoint for --resume
            self.save()
        elif self._saved_step != self.step:  # the last step is always evaluated and saved
            self.evaluate()
        digests = [weights_digest(self.model)]
        if self.world > 1:
            digests = [None] * self.world
            dist.all_gather_object(digests, weights_digest(self.model))
        final = {"event": "end", "step": self.step, "weights_digest": digests, "best_dev_loss": self.best_dev}
        self._log(final)
        return end_summary(last, final)

    def _new_window(self, loss: float = 0.0, triples: float = 0.0, task_loss: list[float] | None = None,
                    task_rows: list[float] | None = None, micro: int = 0, seconds: float = 0.0) -> dict:
        """The sums of a metrics window (as `_window_state` saves them; zero: a new one) on the device, its
        `seconds` of training so far and its timer `t0` started now."""
        def tensor(value) -> torch.Tensor:
            return torch.tensor(value, dtype=torch.float64, device=self.device)

        T = len(self.tasks or [0])
        return {"loss": tensor(loss), "triples": tensor(triples), "task_loss": tensor(task_loss or [0.0] * T),
                "task_rows": tensor(task_rows or [0.0] * T), "micro": micro, "seconds": seconds,
                "t0": time.perf_counter()}

    def _window_state(self) -> dict:
        """This rank's metrics window so far, for a checkpoint: a resumed run logs the window's step as one run
        straight through would."""
        w = self._window
        seconds = w["seconds"] + time.perf_counter() - w["t0"]
        return {"loss": float(w["loss"]), "triples": float(w["triples"]), "task_loss": w["task_loss"].tolist(),
                "task_rows": w["task_rows"].tolist(), "micro": w["micro"], "seconds": seconds}

    def _log_train(self, window: dict, grad_norm: float, lr: float) -> dict:
        micro = torch.tensor(float(window["micro"]), dtype=torch.float64, device=self.device)
        stats = torch.cat([torch.stack([window["loss"], window["triples"], micro]), window["task_loss"], window["task_rows"]])
        if self.world > 1:
            dist.all_reduce(stats)
        stats = stats.cpu()
        T = len(window["task_rows"])
        task_loss, task_rows = stats[3 : 3 + T], stats[3 + T :]
        seconds = window["seconds"] + time.perf_counter() - window["t0"]
        record = {"step": self.step, "epoch": self.epoch, "loss": float(stats[0] / stats[2]),
                  "lr": lr, "grad_norm": grad_norm,
                  "triples_per_s": float(stats[1]) / max(seconds, 1e-9)}
        for name, total, rows in zip(self.tasks or [], task_loss.tolist(), task_rows.tolist()):
            record[f"loss/{name}"] = total / rows if rows else None  # None: the task had no batch in the window
        self._log(record)
        return record


def end_summary(last: dict, final: dict) -> dict:
    """What a run returns (and `aspire train` prints): the end record `final` (its `step`, weights digests, best dev
    loss) with the training figures of `last`, the last record this run logged (loss, lr, grad_norm, ...). Those of
    the end's step stand beside it; those of an earlier step (a run stopped by `train.stop_after` past its last
    logged step, say) go under `last_logged`, with their own `step`: beside the end's step they read as its figures
    (step 2's loss under "step": 3). A run that logged none (a finished run resumed) has none."""
    if not last or last.get("step") == final["step"]:
        return {**last, **final}
    return {**final, "last_logged": dict(last)}


# what `Trainer._state` saves and `Trainer._restore` reads (and `window`, the unlogged metrics sums of each rank: a
# checkpoint written before it was saved resumes with an empty window; and `examples`, the checksums of the files the
# examples were read from, which `run` compares on --resume: one written before they were recorded compares none)
STATE_KEYS = ("optimizer", "scheduler", "step", "epoch", "position", "best_dev_loss", "rng", "world_size")


def check_state(state, path: Path, step: int) -> None:
    """ValueError naming `path` unless `state` is a trainer state (`STATE_KEYS`, `window` and `examples` optional, no
    other key) of step `step` (a whole number, `is_whole`: an int or numpy integer, no bool or float), its epoch,
    position and world size whole numbers (>= 0, >= 0, >= 1; the trainer restores them as ints), its `rng` one RNG
    state per rank (`rng_state_problem`), its `window`, where saved (a checkpoint written before it was saved has none,
    or None), one dict per rank, and its `examples`, where saved, a mapping of file names to sha256 digests. Its
    `best_dev_loss` is checked where it is read (`Trainer`, `best_dev_problem`)."""
    missing = [k for k in STATE_KEYS if k not in state] if isinstance(state, dict) else list(STATE_KEYS)
    if missing:
        raise ValueError(f"{path}: not a whole trainer state (no {', '.join(missing)}); resume from an earlier "
                         f"checkpoint by pointing `{ckpt.LATEST}` at it")
    unknown = sorted(set(state) - {*STATE_KEYS, "window", "examples"}, key=str)
    if unknown:  # not a state this trainer wrote (another program's, or damaged): its other keys are not to be trusted
        raise ValueError(f"{path}: the trainer state holds unknown key(s) {', '.join(repr(k) for k in unknown)}; "
                         f"resume from an earlier checkpoint by pointing `{ckpt.LATEST}` at it")
    if not is_whole(state["step"]) or state["step"] != step:  # a float 4.0 == 4 failed naming a checkpoint
        raise ValueError(f"{path}: the trainer state is of step {state['step']!r}, its checkpoint's pointer says {step}")
    for key in ("epoch", "position", "world_size"):  # a damaged one failed deep in the sampler, after training started
        if not is_whole(state[key], int(key == "world_size")):
            raise ValueError(f"{path}: the trainer state's {key} must be an integer >= {int(key == 'world_size')}, "
                             f"got {state[key]!r:.60}; resume from an earlier checkpoint by pointing `{ckpt.LATEST}` "
                             "at it")
    examples = state.get("examples")
    if examples is not None and not (isinstance(examples, dict) and all(
            isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in examples.items())):
        raise ValueError(f"{path}: the trainer state's examples must map each examples file to its sha256, got "
                         f"{examples!r:.60}; resume from an earlier checkpoint by pointing `{ckpt.LATEST}` at it")
    ranks = state["world_size"]
    for key in ("rng", "window"):  # read by rank when the trainer restores: damaged, a bare IndexError or KeyError
        value = state.get(key)
        if key == "window" and value is None:  # written before the window was saved (no key, or None)
            continue
        if not isinstance(value, (list, tuple)) or len(value) != ranks:
            raise ValueError(f"{path}: the trainer state's {key} must hold one entry per rank ({ranks}), got "
                             f"{value!r:.60}; resume from an earlier checkpoint by pointing `{ckpt.LATEST}` at it")
        for rank, entry in enumerate(value):
            problem = rng_state_problem(entry) if key == "rng" else _window_problem(entry)
            if problem:
                raise ValueError(f"{path}: the trainer state's {key} of rank {rank} is damaged ({problem}); resume "
                                 f"from an earlier checkpoint by pointing `{ckpt.LATEST}` at it")


def best_dev_problem(value) -> str | None:
    """What is wrong with a trainer state's `best_dev_loss` (None: nothing): it must be a number, not NaN (inf: no
    dev loss taken yet). A string or None failed comparing at the first evaluation after training; a NaN is never
    beaten (`value < nan` is False), so no later checkpoint would ever become the best."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"not a number but {type(value).__name__} {value!r:.40}"
    if value != value:
        return "NaN, which no dev loss beats"
    return None


def _window_problem(entry) -> str | None:
    """What is damaged in a rank's saved metrics window (`Trainer._window_state`), None: nothing."""
    if not isinstance(entry, dict):
        return f"not a dict but {type(entry).__name__}"
    unknown = sorted(set(entry) - {"loss", "triples", "task_loss", "task_rows", "micro", "seconds"}, key=str)
    if unknown:
        return f"unknown key(s) {', '.join(repr(k) for k in unknown)}"
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    for key, value in entry.items():  # else a bare TypeError from torch.tensor, or a float micro-batch count
        good = (type(value) is int and value >= 0 if key == "micro" else
                isinstance(value, list) and all(map(number, value)) if key in ("task_loss", "task_rows") else
                number(value))
        if not good:
            kind = "a count" if key == "micro" else "a list of numbers" if key.startswith("task") else "a number"
            return f"its {key!r} is {value!r:.40}, not {kind}"
    return None


def run(cfg: Config, resume: bool = False, model_loader: Callable[[Config, str | None], DocumentModel] = build_model) -> dict:
    """Load data and model (fresh, or from `latest` with `resume`), train, and return the final metrics.

    A fresh run refuses an `out_dir` that already holds checkpoints (or an earlier run's `best`); `resume` refuses
    one without, and a damaged `latest` or `best` pointer, trainer state, checkpoint model or metrics log, naming the
    file, and an examples file (or a distill task's teacher vectors file) whose bytes changed since the run started
    (`check_resume_examples`: each checkpoint records their checksums, taken once a run start), before anything in the
    folder is changed (the metrics log is trimmed to the checkpoint's step, and half-written checkpoints removed, only
    once the model and the trainer state are loaded); a fresh run removes the half-written checkpoints of a run killed
    before its first checkpoint was whole, as it replaces its metrics log. A fresh model is built with the global RNGs
    seeded by `train.seed` (its random weights, e.g. LoRA's, are the same on every rank and in every run of the
    config), then reseeded for training. An `out_dir` that is a file (or under one) and, after the checks of the
    folder, a missing input (`check_inputs`) are refused naming the setting before the model loads.
    """
    if (cfg.model.kind == "abs") != (cfg.data.align == "abs_align"):
        raise ValueError(f"model.kind={cfg.model.kind} with data.align={cfg.data.align}: kind `abs` and "
                         "data.align=abs_align go together (`ts` uses cc_align)")
    out_dir = Path(cfg.train.out_dir)
    check_folder(out_dir, "train.out_dir")  # a file there: once "File exists: PATH", naming no setting
    rank, _, _ = init_distributed(cfg.train.device)
    # rank 0 holds out_dir/.lock to the end: a second run into the folder (fresh or --resume) fails at once
    with ckpt.run_lock(out_dir) if rank == 0 else contextlib.nullcontext():
        return _run_locked(cfg, resume, model_loader, out_dir, rank)


def _run_locked(cfg: Config, resume: bool, model_loader: Callable[[Config, str | None], DocumentModel],
                out_dir: Path, rank: int) -> dict:
    record = ckpt.read_pointer(out_dir) if out_dir.is_dir() else None
    if resume and record is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {out_dir} (no `latest` pointer)")
    if not resume and record is not None:
        raise FileExistsError(f"{out_dir} already holds checkpoints; pass --resume to continue or choose another train.out_dir")
    left = sorted(p.name for p in out_dir.glob("checkpoint-*")) + [ckpt.BEST] * (out_dir / ckpt.BEST).is_file()
    if not resume and left:  # a `latest` deleted: this run's checkpoints would mix with them, `best` name the old one
        raise FileExistsError(f"{out_dir} holds {', '.join(left[:3])}{' ...' if len(left) > 3 else ''} of an earlier "
                              "run but no `latest` pointer to resume from; remove them or choose another train.out_dir")
    check_inputs(cfg)  # a missing one was found after the model had loaded (with the ACL source read: minutes)
    examples = example_digests(cfg)  # once a run start: every checkpoint records them, a resume compares them
    state = None
    if not resume and rank == 0 and (out_dir / METRICS).is_file():  # a run killed before its first checkpoint
        log.warning("%s: replacing the metrics of an earlier run into this folder that saved no checkpoint",
                    out_dir / METRICS)
        (out_dir / METRICS).unlink()
    if not resume and rank == 0:  # one killed while writing its first: its half-written checkpoint goes too
        ckpt.clean_temp(out_dir)
    if resume:
        ckpt.read_pointer(out_dir, ckpt.BEST)  # its checkpoint deleted: refused now, not at the first save after training
        saved_path = out_dir / record["checkpoint"] / "config.yaml"
        saved = parse_yaml(saved_path.read_text(encoding="utf-8"), saved_path)
        check_resume_config(saved, cfg)
        state = ckpt.load_state(out_dir / record["checkpoint"])
        check_state(state, out_dir / record["checkpoint"] / ckpt.STATE_FILE, record["step"])
        check_resume_examples(state.get("examples"), examples, cfg, out_dir / record["checkpoint"] / ckpt.STATE_FILE)
        problem = best_dev_problem(state["best_dev_loss"])
        if problem:  # named with its file here (the trainer would refuse it unnamed)
            raise ValueError(f"{out_dir / record['checkpoint'] / ckpt.STATE_FILE}: the trainer state's best_dev_loss is "
                             f"{problem}; resume from an earlier checkpoint by pointing `{ckpt.LATEST}` at it")
        model = _load_checkpoint_model(cfg, out_dir / record["checkpoint"] / ckpt.MODEL_DIR, model_loader)
    else:  # a fresh model's random weights (LoRA's A matrices) come from train.seed, not from an unseeded process RNG
        seed_everything(cfg.train.seed)
        model = model_loader(cfg, None)
    if cfg.tasks:
        train_data = build_tasks(cfg, "train")
        dev_data = build_tasks(cfg, "dev") if cfg.data.use_dev else None
        if rank == 0:  # what each task holds and what was left out of it (benchmark papers, short abstracts)
            report = {split: {p.name: {"pairs": len(p.examples), **p.stats} for p in data.parts}
                      for split, data in (("train", train_data), ("dev", dev_data)) if data is not None}
            write_json(out_dir / "tasks.json", report)
    else:
        train_data, dev_data = load_split(cfg.data, "train"), load_dev_split(cfg.data)
    needs_align = "aligned" in model.terms
    if needs_align and train_data.aligned_share == 0.0:
        raise ValueError(f"model.kind={cfg.model.kind} needs `{cfg.data.align}` alignments in the examples; "
                         "none found: run `aspire data align --examples DIR --teacher MODEL --out DIR` first")
    if needs_align and train_data.aligned_share < 1.0:
        log.warning("%.1f%% of training examples lack `%s`: they add no aligned-pair loss",
                    100 * (1 - train_data.aligned_share), cfg.data.align)
    if state is None:  # a fresh run: each rank's RNGs start from its own seed (a resume restores them)
        seed_everything(cfg.train.seed + rank)
    trainer = Trainer(cfg, model, train_data, dev_data, state, examples)  # a resumed one restores the checkpoint's
    if state is not None and rank == 0:  # the checkpoint is whole, model and state loaded: only now is the folder changed
        trim_metrics(out_dir, record["step"])
        ckpt.clean_temp(out_dir)
    return trainer.train()


def _load_checkpoint_model(cfg: Config, path: Path, model_loader: Callable[[Config, str | None], DocumentModel]
                           ) -> DocumentModel:
    """`model_loader(cfg, path)` of a checkpoint's model folder; an error that names no file (torch's, say, of a
    damaged scorer file: it says only what failed to parse) becomes a ValueError naming the folder. A weights file
    that does not parse is named by the encoder's own load (`aspire.encoders.contextual.load_weights`)."""
    try:
        return model_loader(cfg, str(path))
    except (OSError, ValueError):  # a missing file (named), a damaged settings file or another kind (named)
        raise
    except Exception as err:
        reason = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"
        raise ValueError(f"{path}: the checkpoint's model is damaged, not readable ({reason}); resume from an earlier "
                         f"checkpoint by pointing `{ckpt.LATEST}` at it") from err
