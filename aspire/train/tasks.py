"""Training tasks: sources of (anchor, positive) pairs for a multi-task run (`tasks:` in the config).

- `cocite`: the co-cited pairs of `data.examples_dir` (`aspire.train.data.load_split`).
- `context2doc`: each citing sentence of the context2doc *train* split (citation markers removed,
  `aspire.benchmarks.context2doc`) paired with each paper it cites; the dev split gives dev pairs. The
  test split is refused. The sentence is a one-sentence paper with an empty title, as the benchmark
  encodes its queries; the other papers the sentence cites are not its negatives, nor are the papers that
  another citing sentence of the same text (after marker removal) cites. A pair whose cited paper is a paper of
  CSFCube or the reviewer set (`aspire.benchmarks.heldout.cited_benchmark_papers` under `benchmarks_dir`: by
  normalised title, paper id, abstract key or containment) is left out, counted (`removed_benchmark_pairs`, and
  the papers per rule, `removed_benchmark_by`; both only where some pair is left out); a sentence left with no
  pair is no anchor. A train or dev sentence that is a reworded copy of a test sentence, i.e. holds at least half
  of a test query's distinct word 5-grams (`aspire.benchmarks.heldout.containment`, 0.5) and cites one of its
  papers, is no anchor either (`reworded_test_twins`; L877 holds 0.79 of test query L875 and cites its 5 papers),
  counted apart from the queries whose text is a test query's, which the benchmark's reader leaves out already
  (`left_out_test_twins`): `reworded_test_twins` `{qid: [test qids]}` and `reworded_test_twin_pairs` (both only
  where some query is left out; `queries` counts the queries kept). The papers cited by
  context2doc's own test sentences are trained on, by design of that benchmark.
- `crop`: independent cropping, an unsupervised pair of two random spans (`span_min`..`span_max`
  sentences, drawn independently, so they may overlap) of one abstract, `views` pairs an abstract,
  drawn once from a generator seeded by the paper id (the same pairs every run). Abstracts come from
  the co-citation train split (the papers its examples name: a paper of dev sets alone is left out) and/or
  the ACL Anthology; every benchmark paper (CSFCube, reviewer matching, the papers cited by context2doc test
  sentences, the SciRepEval formats' dev and test papers) is removed first, by normalised title, paper id or
  abstract text or containment (`aspire.benchmarks.heldout.excluded_papers`: an empty title hides none), and the number
  removed is reported, per rule (`removed_benchmark_by`). Abstracts of fewer than two sentences give no pair (counted).
  A pair's two spans have different text (the second is redrawn, `crop_pairs`); an abstract with no two such spans
  (`span_min` >= its sentences, or all its sentences alike) gives no pair, counted (`no_two_different_spans`, only
  where some is).
- `title`: a paper's title paired with its abstract without the title (ACL Anthology and/or the
  co-citation abstracts, benchmark papers removed as for `crop`).
- `author`: weak supervision from the ACL Anthology's author lists: two papers that share at least
  `min_shared_authors` authors (names compared as the same-author benchmark keys them: NFC, lower-cased, spaces
  collapsed), `views` partners a paper drawn seeded by its id; authors with more than `max_author_papers` papers (of the
  whole source: both splits) link nothing (a prolific author's papers span topics). Every other paper sharing a linking author with the anchor
  (even fewer than `min_shared_authors`) is kept out of its negatives; one sharing only a prolific
  author is not. Benchmark papers are removed first, as for `crop`.
- `distill`: each ACL paper paired with `views` of its `neighbours` nearest papers of the same split by
  a teacher's vectors (`aspire.train.teacher`, `teacher_dir`); the teacher's vectors ride with the
  task, so under `loss.kind: mnrl` its rows learn the teacher's in-batch similarities (soft targets)
  rather than the one positive; `near_negatives` adds another of the anchor's neighbours as its hard
  negative, so the soft targets rank near papers too. Benchmark papers are removed first, as for `crop`.
  `views` > `neighbours`, or `near_negatives` with one neighbour (the partner itself), is refused when the config
  loads (`aspire.train.config.task_problem`, as are a source a task cannot read and a crop's `span_max` below its
  `span_min`); a paper of a split too small to give it `views` neighbours is counted (`fewer_neighbours_than_views`),
  as are the pairs left without a near negative (`without_near_negative`), both only where some are.

`crop`, `title`, `author` and `distill` put `dev_share` of their abstracts (by a hash of the paper id) in the dev
split; a pair never crosses splits.

Each builder returns a `TaskData`; `MultiTaskData` concatenates them for the sampler of
`aspire.train.mixing`.
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass, field, replace

import numpy as np

from aspire.benchmarks.heldout import (
    CONTAINMENT,
    GramIndex,
    cited_benchmark_papers,
    excluded_papers,
    null_benchmarks_dir,
)
from aspire.benchmarks.same_author import author_key
from aspire.data.acl import HeldOut, read_acl, removed_by
from aspire.data.papers import Paper
from aspire.train.config import TASK_SOURCES, Config, TaskConfig, sources_problem, tasks_problem
from aspire.train.data import Example, TripletDataset, load_split, split_paper_ids

log = logging.getLogger(__name__)
SPLITS = ("train", "dev")


@dataclass
class TaskData:
    """One task's pairs of one split, the papers they name, and what was left out (`stats`)."""

    name: str
    examples: list[Example]
    papers: dict[str, Paper]
    stats: dict = field(default_factory=dict)
    teacher: dict[str, np.ndarray] = field(default_factory=dict)  # unit teacher vectors (`distill`)
    # a paper's chosen sentence (position, text) and the teacher's vector of it encoded alone (`distill`)
    sentence_teacher: dict[str, tuple[int, str, np.ndarray]] = field(default_factory=dict)


