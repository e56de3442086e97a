"""Training data for the document models: co-cited pairs -> tokenised `TripletBatch`es.

Reads the examples directory written by `aspire.data.cocite` (stage `examples`):
`examples.{train,dev}.jsonl`, one unordered co-cited pair a line
(`query_id`, `positive_id`, `negative_ids`, `set_ids`, contexts, and — once `aspire.data.align`
has run — `cc_align` / `abs_align`: `[i, j]`, the aligned sentence in the query and in the
positive), and `abstracts.jsonl` in the `Paper` format. Examples whose ingest stage did not take the benchmark
papers out (`ingest.exclude_benchmark_papers`) are read with a warning (`check_benchmark_papers_excluded`).

Batches come from `EpochBatchSampler`: a seeded permutation per epoch, cut into micro-batches,
sharded over DDP ranks, resumable from any micro-batch position. Tokenisation happens in the
collate function, so DataLoader workers do it in parallel with training.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Sampler

from aspire.config import is_whole
from aspire.data.acl import same_work_groups
from aspire.data.cocite.config import REPORT
from aspire.data.cocite.sets import cocited_partners
from aspire.data.cocite.stages import STAGE_DIRS, check_finished, stage_report
from aspire.data.papers import Paper, read_paper_map
from aspire.io import iter_jsonl, require
from aspire.train.config import DataConfig, examples_folder
from aspire.train.document_model import TripletBatch
from aspire.train.mixing import check_position, check_sizes
from aspire.train.task_formats import DEFAULT_TASK

log = logging.getLogger(__name__)
TEACHER_TASK = "distill"  # the task whose pairs carry teacher vectors (`aspire.train.tasks.distill_task`)


@dataclass(frozen=True)
class Example:
    """One (anchor, positive) pair of papers (ids in the dataset's `papers`): `members` is every
    paper that must not serve as the anchor's negative (for co-cited pairs, every paper of every
    co-cited set holding the pair and every paper co-cited with the anchor in any set of its split,
    each with its other versions: `read_examples`);
    `negative` an optional hard negative; `align` the aligned sentence pair or None; `source` the
    paper the positive stands for when it is a derived text (a crop: its abstract's id; None: the
    positive itself); `task` the task's index in a multi-task run (`aspire.train.tasks`)."""

    query_id: str
    positive_id: str
    members: tuple[str, ...]
    negative: str | None
    align: tuple[int, int] | None
    source: str | None = None
    task: int = 0

    @property
    def positive_source(self) -> str:
        return self.source or self.positive_id


def _read_hard_negatives(path: str | Path) -> dict[str, list[str]]:
    """`{"paper_id": ..., "negatives": [...]}` JSONL -> {paper_id: negatives}; ValueError naming the line of a
    record whose `paper_id` is not a string, whose `negatives` is not a list of strings, or whose paper has a
    line already (the later line would silently replace the earlier one's negatives)."""
    out: dict[str, list[str]] = {}
    at: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        require(obj, ("paper_id", "negatives"), path, lineno)
        pid = obj["paper_id"]
        if not isinstance(pid, str):
            raise ValueError(f"{path}:{lineno}: paper_id must be a string, got {pid!r:.60}")
        if pid in at:
            raise ValueError(f"{path}:{lineno}: paper {pid!r} has its hard negatives on line {at[pid]} already")
        at[pid] = lineno
        out[pid] = _string_list(obj, "negatives", f"{path}:{lineno}")
    return out


def _string_list(obj: dict, key: str, where: str) -> list[str]:
    """`obj[key]`, checked to be a list of strings (a string alone would be read one character at a time)."""
    value = obj[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: {key} must be a list of paper ids (strings), got {value!r:.80}")
    return value


def _checked_align(value, key: str, where: str) -> tuple[int, int] | None:
    """An example's alignment `value` (`cfg.align`: null, or the positions of one sentence in the query and one
    in the positive) as a pair of ints; ValueError naming `where` and `key` unless it is two ints >= 0."""
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)):
        raise ValueError(f"{where}: {key} must be two sentence positions [i, j] (ints >= 0), got {value!r:.60}")
    return value[0], value[1]


