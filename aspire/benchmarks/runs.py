"""TREC run and qrels files, and ranking metrics on them through ranx.

Run file: one line a ranked document, `qid Q0 docid rank score tag`, ranks from 1, scores falling.
Qrels file: `qid 0 docid grade`, the grade a whole number >= 0 (0: judged not relevant; a negative grade, which
trec_eval's bpref reads as unjudged, is refused). Metric names (case-insensitive): `map`, `map@K` (MAP@20 is the KDD
Cup AQA metric), `mrr`, `mrr@K`, `bpref` (no cut-off), `p@K`, `r@K` / `recall@K`, `ndcg@K`; a `-lN` suffix
(N >= 1) counts grade >= N as relevant for the binary ones (ranx's convention; default 1), and for `ndcg@K-lN` gives
the grades below N no gain (in the ideal ranking too; the others keep their grade as gain). Scoring uses the
order of the run (ties in score keep the run's order; `read_run` orders a file by rank, then by falling score,
then by document id), unjudged documents count as not relevant, and a judged query the run does not rank is
an error, as is a ranked query that has no judgement and a query with no document at grade >= 1. A query with
documents at grade >= 1 but none at grade >= N scores 0 on the `-lN` metrics (trec_eval's `-lN`), and counts
in their mean: callers that score at a threshold leave such queries out first (`aspire.evaluate.fuse`).
"""

from __future__ import annotations

import math
import re
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from aspire.benchmarks.metrics import id_order, ranx_per_query
from aspire.config import is_whole
from aspire.io import decoded_lines

DEFAULT_METRICS = ("MRR", "nDCG@10", "MAP")  # what a TREC run is scored on when no metric is named
_METRIC = re.compile(r"^(map|mrr|bpref|p|r|recall|ndcg)(?:@(\d+))?(-l\d+)?$")
_RANX = {"p": "precision", "r": "recall", "recall": "recall", "map": "map", "mrr": "mrr", "bpref": "bpref",
         "ndcg": "ndcg"}