def _cut(paper: Paper, max_sentences: int) -> Paper:
    return replace(paper, sentences=paper.sentences[:max_sentences]) if max_sentences else paper


def cocite_task(cfg: Config, split: str, index: int) -> TaskData:
    data = load_split(cfg.data, split)
    return TaskData("cocite", [replace(e, task=index) for e in data.examples], data.papers)


def context2doc_task(cfg: Config, task: TaskConfig, split: str, index: int) -> TaskData:
    from aspire.benchmarks.context2doc import held_out_queries, load_context2doc

    if split not in SPLITS:  # never the test split: it is the benchmark
        raise ValueError(f"context2doc task: split {split!r} is not one of {SPLITS}")
    bench = load_context2doc(task.data_dir, split)
    twins = reworded_test_twins(bench.queries, bench.qrels, held_out_queries(task.data_dir))
    queries = {qid: text for qid, text in bench.queries.items() if qid not in twins}
    cited = {pid for qid in queries for pid in bench.qrels[qid]}
    held = _cited_benchmark(task)
    why = {p.paper_id: held.reason(p.paper_id, p.title, p.sentences) for p in bench.candidates if p.paper_id in cited}
    benchmark = {pid for pid, w in why.items() if w is not None}  # whole abstracts: matched before the cut
    papers = {p.paper_id: _cut(p, cfg.data.max_sentences) for p in bench.candidates if p.paper_id not in benchmark}
    by_text: dict[str, set[str]] = {}  # one text cited with other papers elsewhere: none of them is its negative
    for qid, text in bench.queries.items():  # a twin's papers too: its text cited them
        by_text.setdefault(text, set()).update(bench.qrels[qid])
    examples, removed_pairs = [], 0
    for qid, text in queries.items():
        anchor = f"ctx:{qid}"
        members = tuple(sorted(by_text[text])) + (anchor,)
        kept = [pid for pid in sorted(bench.qrels[qid]) if pid not in benchmark]
        removed_pairs += len(bench.qrels[qid]) - len(kept)
        if kept:
            papers[anchor] = Paper(anchor, "", [text])
        examples += [Example(anchor, pid, members, None, None, task=index) for pid in kept]
    stats = {"queries": len(queries), "left_out_test_twins": len(bench.left_out),
             "queries_repeating_a_text": len(bench.queries) - len(by_text)}
    if twins:  # counted where some query is left out (the stats before the rule keep their keys)
        stats.update(reworded_test_twins=twins, reworded_test_twin_pairs=sum(len(bench.qrels[q]) for q in twins))
    if benchmark:  # counted where the split cites a benchmark paper (the stats before the rule keep their keys)
        stats.update(removed_benchmark_pairs=removed_pairs, removed_benchmark_by=removed_by([why[p] for p in benchmark], held))
    return TaskData("context2doc", examples, papers, stats)


