"""Reviewer matching: the gold-standard expertise set of Stelmakh et al. (2023), OpenReview format.

A folder holds `evaluations.csv` (tab-separated: `ParticipantID`, `Paper1..Paper10`,
`Expertise1..Expertise10`, or more pairs) and draws `d_20_1 … d_20_10`, each with `submissions.json`
(`{paper_id: {"id", "content": {"title", "abstract"}}}`) and `archives/~REVIEWER.jsonl` (the
reviewer's own papers, one record a line). A prediction is `{reviewer: {paper: similarity}}`.

The loss of one draw (lower is better): for every reviewer of the prediction and every pair of the
papers they rated (both in the draw's submissions), the pair costs |e1 - e2| when the predicted
similarities order it against the ratings, half of that on a tie, nothing otherwise; the sum over
reviewers divided by the sum of |e1 - e2| over the same pairs. The reported figure is the mean over
draws (`reviewer_units`: one unit a reviewer, so `aspire.benchmarks.stats` bootstraps over reviewers).

A rated paper absent from a draw's submissions leaves its pairs out, counted in `skipped_pairs` and named in
`skipped_papers`, and so does a submission with neither title nor abstract that has no prediction (a model cannot
encode it, `aspire.evaluate.reviewer_run`); any other rated submission without a prediction, or with a prediction that
is not a finite number, is an error naming the draw, reviewer and paper. A prediction for a reviewer of no
rating, or for a paper outside the draw's submissions, scores nothing and is counted (`unrated_reviewers`,
`unknown_papers`).
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Mapping

import numpy as np

from aspire.benchmarks.stats import UnitScores, finite_number
from aspire.io import RepeatedKey, loads_unique, read_json

_DRAW = re.compile(r"^d_(\d+)_(\d+)$")
_RATING_COLUMN = re.compile(r"(Paper|Expertise)([1-9][0-9]*)\Z")  # ASCII digits: \d and int() also read "١"


@dataclass
class Draw:
    """One draw: submission and archive records as (title, abstract) text, keyed by paper id."""

    name: str
    submissions: dict[str, tuple[str, str]]
    archives: dict[str, list[tuple[str, str, str]]]  # reviewer -> [(paper_id, title, abstract)]


_TOPK = re.compile(r"topk:([0-9]+)\Z")


def parse_aggregate(spec: str) -> tuple[str, int]:
    """How a reviewer's similarities to their archive papers become one score: `max` | `mean` | `topk:K` (K >= 1)
    -> (kind, K). Here, beside the benchmark and free of torch, so a command checks it before any model loads."""
    if spec in ("max", "mean"):
        return spec, 0
    m = _TOPK.match(spec)
    if m and int(m.group(1)) >= 1:
        return "topk", int(m.group(1))
    raise ValueError(f"unknown aggregate {spec!r}; valid: max, mean, topk:K (K >= 1)")


@dataclass
class ReviewerSet:
    """Ratings `{reviewer: [(paper, expertise), ...]}` in file order, and the draws."""

    root: Path
    ratings: dict[str, list[tuple[str, float]]]
    draws: list[Draw] = field(default_factory=list)


def load_ratings(path: str | Path) -> dict[str, list[tuple[str, float]]]:
    """`evaluations.csv` -> `{reviewer: [(paper, expertise), ...]}` (empty pairs of cells skipped).

    Every `PaperN` / `ExpertiseN` column pair of the header is read (the gold set has N = 1..10; a file with
    more is read whole, never cut at 10). Expertise is a number in 1-5 (half points occur). Raises ValueError
    naming the line and reviewer when a paper has no expertise or it is out of range, when an expertise has no
    paper, when a reviewer rates one paper twice (in one row or two) or a row rates no paper (every `PaperN` cell
    empty: the reviewer would count in no figure), and naming the line when a row has a
    non-empty cell beyond the header's columns (no column names it: it would be dropped), when the header names
    a column twice (one of the two would be dropped), and when it names a column other than `ParticipantID`,
    `PaperN` and `ExpertiseN` (N = 1, 2, ... without a leading 0: `Paper01` or `paper1` would be dropped unread).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"reviewer ratings file not found: {path}")
    ratings: dict[str, list[tuple[str, float]]] = {}
    with open(path, newline="", encoding="utf-8-sig") as fh:  # a byte-order mark is no part of the header
        reader = csv.DictReader(fh, delimiter="\t")
        header = reader.fieldnames or []
        lacking = [name for name in ("ParticipantID", "Paper1", "Expertise1") if name not in header]
        if lacking:  # every row would otherwise fail as "no ParticipantID", or every pair be skipped
            raise ValueError(f"{path}:1: the header lacks column(s) {lacking} (a tab-separated file with "
                             f"ParticipantID, Paper1..10 and Expertise1..10); it reads {header[:4]}")
        twice = sorted({name for name in header if header.count(name) > 1})
        if twice:  # DictReader keeps the last of two like-named columns: the other's cells were dropped unseen
            raise ValueError(f"{path}:1: the header names column(s) {twice} twice")
        unread = [name for name in header if name != "ParticipantID" and not _RATING_COLUMN.match(name)]
        if unread:  # the format has no other column: `Paper01` or `Paper1 ` holds ratings that no pair would read
            raise ValueError(f"{path}:1: the header names column(s) {unread} that are not ParticipantID, PaperN or "
                             "ExpertiseN (N = 1, 2, ... without a leading 0); their cells would be dropped unread")
        pairs = sorted({int(m.group(2)) for name in header if (m := _RATING_COLUMN.match(name))})
        for row in reader:
            line = reader.line_num  # the row's last physical line: a blank line (skipped) or a quoted newline shifts it
            reviewer = (row.get("ParticipantID") or "").strip()
            if not reviewer:
                raise ValueError(f"{path}:{line}: no ParticipantID")
            extra = [cell for cell in row.get(None) or () if cell.strip()]  # DictReader's restkey: cells past the header
            if extra:
                raise ValueError(f"{path}:{line}: reviewer {reviewer}: the row has cells beyond the header's "
                                 f"{len(header)} columns, which no column names: {extra[:3]}")
            rated = []
            for i in pairs:
                paper = (row.get(f"Paper{i}") or "").strip()
                value = (row.get(f"Expertise{i}") or "").strip()
                if not paper:
                    if value:
                        raise ValueError(f"{path}:{line}: reviewer {reviewer}: Expertise{i} is {value!r} but "
                                         f"Paper{i} is empty")
                    continue
                try:
                    expertise = float(value)
                except ValueError:
                    expertise = float("nan")
                if not 1.0 <= expertise <= 5.0:
                    raise ValueError(f"{path}:{line}: reviewer {reviewer} paper {paper}: expertise {value!r} is not in 1-5")
                if any(paper == p for p, _ in (*ratings.get(reviewer, ()), *rated)):
                    raise ValueError(f"{path}:{line}: reviewer {reviewer} rates paper {paper} twice")
                rated.append((paper, expertise))
            if not rated:  # the reviewer would count in no figure, listed as 'not predicted' in every draw
                raise ValueError(f"{path}:{line}: reviewer {reviewer} rates no paper (every Paper cell is empty)")
            ratings.setdefault(reviewer, []).extend(rated)
    if not ratings:
        raise ValueError(f"{path}: no ratings")
    return ratings