def _report_lost_alignments(examples: list[Example], full: dict[str, Paper], cfg: DataConfig, split: str) -> None:
    """Warn about the examples whose alignment names a sentence their abstract does not have, or one that
    `cfg.max_sentences` cuts off: they add no aligned-pair loss (kinds ts, abs, ts+ot, hybrid+ts, hybrid)."""
    def past(e: Example, limit: Callable[[str], int]) -> bool:
        return e.align is not None and (e.align[0] >= limit(e.query_id) or e.align[1] >= limit(e.positive_id))

    absent = sum(past(e, lambda pid: len(full[pid].sentences)) for e in examples)
    if absent:
        log.warning("%d of the %d %s examples name in %s a sentence their abstract does not have (alignments made "
                    "from another abstracts.jsonl?): they add no aligned-pair loss", absent, len(examples), split,
                    cfg.align)
    if cfg.max_sentences:
        cut = sum(past(e, lambda pid: min(cfg.max_sentences, len(full[pid].sentences))) for e in examples) - absent
        if cut:
            log.warning("%d of the %d %s examples align a sentence past data.max_sentences=%d, which cuts it off: "
                        "they add no aligned-pair loss", cut, len(examples), split, cfg.max_sentences)


def read_examples(path: str | Path, cfg: DataConfig, papers: dict[str, Paper],
                  hard: dict[str, list[str]] | None = None, held_out: frozenset[str] = frozenset()) -> list[Example]:
    """Examples of one split file, both directions if `cfg.both_directions`.

    An anchor's `members` (never its negative, in batch or hard) are the papers of the sets holding
    its pair and every paper co-cited with the anchor in a set that any line of the file names (its
    positive in another example: in-batch, that example's positive would be a false negative), each
    with its other versions in `papers` (`aspire.data.acl.same_work_groups`: one work under several ids,
    such as P05-1018 and its journal version J08-1001, is read as one paper, see `_cocited_partners`).
    The hard negative of an anchor is the first of `hard[anchor]` (the hard-negatives file) that is
    not one of its members, else, with `cfg.example_negatives`, the example's first `negative_ids`, passing over
    the papers of `held_out` (reading the train split: the papers only the dev split names, `load_split`).
    Raises ValueError naming the file and line of an example whose paper, or a paper of one of its sets, has
    no abstract in `papers`, that pairs a paper with itself or repeats an earlier line's pair (in either order:
    one co-cited pair a line), or whose fields are malformed: ids that are not strings, `set_ids` / `negative_ids`
    that are not lists of strings, an alignment (`cfg.align`) that is not two sentence positions.
    """
    path = Path(path)
    partners = _cocited_partners(path, papers)
    out: list[Example] = []
    seen: dict[tuple[str, str], int] = {}
    passed = 0  # examples whose first allowed negative is held out
    for lineno, obj in iter_jsonl(path):
        require(obj, ("query_id", "positive_id", "set_ids"), path, lineno)
        where = f"{path}:{lineno}"
        q, p = obj["query_id"], obj["positive_id"]
        for key in ("query_id", "positive_id"):
            if not isinstance(obj[key], str) or not obj[key]:
                raise ValueError(f"{where}: {key} must be a paper id (a non-empty string), got {obj[key]!r:.60}")
        if q == p:
            raise ValueError(f"{where}: the example pairs paper {q!r} with itself")
        pair = (min(q, p), max(q, p))
        if pair in seen:  # trained on twice as often as every other pair, silently
            raise ValueError(f"{where}: the pair {q!r}, {p!r} repeats the example of line {seen[pair]} "
                             "(one co-cited pair a line)")
        seen[pair] = lineno
        for pid in (q, p):
            if pid not in papers:
                raise ValueError(f"{where}: paper {pid!r} has no abstract in abstracts.jsonl")
        set_ids = _string_list(obj, "set_ids", where)
        in_sets = {pid for sid in set_ids for pid in sid.split("|")} | {q, p}
        align = _checked_align(obj.get(cfg.align), cfg.align, where)
        listed = _string_list(obj, "negative_ids", where) if "negative_ids" in obj else []  # checked, used or not
        listed = listed if cfg.example_negatives else []
        directions = [(q, p, align), (p, q, None if align is None else (align[1], align[0]))]
        for anchor, positive, al in directions[: 2 if cfg.both_directions else 1]:
            members = tuple(sorted(in_sets | partners.get(anchor, set())))
            allowed = [n for n in list((hard or {}).get(anchor, ())) + listed if n not in members]
            negative = next((n for n in allowed if n not in held_out), None)
            passed += bool(allowed) and allowed[0] in held_out
            if negative is not None and negative not in papers:
                whence = (f"the hard negatives file {cfg.hard_negatives}" if negative in (hard or {}).get(anchor, ())
                          else where)
                raise ValueError(f"paper {negative!r}, a hard negative of {anchor!r} in {whence}, has no abstract in "
                                 f"abstracts.jsonl (a file mined from another examples folder?)")
            out.append(Example(anchor, positive, members, negative, al))
        if cfg.max_examples and len(out) >= cfg.max_examples:
            break
    if passed:
        log.info("%s: %d example(s) passed over a negative that only the dev split names (the dev loss's papers are "
                 "not trained on) for the next of their list", path, passed)
    return out[: cfg.max_examples] if cfg.max_examples else out