def reworded_test_twins(queries: dict[str, str], qrels: dict[str, dict[str, int]],
                        tests: dict[str, tuple[str, frozenset[str]]], threshold: float = CONTAINMENT) -> dict[str, list[str]]:
    """`{qid: [test qids]}`: the `queries` (`{qid: text}`, cited papers in `qrels`) that hold at least `threshold` of
    a test query's distinct word 5-grams (`aspire.benchmarks.heldout.containment(test text, text)`) and cite one of
    its papers; `tests` is `aspire.benchmarks.context2doc.held_out_queries`. A test query of fewer than five words has
    no gram and matches nothing; one that only shares words with a query, citing none of its papers, is another
    statement about other work and matches nothing either."""
    ids = sorted(tests)
    index = GramIndex([tests[t][0] for t in ids])
    out = {}
    for qid, text in queries.items():
        hits = sorted(ids[row] for row, c in index.contained(text).items()
                      if c >= threshold and not tests[ids[row]][1].isdisjoint(qrels[qid]))
        if hits:
            out[qid] = hits
    return out


def _cited_benchmark(task: TaskConfig) -> HeldOut:
    """The papers of CSFCube and the reviewer set under `task.benchmarks_dir` (`cited_benchmark_papers`), which the
    `context2doc` task leaves out of its pairs; None turns it off with a warning, as for the sampled tasks."""
    if task.benchmarks_dir is None:
        log.warning("%s", null_benchmarks_dir(f"{task.name} task: tasks[].benchmarks_dir", "CSFCube and reviewer-set papers"))
        return HeldOut()
    return cited_benchmark_papers(task.benchmarks_dir)


def _in_dev(pid: str, share: float) -> bool:
    return int(hashlib.sha256(pid.encode()).hexdigest(), 16) % 10_000 < share * 10_000


CROP_REDRAWS = 16  # redraws of a pair's second span while its text is the first's, before drawing among the others


def _span(rng: random.Random, n: int, task: TaskConfig) -> tuple[int, int]:
    """(start, length) of a random span of `task.span_min`..`task.span_max` sentences (at most `n`)."""
    length = rng.randint(min(task.span_min, n), min(task.span_max, n))
    return rng.randint(0, n - length), length


def crop_pairs(paper: Paper, task: TaskConfig, index: int) -> tuple[list[Example], list[Paper]]:
    """`task.views` pairs of random spans of `paper`, drawn from a generator seeded by its id. A pair's second
    span is redrawn while its text is the first's (a pair of one text twice teaches nothing: 8% of the pairs of
    2,000 ACL abstracts under the default spans), up to `CROP_REDRAWS` times, then drawn uniformly among the spans
    whose text differs. None if `paper` has fewer than two sentences, or no two spans of `span_min`..`span_max`
    sentences with different text (`span_min` >= its sentences, or all its sentences alike; `crop_task` counts
    both)."""
    n = len(paper.sentences)
    if n < 2:
        return [], []
    lengths = range(min(task.span_min, n), min(task.span_max, n) + 1)
    spans = [(start, length) for length in lengths for start in range(n - length + 1)]
    text = {s: tuple(paper.sentences[s[0] : s[0] + s[1]]) for s in spans}
    if len(set(text.values())) < 2:
        return [], []
    rng = random.Random(f"crop:{paper.paper_id}")
    examples, crops = [], []
    for v in range(task.views):
        a = _span(rng, n, task)
        b = _span(rng, n, task)
        for _ in range(CROP_REDRAWS):
            if text[b] != text[a]:
                break
            b = _span(rng, n, task)
        else:
            if text[b] == text[a]:
                b = rng.choice([s for s in spans if text[s] != text[a]])
        ids = [f"{paper.paper_id}#crop{v}{side}" for side in "ab"]
        crops += [Paper(i, "", list(text[s])) for i, s in zip(ids, (a, b))]
        examples.append(Example(ids[0], ids[1], (paper.paper_id,), None, None, source=paper.paper_id, task=index))
    return examples, crops