def _text(record: dict, where: str) -> tuple[str, str, str]:
    if not isinstance(record, dict) or not isinstance(record.get("content"), dict):
        raise ValueError(f"{where}: a record needs an object field 'content'")
    pid = record.get("id")
    if not isinstance(pid, str) or not pid.strip():
        raise ValueError(f"{where}: a record needs a string 'id'")
    content = record["content"]
    # only a missing field or null reads as empty text: `or ""` also turned 0, false, [] and {} into "" unseen
    title, abstract = (content.get(k) if content.get(k) is not None else "" for k in ("title", "abstract"))
    if not isinstance(title, str) or not isinstance(abstract, str):
        raise ValueError(f"{where}: paper {pid}: title and abstract must be strings")
    return pid, title.strip(), abstract.strip()


def load_draw(folder: Path, reviewers) -> Draw:
    """One draw's submissions and the archives of `reviewers` (a missing or empty archive, an archive naming one paper
    id on two lines, or a submission whose key is not its record's id, is an error)."""
    subs_path = folder / "submissions.json"
    raw = read_json(subs_path, f"draw {folder.name}: submissions file")
    if not isinstance(raw, dict):
        raise ValueError(f"{subs_path}: expected {{paper_id: record}}")
    submissions = {}
    for key, record in raw.items():
        pid, title, abstract = _text(record, f"{subs_path} [{key!r}]")
        if pid != key:  # ratings and predictions name the paper by one of the two: never guess which
            raise ValueError(f"{subs_path} [{key!r}]: the record's id is {pid!r}; a submission's key and id must agree")
        submissions[key] = (title, abstract)
    archives = {}
    for reviewer in reviewers:
        path = folder / "archives" / f"~{reviewer}.jsonl"
        if not path.is_file():
            raise ValueError(f"draw {folder.name}: reviewer {reviewer} has no archive ({path} not found)")
        papers, seen = [], {}
        # lines end at "\n" only: str.splitlines also cuts at U+2028, U+0085 ..., which JSON strings hold unescaped
        for line, text in enumerate(path.read_text(encoding="utf-8-sig").split("\n"), start=1):
            if text.strip():
                try:
                    record = loads_unique(text)
                except RepeatedKey as err:  # json.loads kept the last value: a paper's text could be swapped unseen
                    raise ValueError(f"{path}:{line}: the key {err.key!r} twice in one record") from None
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{line}: not JSON ({err})") from None
                paper = _text(record, f"{path}:{line}")
                if paper[0] in seen:  # it would weigh twice in a mean or top-k aggregate of the reviewer's papers
                    raise ValueError(f"{path}:{line}: paper {paper[0]} is in the archive twice (first on line "
                                     f"{seen[paper[0]]})")
                seen[paper[0]] = line
                papers.append(paper)
        if not papers:
            raise ValueError(f"draw {folder.name}: reviewer {reviewer}'s archive {path} is empty")
        archives[reviewer] = papers
    return Draw(folder.name, submissions, archives)