def invocation() -> str:
    """The command line of this process as a user would type it: `python -m MODULE ...` when a module ran by
    `python -m` (the module typed, read from `sys.orig_argv`: `python -m aspire.evaluate ...`, whose `__main__`
    hands over to `aspire.cli.evaluate` and so leaves `aspire/cli/evaluate.py` as `sys.argv[0]`), else for a `.py`
    file of this repository's package its dotted module (`aspire/cli/evaluate.py` -> `aspire.cli.evaluate`, a
    `__main__.py` its folder's) and for a package main elsewhere its folder's name (`python -m pytest`)."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(".py"):
        path = Path(argv[0]).resolve()
        package = Path(__file__).resolve().parents[1]
        if path.is_relative_to(package):  # aspire/cli/evaluate.py -> aspire.cli.evaluate, aspire/__main__.py -> aspire
            parts = path.relative_to(package.parent).with_suffix("").parts
            own = ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
        else:
            own = path.parent.name if path.name == "__main__.py" else None
        module = _typed_module(argv[1:]) or own
        if module:
            argv = ["python", "-m", module, *argv[1:]]
    return shlex.join(argv)


def _typed_module(args: list[str]) -> str | None:
    """MODULE of `python ... -m MODULE ARGS` in `sys.orig_argv` when ARGS are `args` (this process's arguments as
    `sys.argv` holds them now), else None."""
    orig = list(getattr(sys, "orig_argv", ()))
    for i, word in enumerate(orig[1:], start=1):
        if word == "-m" and i + 1 < len(orig) and orig[i + 2:] == args:
            return orig[i + 1]
        if word.startswith("-m") and len(word) > 2 and orig[i + 1:] == args:
            return word[2:]
    return None


def run_line(qid: str, doc: str, rank: int, score: float, tag: str) -> str:
    """One TREC run line, `qid Q0 docid rank score tag`, the score written in full (Python's shortest text that
    reads back as the same float): the one format of every run file aspire writes (evaluation and `aspire search
    --run-out` alike). Six significant digits tied close scores (0.12345671 and 0.12345674 both read 0.123457),
    which trec_eval then orders by document id and z / minmax fusion of the file reads as equal. A non-finite
    score, a rank below 1, an id or a tag that is not one column: ValueError, as `read_run` would refuse the
    line."""
    if not math.isfinite(score):
        raise ValueError(f"query {qid}: document {doc} has a non-finite score {score}")
    if not is_whole(rank, 1):
        raise ValueError(f"query {qid}: document {doc} has rank {rank!r}; ranks are whole numbers from 1")
    _check_column("query", qid)
    _check_column("document", doc)
    _check_tag(tag)
    return f"{qid} Q0 {doc} {rank} {float(score)!r} {tag}"


def _check_column(what: str, name: str | int) -> None:
    """ValueError unless `name` fits one column of a TREC file (a paper id with a space would shift the rest): a
    string, or an integer (written as its digits; read back as the string)."""
    if isinstance(name, bool) or not isinstance(name, (str, int, np.integer)):
        raise ValueError(f"{what} id {name!r} is a {type(name).__name__}; a TREC file's ids are strings (or "
                         "integers, written as their digits)")
    if isinstance(name, str) and (not name or any(c.isspace() for c in name)):
        raise ValueError(f"{what} id {name!r} is empty or holds whitespace, which one column of a TREC file cannot "
                         "hold: give the papers ids without whitespace")


def _check_written_once(what: str, ids) -> None:
    """ValueError naming the ids of `ids` that the file would write alike (1 and '1'): read back, two queries would
    be one, and two documents a document judged or ranked twice."""
    twice = sorted({i for i, n in Counter(str(i) for i in ids).items() if n > 1})
    if twice:
        raise ValueError(f"{what} ids {twice[:10]} are given twice, as a number and as text: a TREC file writes both "
                         "as the same text; give each once")


def _queries_to_write(table: Mapping, verb: str, kind: str):
    """(query, its documents) of a run or qrels `table` to write, each query's id checked (`_check_column`, and
    `_check_written_once` over them all) and each with a document: a TREC `kind` file has no line for a query
    without one (read back, the query would be gone)."""
    _check_written_once("query", table)
    for q, docs in table.items():
        _check_column("query", q)
        if not docs:
            raise ValueError(f"query {q} {verb} no document; a TREC {kind} file cannot hold a query without a line")
        yield q, docs


def _check_tag(tag: str) -> None:
    if not isinstance(tag, str) or not tag or any(c.isspace() for c in tag):
        raise ValueError(f"run tag must be one word, got {tag!r}")


def write_run(path: str | Path, run: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> None:
    """Write `{qid: [(docid, score), ...] best first}` as a TREC run file (atomically); a document ranked twice for a
    query is a ValueError naming the query and the document (`read_run` refuses such a file), and so is a query that
    ranks no document (a TREC run file has no line for it: `read_run` would give the run without that query)."""
    from aspire.io import write_text

    _check_tag(tag)
    lines = []
    for qid, ranked in _queries_to_write(run, "ranks", "run"):
        # as written: 1 and '1' are one id in the file
        twice = sorted({doc for doc, n in Counter(str(doc) for doc, _ in ranked).items() if n > 1})
        if twice:  # `read_run` refuses the file (trec_eval would count the document twice)
            raise ValueError(f"query {qid} ranks {twice[:10]} more than once; a run ranks a document once a query")
        lines += [run_line(qid, doc, rank, score, tag) for rank, (doc, score) in enumerate(ranked, start=1)]
    write_text(path, "\n".join(lines) + "\n")


def read_run(path: str | Path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run file -> `{qid: [(docid, score), ...]}` ordered by rank, then by falling score, then by document id
    (trec_eval reads the scores alone and orders tied ones by document id, decreasing: a file whose ranks disagree
    with its scores, or ties both, reads in another order there); a rank below 1 or a score that is not a finite
    number is an error naming the line, as `run_line` refuses to write one. The file is read as
    `aspire.io.decoded_lines` reads it: a UTF-8 byte-order mark at its start is no part of the first query id (it
    once made that line a query of its own, `\\ufeffq1`), and a byte that is not UTF-8 is an error naming the file
    and line (once a bare UnicodeDecodeError naming neither)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"run file not found: {path}")
    rows: dict[str, list[tuple[int, float, str]]] = {}
    seen = set()
    for line, text in enumerate(decoded_lines(path.read_bytes(), path), start=1):
        if not text.strip():
            continue
        parts = text.split()
        if len(parts) != 6:
            raise ValueError(f"{path}:{line}: expected 'qid Q0 docid rank score tag', got {text!r}")
        qid, _, doc, rank, score, _ = parts
        try:  # ASCII digits without '_': Python's int / float also read '1_0' as 10 and other scripts' digits
            if not (rank + score).isascii() or "_" in rank + score:
                raise ValueError
            rank_i, score_f = int(rank), float(score)
        except ValueError:
            raise ValueError(f"{path}:{line}: rank and score must be numbers, got {rank!r} {score!r}") from None
        if rank_i < 1 or not math.isfinite(score_f):
            raise ValueError(f"{path}:{line}: ranks count from 1 and scores are finite numbers, got rank {rank!r} "
                             f"score {score!r}")
        if (qid, doc) in seen:
            raise ValueError(f"{path}:{line}: query {qid} ranks {doc} twice")
        seen.add((qid, doc))
        rows.setdefault(qid, []).append((rank_i, -score_f, doc))
    return {q: [(doc, -neg) for _, neg, doc in sorted(r)] for q, r in rows.items()}


def write_qrels(path: str | Path, qrels: Mapping[str, Mapping[str, int]]) -> None:
    """Write `{qid: {docid: grade}}` as a TREC qrels file (atomically); a grade that is not a whole number >= 0 (0.5,
    NaN, a string, -1) is a ValueError naming the query and document, where `int` cut 0.5 to 0 unsaid (and
    `read_qrels` refuses a negative one); so is a query with no judged document (a TREC qrels file has no line for
    it: `read_qrels` would give the qrels without that query)."""
    from aspire.io import write_text

    lines = []
    for q, docs in _queries_to_write(qrels, "judges", "qrels"):
        _check_written_once(f"query {q}: document", docs)
        for d, g in docs.items():
            _check_column("document", d)
            if isinstance(g, bool) or not isinstance(g, (int, float, np.integer, np.floating)) \
                    or not float(g).is_integer() or g < 0:
                raise ValueError(f"query {q} document {d}: grade {g!r} is not a whole number >= 0")
            lines.append(f"{q} 0 {d} {int(g)}")
    write_text(path, "\n".join(lines) + "\n")


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """A TREC qrels file -> `{qid: {docid: grade}}`; a (query, document) judged twice is an error naming both lines,
    and so is a grade that is not a whole number >= 0 (in ASCII digits) naming its line. A negative grade is refused
    rather than read: trec_eval's bpref takes it as "in the pool, unjudged" while `bpref` here would count it as a
    judged non-relevant document; write 0 for judged not relevant, or leave an unjudged document out. Read as
    `read_run` reads a run: a byte-order mark at the start ignored, a byte that is not UTF-8 an error naming the
    line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"qrels file not found: {path}")
    out: dict[str, dict[str, int]] = {}
    first: dict[tuple[str, str], int] = {}  # (query, document) -> the line that judged it
    for line, text in enumerate(decoded_lines(path.read_bytes(), path), start=1):
        if not text.strip():
            continue
        parts = text.split()
        if len(parts) != 4 or not re.fullmatch(r"-?[0-9]+", parts[3]):
            raise ValueError(f"{path}:{line}: expected 'qid 0 docid grade' with an integer grade, got {text!r}")
        if int(parts[3]) < 0:
            raise ValueError(f"{path}:{line}: query {parts[0]} document {parts[2]} has grade {parts[3]}; grades are "
                             "whole numbers >= 0 (0: judged not relevant; leave an unjudged document out)")
        key = (parts[0], parts[2])
        if key in first:
            raise ValueError(f"{path}:{line}: query {parts[0]} judges {parts[2]} twice (first on line {first[key]})")
        first[key] = line
        out.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return out