def source_papers(cfg: Config, task: TaskConfig, split: str, valid: tuple[str, ...]) -> tuple[list[Paper], dict]:
    """The abstracts of `task.sources` in `split` (by hash, `dev_share`), every benchmark paper removed by
    normalised title, paper id, abstract text or containment (`excluded_papers`; the whole abstract, before
    `data.max_sentences` cuts it); and what was read, removed (`removed_benchmark`, and per rule, the first
    that matched, `removed_benchmark_by`) and used, per source. The co-citation source is the papers
    its train split names (`aspire.train.data.split_paper_ids`): a paper only its dev split names stays out
    (counted under `cocite.not_in_train_split`), as the dev loss is taken on it, and so does its ACL record where
    both sources are read (counted under `acl.in_cocite_dev_split`, only where some is). Two ACL records with one paper id are
    an error naming it; an ACL paper the co-citation source holds already is taken once, from that source
    (counted under `acl.in_cocite_already`)."""
    sources, stats = _all_sources(cfg, task, valid)
    in_split = [_cut(p, cfg.data.max_sentences) for p in sources if _in_dev(p.paper_id, task.dev_share) == (split == "dev")]
    stats["in_split"] = len(in_split)
    return in_split, stats


def _all_sources(cfg: Config, task: TaskConfig, valid: tuple[str, ...]) -> tuple[list[Paper], dict]:
    """`source_papers` of both splits, whole (before the dev share and `data.max_sentences`)."""
    problem = sources_problem(task.name, task.sources, valid)
    if problem:
        raise ValueError(problem)
    exclude, counts = excluded_papers(task.benchmarks_dir, f"{task.name} task: tasks[].benchmarks_dir")
    stats: dict = {"benchmark_titles": counts}
    sources: list[Paper] = []
    if "cocite" in task.sources:  # the train split's papers: one only the dev split names gives the dev loss
        every = load_split(replace(cfg.data, max_sentences=0), "train").papers  # whole: cut after the abstract match
        train = split_paper_ids(cfg.data, "train")
        cocite = [p for pid, p in every.items() if pid in train]
        reasons = [exclude.reason(p.paper_id, p.title, p.sentences) for p in cocite]
        kept = [p for p, why in zip(cocite, reasons) if why is None]
        stats["cocite"] = {"read": len(every), "not_in_train_split": len(every) - len(cocite),
                           "removed_benchmark": len(cocite) - len(kept), "used": len(kept)}
        if not exclude.by_title_only:
            stats["cocite"]["removed_benchmark_by"] = removed_by(reasons, exclude)
        sources += kept
        dev_only = set(every) - train  # the dev loss's papers: kept out of the ACL source too
    if "acl" in task.sources:
        try:  # a repeated id (read_acl refuses it, whatever the sample) would pair a paper with itself
            acl, acl_stats = read_acl(task.acl_path, exclude, task.max_papers)
        except ValueError as err:
            raise ValueError(f"{task.name} task: {err}") from None
        stats["acl"] = dict(acl_stats)
        known = {p.paper_id for p in sources}
        if known:  # a paper of both sources once went in twice, its crop ids (and pairs) repeated
            both = [p for p in acl if p.paper_id in known]
            acl = [p for p in acl if p.paper_id not in known]
            stats["acl"]["in_cocite_already"] = len(both)
        if "cocite" in task.sources:  # a paper only the co-citation dev split names came back in through the ACL file
            dev = [p for p in acl if p.paper_id in dev_only]
            if dev:  # counted where some is left out (the stats before the rule keep their keys)
                acl = [p for p in acl if p.paper_id not in dev_only]
                stats["acl"]["in_cocite_dev_split"] = len(dev)
        sources += acl
    return sources, stats


