"""How the tasks of a multi-task run share the batches (`mix.mode`), as a resumable batch sampler.

Every task keeps its own stream of micro-batches: seeded permutations of its examples, one per
pass over them, cut into chunks and sharded over DDP ranks exactly as `EpochBatchSampler` does.
Micro-batch g of the run (g counts from 0 over the whole run) is a pure function of g, so a run
resumed at any micro-batch continues exactly:

- `mixed`: every micro-batch holds chunk g of every task, task t contributing `b_t` pairs, the
  batch size split by the tasks' `ratio` (largest remainder; each task at least one pair).
- `alternating`: micro-batch g is one task's next chunk of the full batch size; the task follows a
  cycle of `CYCLE` slots filled in proportion to `ratio` and spread evenly (smooth weighted
  round-robin).
- `sequential`: stages; task t owns the micro-batches of its `steps` optimizer steps, in order.

An "epoch" of the trainer is `num_batches` micro-batches: the examples of all tasks over the
global batch (mixed, alternating), or the whole run (sequential).
"""

from __future__ import annotations

import math
import numbers
from typing import Iterator, Sequence

import torch
from torch.utils.data import Sampler

from aspire.config import is_whole
from aspire.train.config import steps_problem

STAGE_BATCHES = "micro-batches (stage_batches: each task's steps x train.grad_accum)"  # what MixSampler's stages count

CYCLE = 60  # slots of the alternating cycle


def _largest_remainder(total: int, ratios: Sequence[float]) -> list[int]:
    """`total` split by `ratios` (each finite and > 0, else ValueError), largest remainder first; a share may be 0."""
    if not ratios or not all(isinstance(r, numbers.Real) and not isinstance(r, bool) and math.isfinite(r) and r > 0
                             for r in ratios):
        raise ValueError(f"tasks[].ratio: each task's ratio must be a finite number > 0, got {list(ratios)}")
    whole = sum(ratios)
    exact = [total * r / whole for r in ratios]
    sizes = [int(x) for x in exact]
    for t in sorted(range(len(ratios)), key=lambda t: sizes[t] - exact[t])[: total - sum(sizes)]:
        sizes[t] += 1
    return sizes


def split_batch(batch_size: int, ratios: Sequence[float]) -> list[int]:
    """Pairs per task in a mixed batch: `batch_size` split by `ratios`, largest remainder first.

    >>> split_batch(8, [2, 1, 1])
    [4, 2, 2]
    """
    sizes = _largest_remainder(batch_size, ratios)
    if min(sizes) < 1:
        raise ValueError(f"a batch of {batch_size} gives a task of ratio {min(ratios)} no pair ({sizes}); "
                         "raise train.batch_size or the task's ratio")
    return sizes


def alternating_cycle(ratios: Sequence[float], length: int = CYCLE) -> list[int]:
    """The task of each slot of the alternating cycle (smooth weighted round-robin).

    >>> alternating_cycle([2, 1], length=6)
    [0, 1, 0, 0, 1, 0]
    """
    counts = _largest_remainder(length, ratios)
    if min(counts) < 1:  # the cycle's length is fixed: no train.batch_size helps, only the ratios do
        raise ValueError(f"mix.mode alternating: a cycle of {length} batches gives the task of ratio {min(ratios)} "
                         f"no batch ({counts}); raise its ratio to at least about 1/{length} of the ratios' sum")
    current, out = [0] * len(counts), []
    for _ in range(length):
        current = [c + n for c, n in zip(current, counts)]
        best = max(range(len(counts)), key=lambda t: current[t])
        current[best] -= length
        out.append(best)
    return out


def check_sizes(sampler: str, batch_size: int, world_size: int) -> None:
    """A sampler's batch and world sizes: ValueError naming `sampler` and the size unless each is an integer >= 1
    (0 divided by zero; a negative size gave batches of other sizes silently)."""
    for what, value in (("batch_size", batch_size), ("world_size", world_size)):
        if not is_whole(value, 1):
            raise ValueError(f"{sampler}: {what} must be an integer >= 1, got {value!r}")


