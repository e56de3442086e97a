"""SciRepEval's non-ranking task formats on the ACL Anthology abstracts: the committed split they share.

Three benchmarks read one split file, `splits/scirepeval_formats.json` (paper ids and a SHA-256 checksum of
them, never text): `venue` (classification, `aspire.benchmarks.venue`), `year` (regression,
`aspire.benchmarks.year`) and `same-author` (proximity, `aspire.benchmarks.same_author`).

- `venue` / `year` share one set of papers, train / dev / test, drawn per venue class (seeded): up to
  `per_class` papers of each class in each split, so every class has train, dev and test papers.
- `same-author` has its own dev and test pools, built from papers in no other split (see `same_author`).
- Every paper of every split is outside the other benchmarks (CSFCube, the reviewer set, the papers cited by
  context2doc's test sentences) and outside the co-citation set the trained models read, by normalised
  title; the ACL ids so removed are listed in the file (`excluded`).
- The other way round, `heldout_ids` (every dev and test paper of the three formats) is what training tasks
  that read the ACL abstracts must leave out (`aspire.benchmarks.heldout.benchmark_titles`).

A user may give their own labels (`read_label_file`): one JSON object a line, `paper_id` and `label`; a
missing or empty label, an unknown paper or a class with no training paper is an error naming the record; so
are training labels of one class only (nothing to classify) and number labels all equal on train (nothing to
learn) or on test (Kendall's tau undefined).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from aspire.benchmarks.stats import check_level, finite_number
from aspire.checksum import file_sha256
from aspire.data.papers import jsonl_objects
from aspire.io import decoded_lines, read_json, type_name

SPLIT_FILE = Path(__file__).parent / "splits" / "scirepeval_formats.json"
ACL_FILE = "papers.jsonl.gz"
SPLITS = ("train", "dev", "test")


def read_records(path: str | Path, records: Iterable[tuple[int, dict]] | None = None) -> list[dict]:
    """The ACL records' metadata (`paper_id`, `title`, `year`, `venues`, `booktitle`, `authors`) without the
    abstract, for the records that have one (a record without an abstract is no paper of the formats). Such a
    record without a paper id (missing, null, not a string or empty) is a ValueError naming the file and its line:
    readers key the records by id, and no split names it. A paper id on two such records is a ValueError naming it
    and both lines: one of the two would be dropped unseen and the other scored (its venue, year and authors).
    `records`: the file's `jsonl_objects(path)`, already read by the caller (`aspire.evaluate.probes.acl_index`,
    which splits the papers' abstracts from them too): the file is not parsed again."""
    keep = ("paper_id", "title", "year", "venues", "booktitle", "authors")
    metadata, lines = [], {}
    for line, r in jsonl_objects(path) if records is None else records:
        if not r.get("abstract"):
            continue
        pid = r.get("paper_id")
        if not isinstance(pid, str) or not pid:  # once kept as id None (or a number), under no split's id
            raise ValueError(f"{path}:{line}: a record with an abstract but no paper id (paper_id is "
                             f"{type_name(pid)} {pid!r:.60}); every paper needs one")
        if pid in lines:
            raise ValueError(f"{path}:{line}: paper {pid} is on line {lines[pid]} too; a paper id names one record")
        lines[pid] = line
        metadata.append({k: r.get(k) for k in keep})
    return metadata