def crop_task(cfg: Config, task: TaskConfig, split: str, index: int) -> TaskData:
    sources, stats = source_papers(cfg, task, split, TASK_SOURCES["crop"])
    examples, papers, short, one_text = [], {}, 0, 0
    for paper in sources:
        pairs, crops = crop_pairs(paper, task, index)
        short += len(paper.sentences) < 2
        one_text += not pairs and len(paper.sentences) >= 2
        examples += pairs
        papers.update((c.paper_id, c) for c in crops)
    stats["fewer_than_two_sentences"] = short
    if short:
        log.info("crop task (%s): %d abstract(s) with fewer than two sentences give no pair", split, short)
    if one_text:  # counted where some is (a pair of one text twice was made of it)
        stats["no_two_different_spans"] = one_text
        log.info("crop task (%s): %d abstract(s) with no two spans of %d..%d sentences of different text give no "
                 "pair", split, one_text, task.span_min, task.span_max)
    return TaskData("crop", examples, papers, stats)


def title_pair(paper: Paper, index: int) -> tuple[Example, Paper, Paper] | None:
    """(title -> abstract without its title) of `paper`, or None when it lacks a title or an abstract."""
    if not paper.title.strip() or not paper.sentences:
        return None
    title = Paper(f"{paper.paper_id}#title", "", [paper.title])
    body = Paper(f"{paper.paper_id}#body", "", list(paper.sentences))
    return Example(title.paper_id, body.paper_id, (paper.paper_id,), None, None, source=paper.paper_id, task=index), title, body


def title_task(cfg: Config, task: TaskConfig, split: str, index: int) -> TaskData:
    sources, stats = source_papers(cfg, task, split, TASK_SOURCES["title"])
    examples, papers = [], {}
    for paper in sources:
        made = title_pair(paper, index)
        if made is not None:
            examples.append(made[0])
            papers.update((p.paper_id, p) for p in made[1:])
    stats["without_title_or_abstract"] = len(sources) - len(examples)
    return TaskData("title", examples, papers, stats)


def author_pairs(papers: list[Paper], task: TaskConfig, index: int,
                 counts: dict[str, int] | None = None) -> tuple[list[Example], dict]:
    """Pairs of `papers` sharing at least `task.min_shared_authors` authors (module docstring). `counts` is
    `{author key: papers}` over the whole source (both splits, `author_counts`), so an author prolific in the source
    links nothing in the small dev split either; None counts `papers`."""
    by_author: dict[str, list[int]] = {}
    authors = []
    for i, paper in enumerate(papers):
        names = paper.extra.get("authors")
        if names is not None and not isinstance(names, list):
            raise ValueError(f"author task: paper {paper.paper_id}: 'authors' must be a list, got {type(names).__name__}")
        odd = next((n for n in names or [] if not isinstance(n, str)), "")
        if not isinstance(odd, str):  # `null` was the author "none", who linked every paper listing one
            raise ValueError(f"author task: paper {paper.paper_id}: 'authors' must be a list of names (strings), "
                             f"got {odd!r:.60} among them")
        keys = sorted({author_key(n) for n in names or [] if n.strip()})
        authors.append(keys)
        for key in keys:
            by_author.setdefault(key, []).append(i)
    total = {a: len(ids) for a, ids in by_author.items()} if counts is None else counts
    usable = {a: ids for a, ids in by_author.items() if len(ids) >= 2 and total[a] <= task.max_author_papers}
    examples, lonely = [], 0
    for i, paper in enumerate(papers):
        shared: dict[int, int] = {}
        for a in authors[i]:
            for j in usable.get(a, ()):
                if j != i:
                    shared[j] = shared.get(j, 0) + 1
        partners = sorted(j for j, n in shared.items() if n >= task.min_shared_authors)
        if not partners:
            lonely += 1
            continue
        rng = random.Random(f"author:{paper.paper_id}")
        members = tuple(sorted({paper.paper_id} | {papers[j].paper_id for j in shared}))
        for j in rng.sample(partners, min(task.views, len(partners))):
            examples.append(Example(paper.paper_id, papers[j].paper_id, members, None, None, task=index))
    stats = {"authors": len(by_author), "authors_linking": len(usable),
             "authors_over_max": sum(total[a] > task.max_author_papers for a in by_author),
             "papers_without_partner": lonely}
    return examples, stats


def author_counts(papers: list[Paper]) -> dict[str, int]:
    """`{author key: number of papers}` of `papers` (their `authors`, keyed by `author_key`; a name listed twice in
    one paper counts once)."""
    counts: dict[str, int] = {}
    for paper in papers:
        names = paper.extra.get("authors")
        for key in {author_key(n) for n in (names if isinstance(names, list) else []) if isinstance(n, str) and n.strip()}:
            counts[key] = counts.get(key, 0) + 1
    return counts