def _cocited_partners(path: Path, papers: dict[str, Paper]) -> dict[str, set[str]]:
    """Paper -> every paper sharing with it a co-cited set that a line of the examples file `path` names in its
    `set_ids`, or a line's pair (all lines, whatever `max_examples` keeps: a pair whose `set_ids` do not hold it
    still makes its papers partners), with the versions of each: the papers of one work in `papers`
    (`aspire.data.acl.same_work_groups`) are read as one paper, so a set holding one holds them all and they are
    each other's partners; ValueError naming the line of a malformed one, or of a
    set naming a paper without an abstract in `papers` (its integer id in a batch's groups would not exist)."""
    sets = []
    for lineno, obj in iter_jsonl(path):
        require(obj, ("set_ids",), path, lineno)
        pair = [obj.get("query_id"), obj.get("positive_id")]
        if all(isinstance(pid, str) for pid in pair):  # a malformed id is refused, naming the line, by the reader
            sets.append(pair)
        for sid in _string_list(obj, "set_ids", f"{path}:{lineno}"):
            missing = next((pid for pid in sid.split("|") if pid not in papers), None)
            if missing is not None:
                raise ValueError(f"{path}:{lineno}: paper {missing!r} has no abstract in abstracts.jsonl (a paper of "
                                 f"the co-cited set {sid!r})")
            sets.append(sid.split("|"))
    return cocited_partners(sets, same_work_groups(papers))


def split_paper_ids(cfg: DataConfig, split: str) -> set[str]:
    """Every paper a line of `examples.{split}.jsonl` of `cfg.examples_dir` names: its pair and the papers of its
    co-cited sets (all lines, whatever `max_examples` keeps); ValueError naming the line of malformed `set_ids` (a
    malformed id is left to `read_examples` to refuse, naming the line)."""
    path = Path(cfg.examples_dir) / f"examples.{split}.jsonl"
    named: set[str] = set()
    for lineno, obj in iter_jsonl(path):
        require(obj, ("set_ids",), path, lineno)
        named.update(pid for pid in (obj.get("query_id"), obj.get("positive_id")) if isinstance(pid, str))
        named.update(pid for sid in _string_list(obj, "set_ids", f"{path}:{lineno}") for pid in sid.split("|"))
    return named


def without_negative(examples: Sequence[Example], candidates: set[str]) -> list[Example]:
    """The `examples` no micro-batch can give a negative: without a hard negative, and every id of `candidates` (the
    papers the other pairs of their batches can bring: their positives' sources, and under a matrix loss their hard
    negatives) one of their `members`. A split of one co-cited set is all such examples: each paper is co-cited with
    each other one, so every in-batch candidate is masked and every step's loss is 0."""
    return [e for e in examples if e.negative is None and len(e.members) >= len(candidates)
            and candidates.issubset(e.members)]  # fewer members than candidates: one of these is outside them


class TripletDataset(Dataset):
    """Examples plus the abstracts they name; item i is `Example` i."""

    def __init__(self, examples: list[Example], papers: dict[str, Paper]) -> None:
        if not examples:
            raise ValueError("no training examples")
        self.examples, self.papers = examples, papers

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]

    @property
    def aligned_share(self) -> float:
        return sum(e.align is not None for e in self.examples) / len(self.examples)