def check_position(start: int, num_batches: int, rank: int, world_size: int, epoch: str) -> None:
    """A sampler's resume position and rank: ValueError unless 0 <= `rank` < `world_size` (another rank's slice, or
    the next global batch's, was read silently) and 0 <= `start` < `num_batches` (past the epoch's micro-batches a
    sampler yields nothing, and the trainer, which moves on at an epoch's end, looped). `epoch` describes the epoch
    in the message. Each must be an integer (a float start or rank was a TypeError of `range` or of slicing; True
    was read as 1)."""
    for what, value in (("rank", rank), ("micro-batch to start from", start)):
        if not is_whole(value):  # its range is checked below
            raise ValueError(f"{what} must be an integer, got {value!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not one of the {world_size} rank(s)")
    if not 0 <= start < num_batches:
        raise ValueError(f"micro-batch {start} to start from is not one of the epoch's {num_batches} micro-batches "
                         f"({epoch}): a position saved by a run on more examples, or with a smaller batch?")


class MixSampler(Sampler[list[int]]):
    """Micro-batches (indices into `MultiTaskData`) of one epoch of a multi-task run.

    Args:
        sizes: examples per task; offsets: index of each task's first example.
        mode: `mixed`, `alternating` or `sequential`; ratios: per task (sequential reads none: each must be
            the default 1); stage_batches: micro-batches per task (sequential only: its `steps` times `grad_accum`).
        batch_size: pairs per micro-batch on one rank; seed, epoch, start, rank, world_size, limit
            as in `EpochBatchSampler`.
        names: the tasks' names, for errors (default: task 0, task 1, ...), one a task.

    ValueError (naming the argument) unless sizes are integers >= 1, offsets, seed and epoch integers >= 0, (sequential)
    stage_batches integers >= 1, one a task, and `names` is empty or one a task.
    """

    def __init__(self, sizes: Sequence[int], offsets: Sequence[int], mode: str, ratios: Sequence[float],
                 batch_size: int, seed: int, epoch: int, start: int = 0, rank: int = 0, world_size: int = 1,
                 limit: int | None = None, stage_batches: Sequence[int] = (), names: Sequence[str] = ()) -> None:
        if mode not in ("mixed", "alternating", "sequential"):
            raise ValueError(f"unknown mix mode {mode!r}; valid: ['alternating', 'mixed', 'sequential']")
        if not len(sizes) == len(offsets) == len(ratios):  # fewer ratios left the last tasks out of every batch
            raise ValueError(f"MixSampler: one size, offset and ratio a task, got {len(sizes)} size(s), "
                             f"{len(offsets)} offset(s) and {len(ratios)} ratio(s)")
        if not sizes:  # was min() of an empty sequence (sequential) or a ratio error naming no task
            raise ValueError("MixSampler: a multi-task run needs at least one task, got none")
        if len(names) and len(names) != len(sizes):  # else errors silently named the tasks by index
            raise ValueError(f"MixSampler: names must be one name a task, got {len(names)} name(s) for "
                             f"{len(sizes)} task(s): {list(names)}")
        for what, values, least in (("sizes (examples per task)", sizes, 1),
                                    ("offsets (index of each task's first example)", offsets, 0)):
            for t, value in enumerate(values):  # a float size was a TypeError of randperm naming nothing, a float
                if not is_whole(value, least):  # offset float indices; True read as 1; 0 examples fill no batch
                    task = repr(names[t]) if len(names) else str(t)
                    raise ValueError(f"MixSampler: {what} must be integers >= {least}, got {value!r} for task {task}")
        for what, value in (("seed", seed), ("epoch", epoch)):  # a float was a RuntimeError of manual_seed, True 1
            if not is_whole(value, 0):
                raise ValueError(f"MixSampler: {what} must be an integer >= 0, got {value!r}")
        check_sizes("MixSampler", batch_size, world_size)
        if limit is not None and not is_whole(limit, 1):  # 0 and < 0 read as a bad start, a float a TypeError
            raise ValueError(f"MixSampler: limit (micro-batches per epoch) must be None or an integer >= 1, "
                             f"got {limit!r}")
        if mode != "sequential" and len(stage_batches):  # would be silently ignored
            raise ValueError(f"MixSampler: stage_batches are read by mix.mode sequential only, got "
                             f"{list(stage_batches)} {STAGE_BATCHES} with mix.mode {mode}")
        self.sizes, self.offsets, self.mode = list(sizes), list(offsets), mode
        self.batch_size, self.seed, self.epoch, self.start = batch_size, seed, epoch, start
        self.rank, self.world_size = rank, world_size
        self.shares = split_batch(batch_size, ratios) if mode == "mixed" else [batch_size] * len(sizes)
        self.cycle = alternating_cycle(ratios) if mode == "alternating" else []
        self.stage_ends: list[int] = []  # sequential: the end of each task's stage, once its steps are checked
        if mode == "sequential":
            if any(r != 1.0 for r in ratios):  # stages run by steps: a ratio would be silently ignored
                raise ValueError(f"tasks[].ratio: mix.mode sequential runs each task for its steps and reads no ratio, "
                                 f"got {list(ratios)}; remove the ratios or use mix.mode mixed or alternating")
            if len(stage_batches) != len(sizes):  # a task without a stage, or a stage without a task
                raise ValueError(f"MixSampler: stage_batches must be one a task (mix.mode sequential), got "
                                 f"{len(stage_batches)} for {len(sizes)} task(s): {list(stage_batches)}")
            # the tasks' steps are checked when the config loads, too; these are micro-batches
            problem = steps_problem(stage_batches, f" {STAGE_BATCHES}")
            if problem:
                raise ValueError(problem)
            self.stage_ends = [sum(stage_batches[: t + 1]) for t in range(len(stage_batches))]
            self.num_batches = self.stage_ends[-1]
        else:
            self.num_batches = max(1, sum(sizes) // (batch_size * world_size))
        for t, share in enumerate(self.shares):
            if sizes[t] < share * world_size:
                name = repr(names[t]) if len(names) else str(t)
                part = f"its share {share} of train.batch_size={batch_size}" if mode == "mixed" else \
                    f"train.batch_size={batch_size}"
                raise ValueError(f"task {name}: {sizes[t]} example(s) do not fill one micro-batch of {part} x "
                                 f"{world_size} rank(s); lower train.batch_size"
                                 + (" or the task's ratio" if mode == "mixed" else ""))
        if limit is not None:
            self.num_batches = min(self.num_batches, limit)
        check_position(start, self.num_batches, rank, world_size, f"mix.mode {mode}")
        self._perms: dict[int, tuple[int, torch.Tensor]] = {}  # task -> (its pass, that pass's permutation)

    def __len__(self) -> int:
        return self.num_batches - self.start

    def _chunk(self, t: int, j: int, size: int) -> list[int]:
        """Chunk j of task t's stream (chunks of `size` pairs per rank)."""
        per_pass = self.sizes[t] // (size * self.world_size)
        done = j // per_pass  # the passes over task t's examples before this chunk's
        if self._perms.get(t, (None,))[0] != done:  # one pass a task at a time (a mixed batch reads every task)
            # taken mod 2**64, the seeds torch takes (unchanged below it): train.seed 20240101 overflowed it
            gen = torch.Generator().manual_seed(((self.seed * 1_000_003 + t) * 1_000_003 + done) % 2**64)
            self._perms[t] = (done, torch.randperm(self.sizes[t], generator=gen))
        lo = (j % per_pass) * size * self.world_size + self.rank * size
        return (self._perms[t][1][lo : lo + size] + self.offsets[t]).tolist()

    def batch(self, g: int) -> list[int]:
        """Micro-batch g of the run (global, from 0)."""
        if self.mode == "mixed":
            return [i for t, share in enumerate(self.shares) for i in self._chunk(t, g, share)]
        if self.mode == "alternating":
            slot, turns = g % len(self.cycle), g // len(self.cycle)
            t = self.cycle[slot]
            j = turns * self.cycle.count(t) + self.cycle[:slot].count(t)
            return self._chunk(t, j, self.batch_size)
        if not 0 <= g < self.stage_ends[-1]:  # was a bare StopIteration ("generator raised StopIteration" at epoch 1)
            raise ValueError(f"mix.mode sequential: micro-batch {g} is outside the run's {self.stage_ends[-1]} (the "
                             "tasks' steps x train.grad_accum, one epoch)")
        t = next(t for t, end in enumerate(self.stage_ends) if g < end)
        return self._chunk(t, g - (self.stage_ends[t - 1] if t else 0), self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        full = self.stage_ends[-1] if self.mode == "sequential" else max(1, sum(self.sizes) // (self.batch_size * self.world_size))
        for k in range(self.start, self.num_batches):
            yield self.batch(self.epoch * full + k)