def author_task(cfg: Config, task: TaskConfig, split: str, index: int) -> TaskData:
    every, stats = _all_sources(cfg, task, TASK_SOURCES["author"])
    sources = [_cut(p, cfg.data.max_sentences) for p in every if _in_dev(p.paper_id, task.dev_share) == (split == "dev")]
    stats["in_split"] = len(sources)
    examples, more = author_pairs(sources, task, index, author_counts(every))  # prolific over both splits
    stats.update(more)
    return TaskData("author", examples, {p.paper_id: p for p in sources}, stats)


def distill_task(cfg: Config, task: TaskConfig, split: str, index: int) -> TaskData:
    from aspire.data.negatives.rank import nearest_negatives
    from aspire.train.teacher import check_source, load_teacher

    # its teacher_dir, views, neighbours and the loss are checked with the config (`build_tasks`: `tasks_problem`)
    sources, stats = source_papers(cfg, task, split, TASK_SOURCES["distill"])
    if len(sources) < 2:
        raise ValueError(f"distill task ({split}): {len(sources)} paper(s) in the split; at least two are needed")
    teacher = load_teacher(task.teacher_dir)
    ids = [p.paper_id for p in sources]
    vectors = teacher.vectors[teacher.rows(ids, f"distill task ({split}), {task.teacher_dir}")]
    near = nearest_negatives(vectors, {}, ids, task.neighbours).negatives  # no partners: each paper's nearest others
    sentences = ({} if teacher.sentences is None
                 else _teacher_sentences(teacher, sources, split, cfg.data.max_sentences, stats))
    # after the per-paper checks (missing ids, changed sentences), which name the papers: then the file as a whole
    check_source(teacher.meta, task.teacher_dir, task.acl_path, task.max_papers, "distill task")
    examples = []
    for pid in ids:
        rng = random.Random(f"distill:{pid}")
        align = (sentences[pid][0], -1) if pid in sentences else None  # the anchor's facet: its chosen sentence
        for other in rng.sample(near[pid], min(task.views, len(near[pid]))):
            negative = None
            if task.near_negatives:  # drawn after the partners: their draws stay as they were
                rest = [n for n in near[pid] if n != other]
                negative = rng.choice(rest) if rest else None
            examples.append(Example(pid, other, (pid, other), negative, align, task=index))
    short = sum(len(near[pid]) < task.views for pid in ids)  # a split of few papers: fewer neighbours than views
    if short:  # counted where some paper is short (the stats before the count keep their keys)
        stats["fewer_neighbours_than_views"] = short
    lacking = sum(e.negative is None for e in examples) if task.near_negatives else 0
    if lacking:  # a paper whose one neighbour is its partner has no other to be its negative
        stats["without_near_negative"] = lacking
    stats["teacher"] = {k: teacher.meta.get(k) for k in ("teacher", "fingerprint", "max_length", "papers", "sentences")}
    return TaskData("distill", examples, {p.paper_id: p for p in sources}, stats, dict(zip(ids, vectors)), sentences)


def _teacher_sentences(teacher, papers: list[Paper], split: str, max_sentences: int = 0,
                       stats: dict | None = None) -> dict[str, tuple[int, str, np.ndarray]]:
    """Each paper's chosen sentence (position, text, teacher vector); a paper whose abstract no longer holds
    the text the teacher encoded at that position is an error naming it (the teacher was written from
    other data: write it again). A chosen sentence at or past `max_sentences` (`data.max_sentences`, 0 = no cut;
    `papers` are already cut to it) is the cut's doing, not the teacher's: that paper has no facet (its pairs add
    no facet loss, as a co-cited pair aligned past the cut adds no aligned-pair loss), counted in `stats` under
    `sentence_past_max_sentences` and warned of. It was called changed, and writing the teacher again, as the
    error said, chose the same sentence."""
    rows = teacher.rows([p.paper_id for p in papers], f"distill task ({split}), sentences")
    out, changed, cut = {}, [], []
    for paper, row in zip(papers, rows):
        position, text = teacher.sentence_texts[row]
        if max_sentences and position >= max_sentences:
            cut.append(paper.paper_id)
            continue
        if position >= len(paper.sentences) or paper.sentences[position] != text:
            changed.append(paper.paper_id)
        out[paper.paper_id] = (position, text, teacher.sentences[row])
    if changed:
        raise ValueError(f"distill task ({split}): {len(changed)} paper(s) no longer hold the sentence the teacher "
                         f"encoded, e.g. {changed[:3]}; write the teacher vectors again (python -m aspire.train.teacher)")
    if cut:
        log.warning("distill task (%s): %d of the %d papers have their teacher sentence past data.max_sentences=%d, "
                    "which cuts it off, e.g. %s: their pairs add no facet loss", split, len(cut), len(papers),
                    max_sentences, cut[:3])
        if stats is not None:
            stats["sentence_past_max_sentences"] = len(cut)
    return out