INGEST_DIR = STAGE_DIRS[0]  # the ingest stage's folder in a run-all folder
_warned_unexcluded: set[tuple[str, str]] = set()  # (examples folder, warning): each said once a process


def find_ingest_report(examples_dir: str | Path) -> tuple[Path, dict] | None:
    """(folder, report) of the ingest stage the examples folder `examples_dir` was built from, or None when no
    report says: each stage's `report.json` names its input folder (`input`), followed back from `examples_dir`
    (an `examples` or `align` output) to the `ingest` report; an input path that is not a folder from here (a run
    built from another working folder, or moved) is looked for beside the folder naming it. Failing that, run-all's
    layout: `INGEST_DIR` beside `examples_dir`."""
    folder, seen = Path(examples_dir), set()
    while folder not in seen:  # a chain of reports that loops ends here
        seen.add(folder)
        report = stage_report(folder)
        if report is None:
            break
        if report.get("stage") == "ingest":
            return folder, report
        source = report.get("input")
        if not isinstance(source, str) or not source:
            break
        found = next((c for c in (Path(source), folder.parent / Path(source).name) if c.is_dir()), None)
        if found is None:
            break
        folder = found
    beside = Path(examples_dir).parent / INGEST_DIR
    report = stage_report(beside)
    return (beside, report) if report is not None and report.get("stage") == "ingest" else None


def _rebuild_command(ingest: tuple[Path, dict] | None) -> str:
    """The command that builds the examples again with the benchmark papers taken out, from the ingest report's
    input (records: input A, `run-all`; full text and abstracts: input B, `cocite-from-s2orc` and the stages after)."""
    source = ingest[1].get("input") if ingest else None
    if isinstance(source, list) and len(source) == 2 and all(isinstance(x, str) for x in source):
        return (f"aspire data cocite-from-s2orc --fulltext {source[0]} --abstracts {source[1]} --out NEW/1_ingest, "
                "then filter, group, split and examples")
    records = source if isinstance(source, str) and source else "RECORDS"
    return f"aspire data run-all --in {records} --out NEW"


def check_benchmark_papers_excluded(examples_dir: str | Path) -> str | None:
    """Warn (once a process for a folder) when the examples of `examples_dir` may hold CSFCube or reviewer-set papers:
    the ingest report behind them (`find_ingest_report`) shows `ingest.exclude_benchmark_papers` off, on without
    the benchmark papers (`removed_benchmark_by: null`), or an ingest run from before that rule (no
    `removed_benchmark_by`), or no ingest report is found. The warning names the folder and the command that
    rebuilds it; the examples are still read (old folders still train). Returns the warning, or None."""
    root = Path(examples_dir)
    ingest = find_ingest_report(root)
    papers = "CSFCube and reviewer-set papers"
    if ingest is None:
        said = (f"no ingest report ({INGEST_DIR}/{REPORT} beside it, or one its stage reports lead to) says whether "
                f"{papers} were taken out of its co-citations")
    else:
        folder, report = ingest
        config = report.get("config") if isinstance(report.get("config"), dict) else {}
        if config.get("exclude_benchmark_papers") is False:
            why = "ingest.exclude_benchmark_papers=false"
        elif isinstance(report.get("removed_benchmark_by"), dict):
            return None
        elif "removed_benchmark_by" in report:
            why = "the switch was on, but no benchmark papers were given: removed_benchmark_by is null"
        else:
            why = "built before that rule: its report has no removed_benchmark_by"
        said = f"{papers} were not taken out of its co-citations (ingest report {folder / REPORT}: {why})"
    aligned = (stage_report(root) or {}).get("stage") == "align"
    message = (f"data.examples_dir {root}: {said}, so its training pairs may hold them; rebuild it with "
               f"`{_rebuild_command(ingest)}` (ingest.exclude_benchmark_papers=true, the default)"
               + (", then `aspire data align`" if aligned else ""))
    key = (str(root.resolve()), message)
    if key not in _warned_unexcluded:
        _warned_unexcluded.add(key)
        log.warning("%s", message)
    return message


