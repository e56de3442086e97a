"""The training config: nested dataclasses read from `configs/*.yaml` by `aspire.config.load_config`.

`configs/base.yaml` holds the shared defaults; each paper model's file names `base: base.yaml` and
sets only what differs (mostly `model.kind`). Unknown keys anywhere are a `ConfigError`, and so is
a numeric field outside its range (each declared with `ranged`: counts >= 0 or >= 1, rates and
temperatures > 0, floats finite), reported when the config loads.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Callable, Literal, Sequence

from aspire.cliutil import device_or_auto, input_file, input_folder
from aspire.config import ConfigError, is_whole, ranged
from aspire.losses import LOSS_KEYS, LOSS_KINDS

# kind -> (loss terms, inference scorer). A term is "aligned" (aligned pair for the positive,
# min-L2 for negatives), a scorer name, "vector" (L2 of mean-pooled vectors) or "cosine".
KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "ts": (("aligned",), "minl2"),
    "abs": (("aligned",), "minl2"),
    "ot": (("ot",), "ot"),
    "ts+ot": (("aligned", "ot"), "ot"),
    "max": (("minl2",), "minl2"),
    "att": (("attention",), "attention"),
    "cocite_vector": (("vector",), "vector"),
    "abstract": (("cosine",), "abstract"),
    "hybrid": (("whole", "facet"), "hybrid"),  # one pass: whole-abstract and aligned-facet terms
    "hybrid+ts": (("whole", "facet", "aligned"), "hybrid"),  # and the aligned sentence pair, as `ts` trains it
}
ModelKind = Literal[tuple(KINDS)]
# the `model` settings of each scorer (`aspire.train.terms.make_scorer`): a kind reads those of the scorers among its
# terms and inference scorer, and nothing else reads them (the hybrid scorer's own OT term has no weight in training)
SCORER_KEYS: dict[str, tuple[str, ...]] = {"ot": ("ot_eps", "ot_tau", "ot_tol", "ot_max_iter", "ot_grad"),
                                           "attention": ("att_tau",)}
_SCORER_FIELDS = {key for keys in SCORER_KEYS.values() for key in keys}


def unread_settings(kind: str, values) -> dict:
    """The `SCORER_KEYS` settings among `values` ({name: value}) that `kind` never reads (`kind_reads`) and that are
    set to anything but their default: what a config of that kind refuses."""
    defaults = {f.name: _default(f) for f in fields(ModelConfig) if f.name in _SCORER_FIELDS}
    reads = kind_reads(kind)
    return {k: v for k, v in values.items() if k in defaults and k not in reads and v != defaults[k]}


def kind_reads(kind: str) -> tuple[str, ...]:
    """The `SCORER_KEYS` settings `model.kind` reads (`ot`, `ts+ot`: the OT ones; `att`: `att_tau`)."""
    terms, scorer = KINDS[kind]
    return tuple(key for name, keys in SCORER_KEYS.items() if name in (*terms, scorer) for key in keys)


def term_scale_problem(kind: str, term_scale: dict) -> str | None:
    """Why `loss.term_scale` ({term: scale}) does not fit `model.kind` (a key that is none of its terms), or None."""
    terms = KINDS[kind][0]
    stray = sorted(set(term_scale) - set(terms))
    return f"loss.term_scale names {stray}, not terms of kind {kind!r} {list(terms)}" if stray else None


@dataclass
class AdapterConfig:
    """peft adapters on the encoder (`aspire.encoders.adapters`); the base weights stay frozen.

    `kind`: `none`, `lora` or `ia3` (peft has no Houlsby bottleneck adapter; IA3's learned rescaling
    vectors are its light-weight stand-in). `r`, `alpha`, `dropout` are LoRA's rank, scale and dropout
    (IA3 has none); `target_modules` (empty: peft's default for the model type, `query`/`value` for
    BERT). `per_task`: one named adapter per training task, switched per batch; else one shared
    adapter named `default`. `scope: query` (SPECTER2's ad-hoc query adapter): one adapter named `query`,
    on only for each pair's anchor (the query: context2doc's citing sentence), off for its positives and
    negatives and for every paper at inference, so the paper vectors stay the base encoder's (a trained
    document model given as `model.encoder`) while the queries learn to meet them.
    """

    kind: Literal["none", "lora", "ia3"] = "none"
    r: int = ranged(8, ge=1)  # r, alpha, dropout: LoRA's (set for kind ia3, a ConfigError)
    alpha: float = ranged(16.0, gt=0)
    dropout: float = ranged(0.0, ge=0, lt=1)
    target_modules: list[str] = field(default_factory=list)
    per_task: bool = False
    scope: Literal["all", "query"] = "all"

    def __post_init__(self) -> None:
        if self.kind == "ia3":  # peft's IA3Config has no rank, scale or dropout: they were accepted and never read
            _refuse_stray(self, ("kind", "target_modules", "per_task", "scope"), "model.adapter: kind ia3",
                          "reads target_modules, per_task, scope; r, alpha and dropout are LoRA's")
        if self.scope == "query" and (self.kind == "none" or self.per_task):
            raise ConfigError(f"model.adapter.scope=query needs one shared adapter (model.adapter.kind lora or ia3, "
                              f"per_task false); got kind={self.kind}, per_task={self.per_task}")


@dataclass
class ModelConfig:
    """Which document model to train.

    `kind` picks the loss path (see `KINDS` above); `encoder` is `minilm`, `mpnet`, a shipped adapter
    (`aspire-minilm`) or a Hugging Face directory; one with adapters of its own continues training them where
    `adapter` describes the same ones (a warm start; `task_formats.check_same_adapter`). `ot_*` are the OT
    distance's settings (`aspire.scoring.OTScorer`: entropic regulariser `ot_eps`, sentence-weight temperature
    `ot_tau`, Sinkhorn tolerance, iteration cap and gradient mode), read by the kinds that train or score with it
    (`ot`, `ts+ot`); `att_tau` is the attention scorer's softmax temperature (kind `att`); set to anything but its
    default for another kind, nothing reads one: a ConfigError names it (`kind_reads`); `pooling` only matters for
    `cocite_vector` (one vector a paper).
    `max_length` (0 = the model's limit) and `include_title` are the encoder's settings.

    Task formats (SPECTER2, `aspire.train.task_formats`): `control_codes` `task` prepends a code per
    training task (`[COCITE]`), `facet` adds `[BACKGROUND]` `[METHOD]` `[RESULT]` for facet queries at
    inference and `[DOC]` for every other paper (training papers included: the co-citation data has no
    facet labels). `adapter` trains peft adapters instead of the whole encoder (with codes: LoRA only,
    the codes' embeddings train beside it).
    """

    kind: ModelKind = "ts"
    encoder: str = "minilm"
    ot_eps: float = ranged(0.05, gt=0)
    ot_tau: float = ranged(1.0, gt=0)
    ot_tol: float = ranged(1e-4, gt=0)
    ot_max_iter: int = ranged(1000, ge=1)
    ot_grad: Literal["implicit", "autograd"] = "implicit"
    att_tau: float = ranged(1.0, gt=0)
    pooling: Literal["mean"] = "mean"
    max_length: int = ranged(0, ge=0)
    include_title: bool = False
    control_codes: Literal["none", "task", "facet"] = "none"
    adapter: AdapterConfig = field(default_factory=AdapterConfig)

    def __post_init__(self) -> None:
        if self.kind in KINDS:  # a scorer setting the kind never reads was once accepted unsaid
            unread = [f"model.{k}={v!r}" for k, v in unread_settings(self.kind, vars(self)).items()]
            if unread:
                readers = "; ".join(f"{', '.join(keys)}: kinds {', '.join(k for k in KINDS if keys[0] in kind_reads(k))}"
                                    for keys in SCORER_KEYS.values())
                raise ConfigError(f"{', '.join(unread)}: not read by model.kind {self.kind} (read by {readers}); "
                                  "remove it or choose a kind that reads it")
        if self.control_codes != "none" and self.adapter.kind == "ia3":
            raise ConfigError(f"model.control_codes={self.control_codes} with model.adapter.kind=ia3: IA3 cannot "
                              "train the codes' embeddings; use model.adapter.kind=lora or no codes")
        if self.control_codes != "none" and self.adapter.scope == "query":
            raise ConfigError(f"model.control_codes={self.control_codes} with model.adapter.scope=query: a query "
                              "adapter keeps the papers' encoding as it is; train codes without it")


@dataclass
class LossConfig:
    """The loss over the model's similarity (minus its distance; cosine for kind `abstract`).

    `kind: triplet` (the paper's): max(0, d(a, p) - d(a, n) + margin); `negatives`: `all` averages
    it over every allowed in-batch negative of an anchor, `one` takes a single in-batch negative per
    anchor (the next allowed example of the seeded batch order, i.e. a random one), as in the
    paper's triples. The other kinds (`aspire.losses.MATRIX_LOSSES`) always use the whole B x B
    in-batch matrix plus every hard negative of the batch: `mnrl` (multiple-negatives ranking /
    InfoNCE, logits `scale` * similarity, `symmetric` adds the positive-to-anchors direction),
    `multi_similarity` (`ms_alpha`, `ms_beta`, `ms_base`), `bce` (pairs labelled 1 / 0, logits
    `scale` * (similarity - `bce_threshold`)). A `distill` task's rows under `mnrl` take the teacher's
    in-batch similarities times `teacher_scale` as soft targets (`aspire.losses.ranking`). `term_scale`
    {term: scale} (`mnrl` only) gives one of the model kind's terms its own scale, e.g. `aligned` (a min-L2
    distance, which spreads wider than the cosines) beside `whole` and `facet` in kind `hybrid+ts`.

    Each kind reads only its own keys (`aspire.losses.LOSS_KEYS`): another kind's key set to anything but its
    default is a `ConfigError` naming it.
    """

    kind: Literal[LOSS_KINDS] = "triplet"  # aspire.losses.LOSS_KINDS: triplet or a MATRIX_LOSSES name
    margin: float = ranged(1.0, ge=0)
    negatives: Literal["all", "one"] = "one"
    scale: float = ranged(20.0, gt=0)
    symmetric: bool = False
    ms_alpha: float = ranged(2.0, gt=0)
    ms_beta: float = ranged(50.0, gt=0)
    ms_base: float = ranged(0.5)
    bce_threshold: float = ranged(0.5)
    teacher_scale: float = ranged(20.0, gt=0)
    term_scale: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        own = LOSS_KEYS.get(self.kind)  # an unknown kind is reported where the loss is built
        if own is not None:
            _refuse_stray(self, ("kind",) + own, f"loss: kind {self.kind}", f"reads {', '.join(own)}")
        for term, scale in self.term_scale.items():  # inf or NaN trained to a NaN loss
            if not (math.isfinite(scale) and scale > 0):
                raise ConfigError(f"loss.term_scale: each scale must be > 0 and finite; loss.term_scale.{term} must be "
                                  f"a finite number > 0, got {scale!r}")


@dataclass
class DataConfig:
    """The co-citation examples directory written by `aspire.data.cocite` (`examples.{train,dev}.jsonl`
    + `abstracts.jsonl`); the dev split (held-out co-cited sets) gives the model-selection loss.

    `align`: which alignment field (`cc_align` / `abs_align`) gives the aligned sentence pair of
    the `ts` loss (kind `abs` is `ts` with `abs_align`). `both_directions`: train on (p, p') and
    (p', p). `hard_negatives`: optional JSONL `{"paper_id": ..., "negatives": [...]}`; with
    `example_negatives` the examples' own `negative_ids` serve as extra negatives too.
    `max_sentences` (0 = no cut) cuts long abstracts; `max_examples` (0 = all) and `dev_batches` (0 = all) cap
    the data for quick runs (the capped dev batches are the same whatever `train.seed` is);
    `use_dev: false` trains without dev loss / model selection (and refuses `dev_batches` and
    `train.dev_before`, which it would not read). `both_directions`, `hard_negatives`, `example_negatives` and
    `max_examples` are the co-cited pairs' own (`PAIR_KEYS`): with `tasks` but none named `cocite`, one set to anything
    but its default is a ConfigError (`max_examples` once capped nothing of a context2doc or distill run).
    """

    examples_dir: str = "runs/cocite-acl/6_aligned"
    align: Literal["cc_align", "abs_align"] = "cc_align"
    both_directions: bool = True
    hard_negatives: str | None = None
    example_negatives: bool = False
    max_sentences: int = ranged(24, ge=0)
    max_examples: int = ranged(0, ge=0)
    dev_batches: int = ranged(0, ge=0)
    use_dev: bool = True


# the `data` settings of the co-cited pairs themselves, read where they train (no tasks, or a `cocite` task): a task
# that reads the examples folder's abstracts alone (`crop`, `title`) takes every paper, whatever they say
PAIR_KEYS = ("both_directions", "hard_negatives", "example_negatives", "max_examples")


@dataclass
class TrainConfig:
    """Optimisation, schedule, checkpointing and logging.

    The schedule runs for `max_steps` optimizer steps (0: `epochs` epochs); `stop_after` (0 = off)
    ends this invocation after that many steps with a checkpoint, to be continued by `--resume`.
    A step is `grad_accum` micro-batches of `batch_size` pairs on each DDP rank, each micro-batch its own
    in-batch negatives and the step's gradient the mean of their losses (not one batch of `grad_accum` x
    `batch_size` pairs). An epoch is the whole steps one seeded permutation of the examples fills: the
    examples past them (fewer than `batch_size` x ranks x `grad_accum`) sit that epoch out. `eval_every`
    (0 = only at the end) computes the dev loss and checkpoints; `save_every` checkpoints between.
    `dev_before` also logs the dev loss of the starting weights as step 0, the reference that
    tells whether training helped at all (no checkpoint is written for it). `keep_checkpoints`: the newest that many
    checkpoints stay, plus the ones the `latest` and `best` pointers name (0: those alone).
    `device: auto` takes the local GPU under torchrun when there is one, else the CPU.
    """

    out_dir: str = "runs/aspire"
    seed: int = ranged(0, ge=0)
    batch_size: int = ranged(16, ge=1)
    grad_accum: int = ranged(1, ge=1)
    lr: float = ranged(2e-5, gt=0)
    weight_decay: float = ranged(0.01, ge=0)
    warmup_steps: int = ranged(100, ge=0)
    max_steps: int = ranged(0, ge=0)
    stop_after: int = ranged(0, ge=0)
    epochs: int = ranged(1, ge=1)
    clip_norm: float = ranged(1.0, gt=0)
    log_every: int = ranged(10, ge=1)
    eval_every: int = ranged(500, ge=0)
    dev_before: bool = False
    save_every: int = ranged(500, ge=0)
    keep_checkpoints: int = ranged(2, ge=0)
    num_workers: int = ranged(0, ge=0)
    device: str = "auto"
    progress: bool = True

    def __post_init__(self) -> None:
        if not str(self.out_dir).strip():  # an empty one trained into the working directory
            raise ConfigError("train.out_dir: must name a directory, got an empty value")
        try:
            self.device = device_or_auto(str(self.device))  # a bad one was a traceback from inside torch
        except argparse.ArgumentTypeError as err:
            raise ConfigError(f"train.device: {err}") from None


@dataclass
class AbstractConfig:
    """How kind `abstract` makes one vector a paper, as the `abstract` scorer of `aspire.evaluate` does:
    the text `title + joiner + abstract` (the title left out when empty), cut to `model.max_length`
    word pieces (0: the model's limit), mean-pooled over every piece, L2-normalised if `normalize`."""

    joiner: str = " "
    normalize: bool = True


@dataclass
class TaskConfig:
    """One source of (anchor, positive) pairs (`aspire.train.tasks`); several make a multi-task run.

    `name`: `cocite` (the co-cited pairs of `data.examples_dir`), `context2doc` (each citing sentence
    of the context2doc *train* split paired with each paper it cites; the dev split gives the dev
    loss; `data_dir` holds `cocitations.jsonl`; pairs citing a CSFCube or reviewer-set paper under `benchmarks_dir`
    are left out) or `crop` (two random spans of `span_min`..`span_max`
    sentences of one abstract, `views` pairs per abstract; `sources`: `cocite` (the co-citation
    abstracts, the default) and/or `acl` (`acl_path`, at most `max_papers` of them, 0 = all; both refused
    without `acl`); every benchmark paper
    under `benchmarks_dir` is removed by normalised title (null turns the removal off, with a
    warning); `dev_share` of the abstracts, by hash, give the dev pairs), `title` (a title paired with
    its abstract; same `sources`) or `author` (two ACL papers sharing at least `min_shared_authors`
    authors, `views` partners a paper; authors of more than `max_author_papers` papers link nothing; `sources`:
    `acl` alone, the default). `distill`: each ACL paper (`sources: [acl]`, the default; sampled and filtered as
    above) paired with `views` of its `neighbours` nearest papers by the teacher vectors of `teacher_dir`
    (`aspire.train.teacher`, written for the same `max_papers`); with `loss.kind: mnrl` each such row's loss is the KL
    divergence to the teacher's in-batch similarities (`loss.teacher_scale`). `near_negatives` adds to each
    pair another of the anchor's `neighbours` as its hard negative, so the teacher's soft targets also rank
    papers near the anchor (the pools of a faceted benchmark hold such papers), not only random ones.
    `weight` multiplies the task's loss; `ratio` is its share of each batch (`mix.mode: mixed`) or
    of the batches (`alternating`); `steps` is its stage length in optimizer steps (`sequential`).

    The keys are one flat mapping in YAML, but each task reads only its own (`TASK_KEYS`, beside the mixing keys
    every task has): a key of another task set to anything but its default is a `ConfigError` naming it, never
    silently ignored. `sources` not given is the task's own default (`default_sources`: `cocite` where the task reads
    it, `acl` for `author` and `distill`); the list is recorded, never None. Settings that cannot make the task's pairs
    are refused too (`task_problem`: a `sources` given that the task cannot read, e.g. `cocite` for `author`) and, in
    `Config`, a task named twice or a `distill` task under a loss other than `mnrl` (`tasks_problem`).
    """

    name: Literal["cocite", "context2doc", "crop", "title", "author", "distill"] = "cocite"
    weight: float = ranged(1.0, ge=0)
    ratio: float = ranged(1.0, gt=0)
    steps: int = ranged(0, ge=0)
    data_dir: str = "../shared/data/cocite-acl"
    sources: list[str] = None  # not given (None): `default_sources(name)`, set in __post_init__; YAML null is refused
    acl_path: str = "../shared/data/acl-anthology/papers.jsonl.gz"
    benchmarks_dir: str | None = "../shared/data"
    span_min: int = ranged(1, ge=1)
    span_max: int = ranged(3, ge=1)
    views: int = ranged(1, ge=1)
    max_papers: int = ranged(0, ge=0)
    dev_share: float = ranged(0.05, ge=0, lt=1)
    min_shared_authors: int = ranged(1, ge=1)
    max_author_papers: int = ranged(50, ge=2)
    teacher_dir: str | None = None
    neighbours: int = ranged(10, ge=1)
    near_negatives: bool = False

    def __post_init__(self) -> None:
        own = default_sources(self.name)  # an author task's default was cocite: refused, so `sources: [acl]` was a must
        if self.sources is None:
            self.sources = own
        _refuse_stray(self, MIX_KEYS + TASK_KEYS[self.name], f"tasks[]: {_a_task(self.name)}",
                      f"reads {', '.join(TASK_KEYS[self.name]) or 'no key'} beside {', '.join(MIX_KEYS)}",
                      {"sources": own})
        if "acl_path" in TASK_KEYS[self.name] and "acl" not in self.sources:  # only the ACL source reads them
            unread = [f"tasks[].{k}={getattr(self, k)!r}" for k in ("acl_path", "max_papers")
                      if getattr(self, k) != _default(_field(TaskConfig, k))]
            if unread:
                raise ConfigError(f"{', '.join(unread)} with tasks[].sources={self.sources}: {_a_task(self.name)} "
                                  "reads acl_path and max_papers for the acl source only; remove "
                                  f"{'it' if len(unread) == 1 else 'them'} or add acl to sources")
        problem = task_problem(self)
        if problem:  # once found only after the model had loaded and the task's other sources been read
            raise ConfigError(problem)


def _a_task(name: str) -> str:
    """"a crop task", "an author task": a `name` task with its article, for messages."""
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name} task"


def _default(f):
    return f.default_factory() if f.default is MISSING else f.default


def _field(cls, name: str):
    return next(f for f in fields(cls) if f.name == name)


def _refuse_stray(config, own: tuple[str, ...], what: str, reads: str, defaults: dict | None = None) -> None:
    """ConfigError naming the keys of `config` outside `own` that are set to anything but their default (`defaults`
    {key: value} where it is not the field's: one resolved in `__post_init__`): one flat section shared by several
    kinds, each reading its own keys, never ignores a key silently."""
    defaults = defaults or {}
    stray = [f.name for f in fields(config)
             if f.name not in own and getattr(config, f.name) != defaults.get(f.name, _default(f))]
    if stray:
        raise ConfigError(f"{what} does not read {', '.join(stray)} (it {reads}); remove "
                          f"{'it' if len(stray) == 1 else 'them'} or choose the kind that reads "
                          f"{'it' if len(stray) == 1 else 'them'}")


# what each task reads of TaskConfig (aspire.train.tasks), beside the mixing keys every task has
MIX_KEYS = ("name", "weight", "ratio", "steps")
_SAMPLED = ("sources", "acl_path", "benchmarks_dir", "max_papers", "dev_share")  # abstracts of cocite and/or ACL
TASK_KEYS: dict[str, tuple[str, ...]] = {
    "cocite": (),  # the co-cited pairs of the data section
    "context2doc": ("data_dir", "benchmarks_dir"),  # benchmarks_dir: CSFCube / reviewer papers left out of its pairs
    "crop": _SAMPLED + ("span_min", "span_max", "views"),
    "title": _SAMPLED,
    "author": _SAMPLED + ("min_shared_authors", "max_author_papers", "views"),
    "distill": _SAMPLED + ("teacher_dir", "neighbours", "views", "near_negatives"),
}
# the sources each sampled task reads (aspire.train.tasks): the co-citation abstracts and/or the ACL Anthology
TASK_SOURCES: dict[str, tuple[str, ...]] = {"crop": ("cocite", "acl"), "title": ("cocite", "acl"), "author": ("acl",),
                                            "distill": ("acl",)}


def default_sources(name: str) -> list[str]:
    """A `name` task's `sources` when none are given: `["cocite"]` where it can read that source (`TASK_SOURCES`; a
    task reading none, `cocite` or `context2doc`, records it too, as always), else every source it can read (`author`,
    `distill`: `["acl"]`)."""
    valid = TASK_SOURCES.get(name, ("cocite",))
    return ["cocite"] if "cocite" in valid else list(valid)


def sources_problem(name: str, sources: list[str], valid: tuple[str, ...]) -> str | None:
    """Why a `name` task cannot read `sources` (none, or one outside `valid`), or None."""
    unknown = sorted(set(sources) - set(valid))
    if unknown:
        return f"{name} task: unknown source(s) {unknown} in tasks[].sources={sources}; valid: {sorted(valid)}"
    return None if sources else f"{name} task: tasks[].sources is empty; valid: {sorted(valid)}"


def task_problem(task: TaskConfig) -> str | None:
    """Why `task`'s own settings cannot make its pairs, or None: a source it cannot read (`TASK_SOURCES`; an `author`
    or `distill` task reads `acl` alone, e.g. not a `cocite` given), a crop's `span_max` below its `span_min`, a
    `distill` task without `teacher_dir`, with more `views` than `neighbours` (fewer pairs than asked) or with
    `near_negatives` and one neighbour (the partner: no negative). Refused when the config loads (`TaskConfig`) and,
    for a task changed since, by `aspire.train.tasks.build_tasks` (`tasks_problem`)."""
    if task.name in TASK_SOURCES:
        problem = sources_problem(task.name, task.sources, TASK_SOURCES[task.name])
        if problem:
            return problem
    if task.name == "crop" and task.span_max < task.span_min:
        return (f"crop task: span_max {task.span_max} < span_min {task.span_min}; raise tasks[].span_max or lower "
                "tasks[].span_min")
    if task.name != "distill":
        return None
    if task.teacher_dir is None:
        return "distill task: tasks[].teacher_dir is required (write it with python -m aspire.train.teacher)"
    if task.views > task.neighbours:  # a paper has `neighbours` partners: views beyond them gave fewer pairs, unsaid
        return (f"distill task: views={task.views} > neighbours={task.neighbours}: a paper is paired with "
                f"{task.views} of its {task.neighbours} nearest papers; lower tasks[].views or raise tasks[].neighbours")
    if task.near_negatives and task.neighbours < 2:  # the one neighbour is the partner: no pair got a negative
        return ("distill task: near_negatives needs neighbours >= 2 (a neighbour besides the partner), "
                f"got neighbours={task.neighbours}; raise tasks[].neighbours or remove tasks[].near_negatives")
    return None


def tasks_problem(tasks: list[TaskConfig], loss: LossConfig) -> str | None:
    """Why `tasks` cannot train together under `loss`, or None: a task named twice, a task's own settings
    (`task_problem`, naming its index) or a `distill` task under a loss other than `mnrl` without `symmetric` (its
    rows take the teacher's soft targets). Refused when the config loads (`Config`) and by
    `aspire.train.tasks.build_tasks`."""
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        return f"tasks: each task may appear once, got {names}"
    for i, task in enumerate(tasks):
        problem = task_problem(task)
        if problem:
            return f"tasks[{i}]: {problem}"
    if "distill" in names and (loss.kind != "mnrl" or loss.symmetric):
        return (f"distill task: needs loss.kind mnrl without symmetric, got {loss.kind} (symmetric {loss.symmetric}): "
                "only mnrl takes the teacher's soft targets; set loss.kind=mnrl and loss.symmetric=false")
    return None


def steps_problem(steps: Sequence, unit: str = "") -> str | None:
    """Why a sequential mix cannot run stages of `steps` micro-batches or steps (one a task, in order), or None: each
    must be an integer >= 1 (a stage of none left its task untrained). Refused when the config loads, for the tasks'
    `steps` (`sequential_problem`), and by `aspire.train.mixing.MixSampler`, for its `stage_batches`: `unit` follows
    the numbers where they are not the tasks' steps (the sampler's micro-batches)."""
    bad = next((t for t, n in enumerate(steps) if not is_whole(n, 1)), None)
    return None if bad is None else (f"tasks[{bad}].steps: mix.mode sequential needs steps >= 1 for every task, "
                                     f"got {list(steps)}{unit}")


def sequential_problem(cfg: Config) -> str | None:
    """Why `cfg`'s `mix.mode: sequential` run cannot run its stages, or None: a task's `steps` below 1
    (`steps_problem`) or a `train.max_steps` neither 0 nor the tasks' steps together (the run is its stages, one
    epoch). Refused when the config loads (`Config`) and, for a config changed since, by
    `aspire.train.trainer.Trainer`."""
    if cfg.mix.mode != "sequential" or not cfg.tasks:
        return None
    steps = [t.steps for t in cfg.tasks]
    problem = steps_problem(steps)
    if problem or cfg.train.max_steps in (0, sum(steps)):
        return problem
    return (f"mix.mode sequential runs the tasks' steps ({sum(steps)} in all); train.max_steps must be 0 or that, "
            f"got {cfg.train.max_steps}")


@dataclass
class MixConfig:
    """How the `tasks` combine (`aspire.train.mixing`): `mixed` (every batch holds each task in
    proportion to its `ratio`), `alternating` (whole batches of one task, in proportion to `ratio`),
    `sequential` (stage after stage, each task for its `steps`, each >= 1; `train.max_steps` 0 or their sum, the
    run: `sequential_problem`)."""

    mode: Literal["mixed", "alternating", "sequential"] = "mixed"


@dataclass
class Config:
    """The whole training config (sections `model`, `loss`, `data`, `train`; `abstract` for kind
    `abstract`; `tasks` and `mix` for a multi-task run: with no tasks, the co-cited pairs alone, and `mix.mode`
    off its default is refused)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    abstract: AbstractConfig = field(default_factory=AbstractConfig)
    tasks: list[TaskConfig] = field(default_factory=list)
    mix: MixConfig = field(default_factory=MixConfig)

    def __post_init__(self) -> None:
        if isinstance(self.data, DataConfig) and isinstance(self.train, TrainConfig) and not self.data.use_dev:
            # without a dev split nothing takes a dev loss: these were accepted and silently never read
            unread = [key for key, value, default in (("train.dev_before", self.train.dev_before, False),
                                                      ("data.dev_batches", self.data.dev_batches, 0)) if value != default]
            if unread:
                raise ConfigError(f"{' and '.join(unread)} with data.use_dev=false: no dev loss is taken, so nothing "
                                  f"reads {'it' if len(unread) == 1 else 'them'}; remove {'it' if len(unread) == 1 else 'them'} "
                                  "or set data.use_dev=true")
        if not self.tasks and isinstance(self.mix, MixConfig) and self.mix.mode != _default(_field(MixConfig, "mode")):
            # without tasks the co-cited pairs train alone, with no mixing: the mode was accepted and never read
            raise ConfigError(f"mix.mode={self.mix.mode} without tasks: only a multi-task run (tasks) reads the mix; "
                              "remove it or add tasks")
        if isinstance(self.data, DataConfig) and all(isinstance(t, TaskConfig) for t in self.tasks) and self.tasks \
                and "cocite" not in [t.name for t in self.tasks]:  # no co-cited pairs train: their settings were unread
            stray = [f"data.{k}={getattr(self.data, k)!r}" for k in PAIR_KEYS
                     if getattr(self.data, k) != _default(_field(DataConfig, k))]
            if stray:
                raise ConfigError(f"{', '.join(stray)} with tasks {[t.name for t in self.tasks]}: only the co-cited "
                                  f"pairs read {'it' if len(stray) == 1 else 'them'} (no tasks, or a task with name "
                                  f"cocite); remove {'it' if len(stray) == 1 else 'them'} or add the cocite task")
        # a task's steps are read by the sequential mix alone, and its ratio by the others: never ignored silently
        mode, unread = self.mix.mode, ("ratio", 1.0) if self.mix.mode == "sequential" else ("steps", 0)
        for i, task in enumerate(self.tasks):
            if isinstance(task, TaskConfig) and getattr(task, unread[0]) != unread[1]:
                raise ConfigError(f"tasks[{i}].{unread[0]}={getattr(task, unread[0])} is not read by mix.mode {mode} "
                                  f"(sequential reads each task's steps, mixed and alternating its ratio); remove it "
                                  "or choose the mix that reads it")
        if isinstance(self.loss, LossConfig) and all(isinstance(t, TaskConfig) for t in self.tasks):
            problem = tasks_problem(self.tasks, self.loss)
            if problem:  # once found only after the model had loaded (and, with the ACL source, been read: minutes)
                raise ConfigError(problem)
        if isinstance(self.mix, MixConfig) and isinstance(self.train, TrainConfig) \
                and all(isinstance(t, TaskConfig) for t in self.tasks):
            problem = sequential_problem(self)
            if problem:  # once found only after the model had loaded and the tasks' data been read
                raise ConfigError(problem)
        if isinstance(self.loss, LossConfig) and self.loss.teacher_scale != _default(_field(LossConfig, "teacher_scale")):
            if not any(isinstance(t, TaskConfig) and t.name == "distill" for t in self.tasks):  # no teacher targets
                raise ConfigError(f"loss.teacher_scale={self.loss.teacher_scale} without a distill task: only a distill "
                                  "task's rows take the teacher's soft targets it scales, so nothing reads it; remove it "
                                  "or add a task with name distill")
        if isinstance(self.model, ModelConfig) and isinstance(self.loss, LossConfig) and self.model.kind in KINDS:
            problem = term_scale_problem(self.model.kind, self.loss.term_scale)
            if problem:  # once found only as the model was built, after the encoder had loaded
                raise ConfigError(problem)
        if isinstance(self.model, ModelConfig) and isinstance(self.abstract, AbstractConfig) \
                and self.model.kind != "abstract":
            stray = [f"abstract.{f.name}" for f in fields(self.abstract) if getattr(self.abstract, f.name) != _default(f)]
            if stray:
                raise ConfigError(f"{', '.join(stray)} with model.kind={self.model.kind}: only kind abstract encodes a "
                                  "paper as one text, so nothing reads the abstract section; remove it or set "
                                  "model.kind=abstract")


def examples_folder(path: str | Path, setting: str = "data.examples_dir") -> Path:
    """`path` when it is a folder (`input_folder`, naming `setting`); a missing one is refused with how to build it."""
    try:
        return input_folder(path, setting)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such folder ({setting}): {path}; build it with `aspire data run-all`") from None


def check_inputs(cfg: Config) -> None:
    """A training run's check (`aspire.train.trainer.run`), before a model loads or any data is read: each input the
    config reads is there; an OSError naming the setting otherwise. The inputs: `data.examples_dir` (a folder holding
    `abstracts.jsonl` and `examples.train.jsonl`; a missing one is refused saying how to build it: `examples_folder`)
    and `data.hard_negatives`, where the co-cited pairs or a task's `cocite` source are read (first, as their reader
    does, the folder of each refused with a ValueError when a stage stopped before it finished left it:
    `aspire.data.cocite.stages.check_finished`); a task's `data_dir` (its `cocitations.jsonl`), `acl_path` (for the
    `acl` source), `benchmarks_dir` and `teacher_dir` (where set), where the task reads them (`TASK_KEYS`). A missing
    one was found only once the model had loaded (and, for a task's, its other sources been read: minutes with the
    ACL source)."""
    for setting, path, check in _inputs(cfg):
        check(path, setting)


def example_files(cfg: Config) -> list[tuple[str, Path]]:
    """(setting, file) of each file the run's examples are read from: the files `check_inputs` checks, the co-cited
    pairs' dev split where `data.use_dev` reads it, and the files of a distill task's `teacher_dir` (its vectors, ids
    and metadata, and its sentences where written: `aspire.train.teacher.teacher_files`), which pick each paper's
    partners and give the loss its targets (those that are there: a missing one is refused by its reader). A resumed
    run compares their checksums with the ones its run started with (`aspire.train.state.check_resume_examples`)."""
    from aspire.train.teacher import teacher_files

    files = [(setting, Path(path)) for setting, path, check in _inputs(cfg) if check is input_file]
    dev = Path(cfg.data.examples_dir) / "examples.dev.jsonl"
    if _reads_cocite(cfg) and cfg.data.use_dev and dev.is_file():
        files.append(("data.examples_dir", dev))
    for i, task in enumerate(cfg.tasks):
        if "teacher_dir" in TASK_KEYS[task.name] and task.teacher_dir is not None:
            files += [(f"tasks[{i}].teacher_dir", path) for path in teacher_files(task.teacher_dir)]
    return files


def _reads_cocite(cfg: Config) -> bool:
    """Whether the run reads the co-cited pairs of `data.examples_dir`: with no tasks, or a task whose pairs (or one of
    whose sources) they are."""
    if not cfg.tasks:  # the co-cited pairs alone
        return True
    return any(task.name == "cocite" or ("sources" in TASK_KEYS[task.name] and "cocite" in task.sources)
               for task in cfg.tasks)


def _inputs(cfg: Config) -> list[tuple[str, str | Path, Callable]]:
    """(setting, path, its check) of each input the config reads, a folder before its files (`check_inputs`)."""
    inputs: list[tuple[str, str | Path, Callable]] = []
    for i, task in enumerate(cfg.tasks):
        reads, where = TASK_KEYS[task.name], f"tasks[{i}]"
        if "data_dir" in reads:
            inputs.append((f"{where}.data_dir", Path(task.data_dir) / "cocitations.jsonl", input_file))
        if "acl_path" in reads and "acl" in task.sources:
            inputs.append((f"{where}.acl_path", task.acl_path, input_file))
        inputs += [(f"{where}.{key}", getattr(task, key), input_folder) for key in ("benchmarks_dir", "teacher_dir")
                   if key in reads and getattr(task, key) is not None]
    if _reads_cocite(cfg):
        from aspire.data.cocite.stages import check_finished  # a stopped stage's files: partial, or not written yet

        root = cfg.data.examples_dir
        inputs += [("data.examples_dir", root, examples_folder), ("data.examples_dir", root, check_finished)] + [
            ("data.examples_dir", Path(root) / name, input_file) for name in ("abstracts.jsonl", "examples.train.jsonl")]
        if cfg.data.hard_negatives is not None:
            inputs += [("data.hard_negatives", Path(cfg.data.hard_negatives).parent, check_finished),
                       ("data.hard_negatives", cfg.data.hard_negatives, input_file)]
    return inputs