BUILDERS = {"cocite": lambda cfg, task, split, i: cocite_task(cfg, split, i),
            "context2doc": context2doc_task, "crop": crop_task, "title": title_task, "author": author_task,
            "distill": distill_task}


class MultiTaskData(TripletDataset):
    """The tasks' examples end to end (task t's at `offsets[t]`...), the union of their papers. Two tasks giving
    one paper id two texts (title or sentences, after `data.max_sentences`) are an error naming it and them: a
    batch holds one text an id, and the other task's pairs (and alignment positions) would silently read it."""

    def __init__(self, parts: list[TaskData], tasks: list[TaskConfig]) -> None:
        for part in parts:
            if not part.examples:
                raise ValueError(f"task {part.name!r} has no examples")
        super().__init__([e for p in parts for e in p.examples], _union_papers(parts))
        self.parts, self.tasks = parts, tasks
        self.names = [p.name for p in parts]
        self.weights = [t.weight for t in tasks]
        self.sizes = [len(p.examples) for p in parts]
        self.offsets = [sum(self.sizes[:t]) for t in range(len(parts))]
        self.sources = {e.positive_source for e in self.examples} | {m for e in self.examples for m in e.members}
        self.teacher = {pid: v for p in parts for pid, v in p.teacher.items()}
        self.sentence_teacher = {pid: v for p in parts for pid, v in p.sentence_teacher.items()}


def _union_papers(parts: list[TaskData]) -> dict[str, Paper]:
    """Every task's papers by id (`MultiTaskData`); ValueError naming an id two tasks give different texts."""
    papers: dict[str, Paper] = {}
    owner: dict[str, str] = {}
    for part in parts:
        for pid, paper in part.papers.items():
            known = papers.get(pid)
            if known is not None and (known.title, list(known.sentences)) != (paper.title, list(paper.sentences)):
                raise ValueError(f"paper {pid!r} has one text in task {owner[pid]!r} and another in task {part.name!r} "
                                 f"(title {known.title!r:.60} / {paper.title!r:.60}, {len(known.sentences)} / "
                                 f"{len(paper.sentences)} sentences): give the tasks one abstract a paper id")
            papers[pid] = paper
            owner.setdefault(pid, part.name)
    return papers


def build_tasks(cfg: Config, split: str) -> MultiTaskData:
    """The configured tasks' pairs of `split` (`train` or `dev`); ValueError for tasks the config refuses
    (`aspire.train.config.tasks_problem`), e.g. a task changed since it loaded."""
    problem = tasks_problem(cfg.tasks, cfg.loss)  # refused when the config loaded; again for one changed since
    if problem:
        raise ValueError(problem)
    parts = [BUILDERS[t.name](cfg, t, split, i) for i, t in enumerate(cfg.tasks)]
    for part in parts:
        log.info("task %s (%s): %d pairs %s", part.name, split, len(part.examples), part.stats or "")
        if not part.examples:  # said here, where the split is known, with what the task read
            raise ValueError(f"task {part.name!r} has no examples in the {split} split ({part.stats or 'nothing read'})"
                             + ("; raise its dev_share where it has one, or set data.use_dev=false" if split == "dev"
                                else ""))
    return MultiTaskData(parts, list(cfg.tasks))