def load_split(cfg: DataConfig, split: str) -> TripletDataset:
    """`examples.{split}.jsonl` of `cfg.examples_dir` with its abstracts (cut to `cfg.max_sentences`).
    A missing examples folder is an OSError saying how to build it (`examples_folder`). A split without examples is
    refused with a ValueError naming it, and so is an examples folder (or the hard negatives' folder) that a stage
    left unfinished (its stage-started marker and no report). Examples built without taking CSFCube's and the
    reviewer set's papers out (or with no ingest report saying) are read, with a warning
    (`check_benchmark_papers_excluded`). Where `cfg.use_dev` takes a dev loss, a paper that only the dev split names
    is never the hard (or listed) negative of a train anchor: the next of its list is taken (a hard-negatives file
    mines every paper of the folder; 14 of the 585 train anchors of the real ACL examples had such a first random
    negative, and trained on the dev loss's papers)."""
    root = examples_folder(cfg.examples_dir)  # a missing one: how to build it
    for setting, folder in (("data.examples_dir", root),
                            ("data.hard_negatives", Path(cfg.hard_negatives).parent if cfg.hard_negatives else None)):
        if folder is not None:  # a stage killed half-way: its files are partial (`aspire.data.cocite.stages`)
            check_finished(folder, setting)
    check_benchmark_papers_excluded(root)
    full = read_paper_map(root / "abstracts.jsonl", split_strings=False)
    hard = _read_hard_negatives(cfg.hard_negatives) if cfg.hard_negatives else None
    held_out: frozenset[str] = frozenset()  # the dev loss's own papers: no negative of a train anchor
    if split == "train" and cfg.use_dev and (hard or cfg.example_negatives) and (root / "examples.dev.jsonl").is_file():
        held_out = frozenset(split_paper_ids(cfg, "dev") - split_paper_ids(cfg, "train"))
    examples = read_examples(root / f"examples.{split}.jsonl", cfg, full, hard, held_out)
    _report_lost_alignments(examples, full, cfg, split)
    papers = {
        pid: Paper(p.paper_id, p.title, p.sentences[: cfg.max_sentences] if cfg.max_sentences else p.sentences)
        for pid, p in full.items()
    }
    if not examples:  # an empty dev split would give a dev loss of 0.0 and mark any weights as best
        hint = "; add some, or set data.use_dev=false to train without dev loss" if split == "dev" else ""
        raise ValueError(f"the {split} split {root / f'examples.{split}.jsonl'} holds no examples{hint}")
    if hard is not None:
        anchored = sum(e.query_id in hard for e in examples)
        if split == "train" and not anchored:  # trained on with no hard negative at all, silently
            raise ValueError(f"data.hard_negatives {cfg.hard_negatives}: none of its {len(hard)} papers is an anchor "
                             f"of the train split of {root} (a file mined from another examples folder?)")
        log.info("hard negatives: %d of the %d %s examples have an anchor in %s", anchored, len(examples), split,
                 cfg.hard_negatives)
    return TripletDataset(examples, papers)


def load_dev_split(cfg: DataConfig) -> TripletDataset | None:
    """The dev split when `cfg.use_dev` (refused when empty, see `load_split`), else None."""
    return load_split(cfg, "dev") if cfg.use_dev else None