def ranx_name(metric: str) -> str:
    """`P@10` -> `precision@10`, `MAP@20` -> `map@20`, `r@100-l2` -> `recall@100-l2`, `mrr@10` -> `mrr@10`.
    `bpref@K` is refused: bpref has no cut-off (trec_eval's), and ranx's bpref@K is NaN for a query with no judged
    non-relevant document and zeroes other queries' values when one query has no relevant document (`bpref`)."""
    m = _METRIC.match(metric.strip().lower())
    if not m or (m.group(2) is not None and int(m.group(2)) < 1) or (m.group(1) in ("p", "r", "recall", "ndcg")
                                                                      and m.group(2) is None) \
            or (m.group(1) == "bpref" and m.group(2) is not None) or (m.group(3) and int(m.group(3)[2:]) < 1):
        raise ValueError(f"unknown metric {metric!r}; valid: map, map@K, mrr, mrr@K, bpref (no cut-off), p@K, r@K, "
                         "ndcg@K (K >= 1), each with an optional -lN relevance level (N >= 1: grade 0 means not "
                         "relevant)")
    name = _RANX[m.group(1)] + (f"@{m.group(2)}" if m.group(2) else "")
    return name + (m.group(3) or "")


def per_query(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Sequence[tuple[str, float]]],
              metrics: Sequence[str]) -> dict[str, dict[str, float]]:
    """`{metric: {qid: value}}` (the caller's metric spelling) for every judged query; bpref is trec_eval's
    (`bpref`). A run that ranks one document twice for a query, or a negative grade, is a ValueError naming the
    query."""
    missing = sorted(set(qrels) - set(run), key=id_order)  # ids of mixed types (1, '1') sort too
    extra = sorted(set(run) - set(qrels), key=id_order)
    if missing or extra:
        raise ValueError(f"run and qrels disagree: {len(missing)} judged queries not ranked (e.g. {missing[:3]}), "
                         f"{len(extra)} ranked queries not judged (e.g. {extra[:3]})")
    names = {m: ranx_name(m) for m in metrics}
    if not qrels:
        raise ValueError("no judged query: the qrels are empty, so there is nothing to score")
    qids = _sorted_ids(qrels)
    negative = [(q, d, g) for q in qids for d, g in qrels[q].items() if g < 0]
    if negative:  # bpref would count it as judged non-relevant, trec_eval's bpref as unjudged
        q, d, g = negative[0]
        raise ValueError(f"{len(negative)} judgements have a negative grade (e.g. query {q} document {d}: {g}); "
                         "grades are whole numbers >= 0 (0: judged not relevant)")
    empty = [q for q in qids if not any(g > 0 for g in qrels[q].values())]
    if empty:
        raise ValueError(f"{len(empty)} queries have no relevant document (e.g. {empty[:3]})")
    ranked = {q: [doc for doc, _ in run[q]] for q in qids}
    twice = [q for q in qids if len(set(ranked[q])) != len(ranked[q])]
    if twice:  # ranx would keep one score a document and drop its other ranks
        q = twice[0]
        raise ValueError(f"{len(twice)} queries rank a document twice (e.g. query {q}: "
                         f"{sorted({d for d in ranked[q] if ranked[q].count(d) > 1}, key=id_order)[:3]})")
    # scored in the run's order, so ties keep it
    by_ranx = [r for r in names.values() if r.partition("-l")[0] != "bpref"]
    values = ranx_per_query(qrels, ranked, qids, by_ranx) if by_ranx else {}
    for r in set(names.values()) - set(by_ranx):
        level = int(r.partition("-l")[2] or 1)
        values[r] = {q: bpref(qrels[q], ranked[q], level) for q in qids}
    return {m: {q: values[r][q] for q in qids} for m, r in names.items()}