def checksum(body: Mapping) -> str:
    """SHA-256 of the split body's canonical JSON (ids only)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def load_split(split_file: str | Path = SPLIT_FILE) -> dict:
    """The committed split, checked against its checksum; no paper may be in two splits. A file that is not
    `{"splits": {task: {split: [paper id, ...]}}, "checksum": ...}` is a ValueError naming the file and key."""
    data = read_json(split_file, "SciRepEval-format split file")
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict) or not isinstance(data.get("checksum"), str):
        raise ValueError(f"{split_file}: a split file is a JSON object with 'splits' (an object) and 'checksum' "
                         "(a string)")
    for task, parts in data["splits"].items():
        if not isinstance(parts, dict):
            raise ValueError(f"{split_file}: splits.{task} is not an object of splits ({{split: [paper id]}})")
        for name, ids in parts.items():
            if not isinstance(ids, list) or not all(isinstance(p, str) and p for p in ids):
                raise ValueError(f"{split_file}: splits.{task}.{name} is not a list of paper ids (strings)")
    problem = "" if checksum(data["splits"]) == data["checksum"] else "checksum mismatch (the split was edited)"
    if problem:
        raise ValueError(f"{split_file}: {problem}")
    check_disjoint(data["splits"])
    return data


def check_source(path: str | Path, split_file: str | Path = SPLIT_FILE) -> dict:
    """The split (`load_split`, so a caller need not read it again) once the ACL file at `path` is checked:
    ValueError when it is not the file the split was made from (its `source_sha256`; a split file without one, such
    as a user's own, is not checked): another dump's venues, years or authors would score the same ids against other
    labels."""
    split = load_split(split_file)
    made_from = split.get("source_sha256")
    if made_from is not None and file_sha256(path) != made_from:
        raise ValueError(f"{path} differs from the file the split {split_file} was made from (source_sha256 "
                         "mismatch): is --data the ACL folder of ../shared/data? Otherwise rebuild the split with "
                         "experiments/build_scirepeval_splits.py")
    return split


def task_splits(split_file: str | Path, task: str, required: Sequence[str] = ()) -> dict[str, list[str]]:
    """`{split: [paper id]}` of one task of the split file (`venue_year`, `same_author`); ValueError naming the
    file when the task, or one of its `required` splits, is missing or a required split is empty."""
    parts = load_split(split_file)["splits"]
    if task not in parts:
        raise ValueError(f"{split_file}: no splits.{task}; the file has {sorted(parts)}")
    for name in required:
        if not parts[task].get(name):
            raise ValueError(f"{split_file}: splits.{task} has no {name!r} papers (needs {list(required)})")
    return {k: list(v) for k, v in parts[task].items()}


def split_records(records: Mapping[str, dict], ids: Iterable[str], where: str) -> list[dict]:
    """The ACL records of `ids`, in order; ValueError naming how many and one paper of the split (`where`) that
    the ACL file does not hold (with an abstract): such a paper would be dropped from the benchmark."""
    missing = [p for p in ids if p not in records]
    if missing:
        raise ValueError(f"{len(missing)} paper(s) of {where} are not in the ACL file (or have no abstract), "
                         f"e.g. {missing[0]}: is --data the ACL folder the split was made from?")
    return [records[p] for p in ids]


def split_sets(body: Mapping) -> dict[str, list[str]]:
    """`{"venue_year/train": ids, ..., "same_author/test": ids}` from a split body."""
    return {f"{task}/{name}": list(ids) for task, parts in body.items() for name, ids in parts.items()}


def check_disjoint(body: Mapping) -> None:
    """ValueError naming a paper that is in two splits (or twice in one)."""
    seen: dict[str, str] = {}
    for where, ids in split_sets(body).items():
        for pid in ids:
            if pid in seen:
                raise ValueError(f"paper {pid} is in two splits: {seen[pid]} and {where}")
            seen[pid] = where


def heldout_ids(split_file: str | Path = SPLIT_FILE) -> frozenset[str]:
    """Every dev and test paper of the three formats: what training must not see."""
    sets = split_sets(load_split(split_file)["splits"])
    return frozenset(pid for where, ids in sets.items() if not where.endswith("/train") for pid in ids)


def read_label_file(path: str | Path, kind: str, known: Iterable[str] | None = None) -> dict[str, object]:
    """`{paper_id: label}` of a user's JSONL label file. `kind` "class" (a non-empty string) or "number"
    (a finite number); `known` (optional): the paper ids a label may name. A bad record (a line that is not UTF-8
    or not JSON included) is a ValueError naming its line and paper."""
    if kind not in ("class", "number"):
        raise ValueError(f"label kind must be 'class' or 'number', got {kind!r}")
    known = None if known is None else set(known)
    labels: dict[str, object] = {}
    for n, line in enumerate(decoded_lines(Path(path).read_bytes(), path), start=1):  # a bad byte named by its line
        where = f"{path}:{n}"
        if not line.strip():
            continue
        try:  # a number of over 4300 digits is a ValueError, deep nesting a RecursionError, neither naming the line
            rec = json.loads(line)
        except (ValueError, RecursionError) as err:
            raise ValueError(f"{where}: not JSON ({getattr(err, 'msg', err)})") from None
        pid = rec.get("paper_id") if isinstance(rec, dict) else None
        if not isinstance(pid, str) or not pid:
            raise ValueError(f"{where}: no 'paper_id'")
        if "label" not in rec or rec["label"] is None:
            raise ValueError(f"{where} (paper {pid}): missing label")
        label = rec["label"]
        if kind == "class" and not isinstance(label, str):  # once "empty class 3"
            raise ValueError(f"{where} (paper {pid}): class {label!r} is not a string")
        if kind == "class" and not label.strip():
            raise ValueError(f"{where} (paper {pid}): empty class {label!r}")
        if kind == "number" and not finite_number(label):  # an int past float's range (10**400) is none either
            raise ValueError(f"{where} (paper {pid}): label {label!r:.60} is not a finite number")
        if known is not None and pid not in known:
            raise ValueError(f"{where}: paper {pid} is in no split of this task")
        if pid in labels:
            raise ValueError(f"{where}: paper {pid} is labelled twice")
        labels[pid] = label.strip() if kind == "class" else float(label)
    return labels


def venue_year_labels(records: Mapping[str, dict], split_file: str | Path, label_file: str | Path | None, name: str,
                      kind: str, label_of: Callable[[dict], object | None]) -> tuple[dict[str, list[str]], dict[str, object]]:
    """({split: [paper id]}, {paper id: label}) of task `name` (venue, year) on the committed venue_year split (train,
    dev and test needed):
    the labels from a user's `label_file` of `kind` (`read_label_file`), or `label_of(record)` of each split
    paper's ACL record (None: no label; ValueError naming a field of the wrong type), checked by `labels_for`."""
    splits = task_splits(split_file, "venue_year", SPLITS)
    ids = [p for part in splits.values() for p in part]
    if label_file is not None:
        labels = read_label_file(label_file, kind, ids)
    else:
        found = {rec["paper_id"]: label_of(rec) for rec in split_records(records, ids, f"the {name} split of {split_file}")}
        labels = {pid: label for pid, label in found.items() if label is not None}
    labels_for(splits, labels, kind)
    return splits, labels


def labels_for(splits: Mapping[str, Sequence[str]], labels: Mapping[str, object], kind: str) -> None:
    """ValueError naming a paper of `splits` without a label, or (classes) a class with no training paper."""
    for name, ids in splits.items():
        missing = [pid for pid in ids if pid not in labels]
        if missing:
            raise ValueError(f"{len(missing)} paper(s) of the {name} split have no label, e.g. {missing[0]}")
    if kind == "class":
        train = {labels[p] for p in splits["train"]}
        for name in ("dev", "test"):
            for pid in splits.get(name, ()):
                if labels[pid] not in train:
                    raise ValueError(f"paper {pid} ({name}) has class {labels[pid]!r}, which no training paper has")
        if len(train) < 2:
            raise ValueError(f"every training paper has the class {next(iter(train), None)!r}: a classifier needs "
                             "two or more classes")
    else:
        for name in ("train", "test"):
            values = {labels[p] for p in splits.get(name, ())}
            if len(values) == 1:
                raise ValueError(f"every paper of the {name} split has the label {values.pop()!r}: "
                                 + ("a regression learns nothing" if name == "train" else "Kendall's tau is undefined"))


def bootstrap_papers(metric, y: np.ndarray, pred: np.ndarray, n_boot: int = 2000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of `metric(y, pred)` over test papers (`y`, `pred`: (N,) arrays or lists,
    resampled with replacement).
    ValueError when `y` and `pred` differ in length or hold no paper, `n_boot` is below 1 or `level` is not in (0, 1)
    (as `aspire.benchmarks.stats.UnitScores.bootstrap` and `paired_papers_test` refuse them)."""
    if n_boot < 1:
        raise ValueError(f"a bootstrap interval needs at least one bootstrap sample, got n_boot={n_boot}")
    check_level(level)  # a percent (95) was numpy's quantile error, level 0 a silent one-point interval
    y, pred = np.asarray(y), np.asarray(pred)  # resampled by index arrays, which a list does not take
    n = _paired_length(y, pred)
    rng = np.random.default_rng(seed)
    stats = [metric(y[i], pred[i]) for i in (rng.integers(0, n, n) for _ in range(n_boot))]
    alpha = (1 - level) / 2
    return float(np.nanquantile(stats, alpha)), float(np.nanquantile(stats, 1 - alpha))


def paired_papers_test(metric, y: np.ndarray, pred_a: np.ndarray, pred_b: np.ndarray, n_perm: int = 2000,
                       n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """Paired test of `metric(y, pred_a) - metric(y, pred_b)` over test papers: randomisation (the two
    predictions of a paper swapped at random; the observed assignment counted in) and a paired bootstrap, whose
    resamples are those of `bootstrap_papers` with the same `seed` whatever `n_perm` (they once continued the
    permutations' draws: `venue --compare` (2,000) and `evaluate compare` (10,000) gave one pair two intervals).

    When the metric is undefined (NaN, e.g. Kendall's tau of constant predictions) for either run, the p-value
    is NaN: no evidence either way; a swap whose difference is undefined is not counted. `y`, `pred_a` and
    `pred_b` (N,) arrays or lists must be one length (ValueError), `n_perm` and `n_boot` at least 1, `level` in
    (0, 1)."""
    if n_perm < 1 or n_boot < 1:
        raise ValueError(f"a paired test needs at least one permutation and one bootstrap sample, got n_perm={n_perm}, "
                         f"n_boot={n_boot}")
    check_level(level)
    y, pred_a, pred_b = np.asarray(y), np.asarray(pred_a), np.asarray(pred_b)
    n = _paired_length(y, pred_a, pred_b)
    observed = metric(y, pred_a) - metric(y, pred_b)
    rng = np.random.default_rng(seed)
    hits = counted = 1
    for _ in range(n_perm):
        swap = rng.random(n) < 0.5
        delta = metric(y, np.where(swap, pred_b, pred_a)) - metric(y, np.where(swap, pred_a, pred_b))
        if not np.isnan(delta):
            counted += 1
            hits += abs(delta) >= abs(observed) - 1e-12
    p_value = float("nan") if np.isnan(observed) else hits / counted
    boot = np.random.default_rng(seed)  # the draws of `bootstrap_papers(seed)`, whatever `n_perm` (as stats.paired_test)
    deltas = [metric(y[i], pred_a[i]) - metric(y[i], pred_b[i]) for i in (boot.integers(0, n, n) for _ in range(n_boot))]
    alpha = (1 - level) / 2
    return {"a": metric(y, pred_a), "b": metric(y, pred_b), "delta": observed, "p_value": p_value,
            "ci95": [float(np.nanquantile(deltas, alpha)), float(np.nanquantile(deltas, 1 - alpha))], "n_units": n}


def _paired_length(y: np.ndarray, *preds: np.ndarray) -> int:
    """The number of papers of `y`; ValueError unless every prediction has one per paper and there is one."""
    n = len(y)
    if any(len(p) != n for p in preds):
        raise ValueError(f"labels and predictions must be one per test paper: {n} labels, "
                         f"{' and '.join(str(len(p)) for p in preds)} predictions")
    if n == 0:
        raise ValueError("no test paper to compute a statistic over")
    return n