class TripletCollator:
    """Examples -> `TripletBatch`: one tokenised input of the B anchors, B positives and hard negatives.

    Integer ids (for the in-batch negative mask) number the papers and every id the examples name
    as a member or source, in sorted order.

    Args:
        tokenize: the model's `tokenize(papers, tasks=...)` (`DocumentModel.tokenize`).
        papers: every paper the examples name.
        weights: the loss weight of each task (default: one task, weight 1): each finite and >= 0, not all 0
            (ValueError).
        sources: further ids the examples name as members or sources (papers not in `papers`).
        task_names: the name of each task (default: one task, `cocite`); `tokenize` gets each paper's
            task name (for its control code) and the batch is named after its task when it has one.
        teacher: unit-length teacher vectors by paper id (a `distill` task's); with any, each batch
            carries the teacher's anchor-to-candidate similarities for the rows of that task (NaN in the rows
            of other tasks, whose pairs keep their own targets even where both papers have a teacher vector,
            and where a paper has none). Refused (ValueError) when no task is `distill`.
        sentence_teacher: by paper id, the position and text of one abstract sentence and the teacher's
            vector of it encoded alone; each batch then carries, for a `distill` anchor whose selected
            sentence (`Example.align[0]`) is that very sentence, the teacher's similarity of it to each
            candidate's whole vector (`TripletBatch.facet_teacher`; NaN elsewhere).
    """

    def __init__(self, tokenize: Callable[..., object], papers: dict[str, Paper],
                 weights: Sequence[float] = (1.0,), sources: Iterable[str] = (),
                 task_names: Sequence[str] = (DEFAULT_TASK,), teacher: dict[str, np.ndarray] | None = None,
                 sentence_teacher: dict[str, tuple[int, str, np.ndarray]] | None = None) -> None:
        if len(task_names) != len(weights):
            raise ValueError(f"{len(task_names)} task names for {len(weights)} task weights")
        named = dict(zip(task_names, map(float, weights)))
        if not all(math.isfinite(w) and w >= 0 for w in named.values()):
            raise ValueError(f"tasks[].weight: each task's loss weight must be a finite number >= 0, got {named}")
        if not sum(named.values()) > 0:  # the loss would be 0 at every step: a run that trains nothing
            raise ValueError(f"tasks[].weight: every task's loss weight is 0 ({named}), so nothing would train; "
                             "give a task a weight > 0")
        self.tokenize = tokenize
        self.task_names = list(task_names)
        self.papers = papers
        self.index = {pid: i for i, pid in enumerate(sorted(set(papers) | set(sources)))}
        self.weights = torch.tensor(list(weights), dtype=torch.float32)
        self.teacher = teacher or {}
        self.teacher_dim = len(next(iter(self.teacher.values()))) if self.teacher else 0
        self.sentence_teacher = sentence_teacher or {}
        if self.sentence_teacher and not self.teacher:
            raise ValueError("sentence teacher vectors without the teacher's whole vectors of the candidates")
        if self.teacher and TEACHER_TASK not in self.task_names:  # no row would take the teacher's targets
            raise ValueError(f"teacher vectors but no {TEACHER_TASK!r} task among the tasks {self.task_names}")

    def __call__(self, examples: Sequence[Example]) -> TripletBatch:
        hard = [e for e in examples if e.negative is not None]
        ids = [e.query_id for e in examples] + [e.positive_id for e in examples] + [e.negative for e in hard]
        if max(e.task for e in examples) >= len(self.weights):
            raise ValueError(f"an example of task {max(e.task for e in examples)} but weights for {len(self.weights)} task(s)")
        names = [self.task_names[e.task] for e in (*examples, *examples, *hard)]  # each paper's task
        inputs = self.tokenize([self.papers[i] for i in ids], tasks=names)
        hard = [e.negative for e in hard]
        G = max(len(e.members) for e in examples)
        group = torch.full((len(examples), G), -1, dtype=torch.long)
        for b, e in enumerate(examples):
            group[b, : len(e.members)] = torch.tensor([self.index[m] for m in e.members])
        pos = torch.tensor([self.index[e.positive_source] for e in examples])
        align = torch.tensor([e.align if e.align is not None else (-1, -1) for e in examples], dtype=torch.long)
        hard_rows = torch.full((len(examples),), -1, dtype=torch.long)
        has = torch.tensor([e.negative is not None for e in examples])
        hard_rows[has] = torch.arange(int(has.sum()))
        hard_ids = torch.tensor([self.index[h] for h in hard], dtype=torch.long)
        task = torch.tensor([e.task for e in examples], dtype=torch.long)
        one = names[0] if len(set(names)) == 1 else None  # a batch of several tasks has no one adapter
        return TripletBatch(inputs, group, pos, align, hard_rows, one, hard_ids=hard_ids, task_ids=task,
                            weights=self.weights, teacher=self._teacher_sim(examples, hard),
                            facet_teacher=self._facet_teacher_sim(examples, hard))

    def _teacher_sim(self, examples: Sequence[Example], hard: list[str]) -> Tensor | None:
        """(B, B + H) teacher similarity of each anchor to each positive and hard negative; NaN in the rows of
        tasks other than `TEACHER_TASK` and where either paper has no teacher vector; None without a teacher."""
        if not self.teacher:
            return None
        anchors = self._whole_rows([e.query_id if self._distilled(e) else None for e in examples])
        return anchors @ self._whole_rows([e.positive_id for e in examples] + hard).T

    def _distilled(self, e: Example) -> bool:
        """Whether the teacher's similarities are `e`'s targets: it is a pair of the `distill` task."""
        return self.task_names[e.task] == TEACHER_TASK

    def _whole_rows(self, ids: list[str | None]) -> Tensor:
        """(N, D) teacher whole vectors of `ids`; NaN rows where it has none (and for None)."""
        missing = np.full(self.teacher_dim, np.nan, dtype=np.float32)
        return torch.from_numpy(np.stack([self.teacher.get(i, missing) for i in ids]))

    def _facet_teacher_sim(self, examples: Sequence[Example], hard: list[str]) -> Tensor | None:
        """(B, B + H) teacher similarity of each anchor's selected sentence, encoded alone, to each candidate's
        whole vector; NaN in the rows of tasks other than `TEACHER_TASK`, where the teacher did not encode that
        sentence (another sentence of the paper, or another text at its position) or has no vector of the
        candidate; None without a sentence teacher."""
        if not self.sentence_teacher:
            return None
        missing = np.full(self.teacher_dim, np.nan, dtype=np.float32)
        rows = []
        for e in examples:
            known = self.sentence_teacher.get(e.query_id) if self._distilled(e) else None
            sentences = self.papers[e.query_id].sentences
            same = (known is not None and e.align is not None and e.align[0] == known[0]
                    and known[0] < len(sentences) and sentences[known[0]] == known[1])
            rows.append(known[2] if same else missing)
        return torch.from_numpy(np.stack(rows)) @ self._whole_rows([e.positive_id for e in examples] + hard).T