def draw_dirs(root: Path) -> list[Path]:
    """The draw folders `d_A_B` of `root`, ordered by their numbers. Two folders naming one draw (`d_20_1` and
    `d_20_01`) are a ValueError naming both: they would sort as equal, in the order the filesystem lists them."""
    found: dict[tuple[int, ...], Path] = {}
    for p in root.iterdir():
        if p.is_dir() and (m := _DRAW.match(p.name)):
            number = tuple(int(x) for x in m.groups())
            if number in found:
                first, second = sorted((found[number].name, p.name))
                raise ValueError(f"{root}: the folders {first} and {second} name one draw (d_{number[0]}_{number[1]})")
            found[number] = p
    return [found[number] for number in sorted(found)]


def load_reviewer_set(root: str | Path, draws: int | None = None) -> ReviewerSet:
    """Ratings and draws (the first `draws` of them, default all). Raises ValueError on a missing
    folder, ratings file or draw, on two folders naming one draw (`draw_dirs`), and on a rated reviewer without an
    archive in a draw."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"reviewer-matching folder not found: {root}")
    ratings = load_ratings(root / "evaluations.csv")
    folders = draw_dirs(root)
    if not folders:
        raise ValueError(f"{root}: no draw folders (d_20_1 ...)")
    if draws is not None:
        if not 1 <= draws <= len(folders):
            raise ValueError(f"draws must be in 1..{len(folders)}, got {draws}")
        folders = folders[:draws]
    return ReviewerSet(root, ratings, [load_draw(f, ratings) for f in folders])


def reviewer_loss(rated: list[tuple[str, float]], predicted: Mapping[str, float] | None, submissions,
                  reviewer: str = "?", blank=()) -> tuple[float, float, int]:
    """One reviewer's (loss, max loss, skipped pairs) for one draw.

    `rated` in file order; pairs with a paper outside `submissions`, or with a paper of `blank` (submissions
    without text) that has no prediction, are skipped and counted. `predicted` None (the reviewer is not in the
    prediction) scores nothing and skips nothing.
    """
    if predicted is None:
        return 0.0, 0.0, 0
    loss = top = 0.0
    skipped = 0
    for (p1, e1), (p2, e2) in combinations(rated, 2):
        if any(p not in submissions or (p in blank and p not in predicted) for p in (p1, p2)):
            skipped += 1
            continue
        for p in (p1, p2):
            if p not in predicted:
                raise ValueError(f"reviewer {reviewer}: no prediction for rated submission {p}")
            if not math.isfinite(predicted[p]):  # NaN orders no pair against the ratings: it would score as right
                raise ValueError(f"reviewer {reviewer}: the prediction for rated submission {p} is {predicted[p]}, "
                                 "not a finite number")
        truth = e1 - e2
        diff = float(predicted[p1]) - float(predicted[p2])
        top += abs(truth)
        # signs, not the product: diff * truth underflows to 0 for subnormal differences (5e-324 * 0.5), a tie
        if diff == 0 or truth == 0:
            loss += abs(truth) / 2
        elif (diff < 0) != (truth < 0):
            loss += abs(truth)
    return loss, top, skipped


def reviewer_units(rset: ReviewerSet, predictions: list[Mapping[str, Mapping[str, float]]]) -> tuple[UnitScores, dict]:
    """Per-draw, per-reviewer (loss, max loss) as `UnitScores` (groups = draws, units = reviewers),
    and counts: reviewers absent from each prediction (`reviewers_not_predicted`, one list a draw, and
    `draws`, the draws' names), pairs skipped (`reviewer_loss`; `blank`: the draw's submissions without text) and
    the rated papers they were skipped for (`skipped_papers`, by id),
    and what the predictions hold that no pair reads (`unscored`): reviewers of no rating (`unrated_reviewers`)
    and papers outside their draw's submissions (`unknown_papers`), by id.

    A prediction may leave rated reviewers out (the loss is over the prediction's reviewers, module
    docstring); one that names none of the rated reviewers in any draw is a ValueError naming ids of both,
    and a rated submission without a prediction (`reviewer_loss`) one naming the draw too.
    """
    if len(predictions) != len(rset.draws):
        raise ValueError(f"{len(predictions)} predictions for {len(rset.draws)} draws")
    units = sorted(rset.ratings)
    predicted = {r for pred in predictions for r in pred}
    if predictions and not predicted & set(units):
        raise ValueError(f"no predicted reviewer matches the gold set: predicted {some_ids(predicted)}; "
                         f"rated {some_ids(units)}")
    num = np.zeros((len(rset.draws), len(units)))
    den = np.zeros_like(num)
    absent, skipped, unknown, unread = [], 0, set(), set()
    for g, (draw, pred) in enumerate(zip(rset.draws, predictions)):
        absent.append(sorted(set(units) - set(pred)))
        unknown.update(p for scores in pred.values() for p in scores if p not in draw.submissions)
        blank = {pid for pid, text in draw.submissions.items() if not any(text)}
        for u, reviewer in enumerate(units):
            try:
                loss, top, skip = reviewer_loss(rset.ratings[reviewer], pred.get(reviewer), draw.submissions,
                                                reviewer, blank)
            except ValueError as err:  # the same reviewer and paper are in every draw: name the draw's file
                raise ValueError(f"draw {draw.name}: {err}") from None
            num[g, u], den[g, u] = loss, top
            skipped += skip
            if skip:  # the papers whose pairs were left out, by id (a model run has no prediction to name them by)
                unread.update(p for p, _ in rset.ratings[reviewer]
                              if p not in draw.submissions or (p in blank and p not in pred[reviewer]))
    return UnitScores(units, num, den), {"reviewers_not_predicted": absent, "draws": [d.name for d in rset.draws],
                                         "skipped_pairs": skipped, "skipped_papers": sorted(unread),
                                         "unrated_reviewers": sorted(predicted - set(units)),
                                         "unknown_papers": sorted(unknown)}


def some_ids(ids, k: int = 3) -> str:
    """A few of `ids` (sorted) for a message: `a, b, c (and 55 more)`, or `none`."""
    ids = sorted(ids)
    more = f" (and {len(ids) - k} more)" if len(ids) > k else ""
    return (", ".join(ids[:k]) + more) if ids else "none"


def left_out(counts: dict) -> str:
    """`1 rated reviewer left out of every draw (X); 2 reviewers left out of draw d_20_3 (A, B)`-style words for
    the rated reviewers missing from every draw's predictions (the figure is over the others: once unsaid, the
    line read `over 57 reviewers` beside the published figures' 58) and those missing from some draws only; ''
    when every rated reviewer is in every draw."""
    absent = counts.get("reviewers_not_predicted") or []
    names = counts.get("draws") or [f"draw {i + 1}" for i in range(len(absent))]
    everywhere = set.intersection(*map(set, absent)) if absent else set()
    partial = {name: sorted(set(a) - everywhere) for name, a in zip(names, absent) if set(a) - everywhere}
    words = []
    if everywhere:
        words.append(f"{len(everywhere)} rated reviewer{'s' if len(everywhere) > 1 else ''} left out of every "
                     f"draw ({some_ids(everywhere)})")
    if partial:
        reviewers = sorted({r for a in partial.values() for r in a})
        words.append(f"{len(reviewers)} reviewer{'s' if len(reviewers) > 1 else ''} left out of "
                     f"{'draw' if len(partial) == 1 else 'draws'} "
                     + "; ".join(f"{d} ({some_ids(r)})" for d, r in partial.items()))
    return "; ".join(words)


def skipped(counts: dict) -> str:
    """`18 rated pairs skipped: 1 rated paper not in its draw's submissions or without text (X)`-style words for the
    pairs `reviewer_units` left out of the figure; '' when none was. They were counted in results.json alone: a
    draw's submissions lacking a rated paper left its pairs out of every model run's figure unsaid."""
    pairs, papers = counts.get("skipped_pairs") or 0, counts.get("skipped_papers") or []
    if not pairs:
        return ""
    return (f"{pairs} rated pair{'s' if pairs > 1 else ''} skipped: {len(papers)} rated paper"
            f"{'s' if len(papers) > 1 else ''} not in {'their' if len(papers) > 1 else 'its'} draw's submissions or "
            f"without text ({some_ids(papers)})")


def unscored(counts: dict) -> str:
    """`predictions for 1 unrated reviewer (X) and 2 papers outside their draw's submissions (a, b) not scored`-style
    words for what a prediction holds that no rated pair reads (`reviewer_units`); '' when it holds nothing else."""
    parts = [f"{len(ids)} {what}{'s' if len(ids) > 1 else ''}{where} ({some_ids(ids)})"
             for ids, what, where in ((counts.get("unrated_reviewers") or [], "unrated reviewer", ""),
                                      (counts.get("unknown_papers") or [], "paper", " outside their draw's submissions"))
             if ids]
    return f"predictions for {' and '.join(parts)} not scored" if parts else ""


def read_predictions(path: str | Path) -> dict[str, dict[str, float]]:
    """A `{reviewer: {paper: similarity}}` JSON file (reviewer ids with or without the one leading `~` of the
    archives' file names, `~REVIEWER.jsonl`, which is removed: `~~Name1` is `~Name1`, an OpenReview profile id; one
    reviewer under both spellings is a ValueError)."""
    path = Path(path)
    raw = read_json(path, "prediction file")
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected {{reviewer: {{paper: similarity}}}}")
    out = {}
    for reviewer, scores in raw.items():
        if not isinstance(scores, dict):
            raise ValueError(f"{path}: reviewer {reviewer}: expected {{paper: similarity}}")
        for paper, value in scores.items():
            if not finite_number(value):  # a bool, a string, or an integer past float's range (10**400) is none
                raise ValueError(f"{path}: reviewer {reviewer} paper {paper}: similarity {value!r:.40} is not a finite "
                                 "number")
        key = reviewer.removeprefix("~")  # lstrip("~") also took the `~` of an OpenReview id `~Name1` itself
        if key in out:
            raise ValueError(f"{path}: reviewer {key} is in the file twice (with and without a leading '~')")
        out[key] = {p: float(v) for p, v in scores.items()}
    return out


def prediction_files(folder: str | Path, exp: str, rset: ReviewerSet) -> list[Path]:
    """`{exp}_{draw}_ta.json` in `folder` for every draw of `rset` (the published files' naming)."""
    return [Path(folder) / f"{exp}_{draw.name}_ta.json" for draw in rset.draws]


def read_prediction_set(folder: str | Path, exp: str, rset: ReviewerSet) -> list[dict[str, dict[str, float]]]:
    """Every draw's predictions of experiment `exp` in `folder` (`prediction_files`, `read_predictions`).
    FileNotFoundError before any is read when a draw's file is missing, naming it and the experiments that
    the folder does hold (an experiment is named by its files' prefix: `specter` for `specter_d_20_1_ta.json`)."""
    folder, files = Path(folder), prediction_files(folder, exp, rset)
    missing = [p for p in files if not p.is_file()]
    if missing:
        if not folder.is_dir():
            raise FileNotFoundError(2, "no such prediction folder", str(folder))
        suffix = f"_{rset.draws[0].name}_ta.json"
        held = sorted(p.name[: -len(suffix)] for p in folder.glob(f"*{suffix}"))
        raise FileNotFoundError(2, f"experiment {exp!r} lacks {len(missing)} of its {len(files)} draw files "
                                   f"(first {missing[0].name}); this folder holds {held or 'no experiment'}",
                                str(folder))
    return [read_predictions(p) for p in files]


def summarize(scores: UnitScores, counts: dict, n_boot: int = 2000, seed: int = 0) -> dict:
    """The loss (mean over draws), a bootstrap 95% interval over reviewers, and the per-draw losses."""
    lo, hi = scores.bootstrap(n_boot, seed)
    return {
        "loss": scores.value(),
        "ci95": [lo, hi],
        "per_draw": scores.per_group(),
        "n_reviewers": int((scores.den.sum(axis=0) > 0).sum()),
        "n_draws": scores.num.shape[0],
        **counts,
    }