def _sorted_ids(ids) -> list:
    """`ids` sorted; ids of mixed types (1 and '2', which `sorted` refuses with a TypeError) by their text, then
    their type's name."""
    try:
        return sorted(ids)
    except TypeError:
        return sorted(ids, key=id_order)


def bpref(judged: Mapping[str, int], ranked: Sequence[str], level: int = 1) -> float:
    """trec_eval's bpref of one ranking: each judged relevant document ranked (grade >= `level`) scores 1 less the
    share of min(R, N) judged non-relevant ones ranked above it (at most R counted; R, N: the numbers of judged
    relevant and non-relevant documents), unjudged ones skipped, the sum divided by R; 1 a relevant one ranked when
    N = 0, and 0 when R = 0. Computed here: ranx's is NaN when N = 0, and a query with R = 0 zeroes the bpref of
    other queries scored with it (a division by zero inside its parallel loop)."""
    n_rel = sum(g >= level for g in judged.values())
    n_nonrel = len(judged) - n_rel
    score, above = 0.0, 0
    for doc in ranked:
        if doc not in judged:
            continue
        if judged[doc] < level:
            above += 1
        else:
            score += 1.0 - min(above, n_rel) / min(n_nonrel, n_rel) if above else 1.0
    return score / n_rel if n_rel else 0.0


def mean_scores(values: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Mean over queries of each metric."""
    return {m: float(np.mean(list(v.values()))) for m, v in values.items()}