class EpochBatchSampler(Sampler[list[int]]):
    """Micro-batches of one epoch: a seeded permutation, cut into global batches, sharded over ranks.

    Global batch k holds `perm[k * B * W : (k + 1) * B * W]` (B = batch size, W = world size); rank r
    takes the r-th contiguous slice of B. The tail that does not fill a global batch is dropped, so
    every rank sees the same number of equal-sized micro-batches; `dropped` counts the examples of the epoch
    that no rank sees (that tail, and the global batches past `limit`). `limit`, when given, keeps only the
    epoch's first `limit` global batches. Iteration starts at micro-batch `start`, which is how a resumed run
    continues mid-epoch. ValueError unless `n` is an integer >= 0, `limit` None or an integer >= 1,
    0 <= `rank` < `world_size` and 0 <= `start` < the epoch's micro-batches (past them, the epoch would yield
    nothing, and a trainer resumed from a checkpoint of a larger examples file would wait for its end forever).
    """

    def __init__(self, n: int, batch_size: int, seed: int, epoch: int, start: int = 0,
                 rank: int = 0, world_size: int = 1, limit: int | None = None) -> None:
        self.n, self.batch_size, self.seed, self.epoch = n, batch_size, seed, epoch
        self.start, self.rank, self.world_size = start, rank, world_size
        check_sizes("EpochBatchSampler", batch_size, world_size)  # before the division below
        if not is_whole(n, 0):
            raise ValueError(f"EpochBatchSampler: n (the number of examples) must be an integer >= 0, got {n!r}")
        if limit is not None and not is_whole(limit, 1):  # 0 read as "no examples fill a batch", < 0 as a bad start
            raise ValueError(f"EpochBatchSampler: limit (global batches per epoch) must be None or an integer >= 1, "
                             f"got {limit!r}")
        self.num_batches = n // (batch_size * world_size)
        if limit is not None:
            self.num_batches = min(self.num_batches, limit)
        self.dropped = n - self.num_batches * batch_size * world_size  # examples no rank sees this epoch
        if self.num_batches == 0:
            raise ValueError(f"{n} examples do not fill one batch of {batch_size} x {world_size} rank(s)")
        check_position(start, self.num_batches, rank, world_size,
                       f"{n} examples in batches of {batch_size} x {world_size} rank(s)")

    @staticmethod
    def permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**64)  # torch takes seeds below 2**64
        return torch.randperm(n, generator=gen)

    def __len__(self) -> int:
        return self.num_batches - self.start

    def __iter__(self) -> Iterator[list[int]]:
        perm = self.permutation(self.n, self.seed, self.epoch)
        B, W = self.batch_size, self.world_size
        for k in range(self.start, self.num_batches):
            lo = k * B * W + self.rank * B
            yield perm[lo : lo + B].tolist()
