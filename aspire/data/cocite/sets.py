"""Stages 3-5 of the co-citation pipeline: group contexts by co-cited set, split the sets into
train and dev with no pair in both, and build one example per co-cited pair.

Formats: `aspire.data.cocite`. Each stage checks the records it reads (a folder built by hand is read
as it is): a context needs a unique string `context_id`, string `text` and `text_clean`, and
`cited_ids`, two or more distinct non-empty paper ids without '|' (set ids join ids with it); a
co-cited set needs a unique `set_id` equal to `set_id(paper_ids)`, such `paper_ids`, and
`context_ids`, `contexts` and `contexts_clean` as string lists of one length; every paper a set names
needs an abstract. Anything else raises `DataError` naming the file, the line and the key.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from aspire.config import to_dict
from aspire.data.acl import same_work_groups
from aspire.data.cocite.config import REPORT, SPLITS, ExamplesConfig, SplitConfig
from aspire.data.cocite.stages import begin_stage, end_stage
from aspire.data.papers import Paper
from aspire.io import AtomicJsonl, DataError, iter_jsonl, require, type_name, unique_id, write_json


def iter_examples(examples_dir: str | Path, split: str) -> Iterator[dict]:
    """Stream the training examples of one split (`examples.{split}.jsonl`)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {list(SPLITS)}")
    for _, obj in iter_jsonl(Path(examples_dir) / f"examples.{split}.jsonl"):
        yield obj



# ---- stage 3: group -----------------------------------------------------------------------------
def set_id(paper_ids: Iterable[str]) -> str:
    """The id of a co-cited set: its sorted paper ids joined by '|'."""
    return "|".join(sorted(paper_ids))


def _check_paper_ids(ids: object, key: str, where: str) -> None:
    """`DataError` at `where` ("FILE:LINE") unless `ids` are two or more distinct paper ids: non-empty strings
    without '|', which would make two different sets one set id (`set_id`)."""
    if not isinstance(ids, list) or not all(isinstance(p, str) and p for p in ids):
        raise DataError(f"{where}: {key} must be a list of non-empty paper id strings, got {ids!r:.80}")
    if any("|" in p for p in ids):
        bad = next(p for p in ids if "|" in p)
        raise DataError(f"{where}: {key}: paper id {bad!r} holds '|', which joins the ids of a set id")
    if len(set(ids)) != len(ids):
        raise DataError(f"{where}: {key} names a paper twice: {ids!r:.80}")
    if len(ids) < 2:
        raise DataError(f"{where}: {key} names {len(ids)} paper(s); a co-cited set needs two or more")


def _check_context(ctx: dict, path: Path, lineno: int, seen: dict[str, str]) -> None:
    """`DataError` naming the file and line unless `ctx` is a context `group_contexts` can use (module docstring);
    `seen` maps the context ids met so far to where ("FILE:LINE")."""
    require(ctx, ("context_id", "text", "text_clean", "cited_ids"), path, lineno)
    where = f"{path}:{lineno}"
    cid = unique_id(ctx["context_id"], "context_id", where, seen)
    for key in ("text", "text_clean"):
        if not isinstance(ctx[key], str):
            raise DataError(f"{where}: context {cid!r}: {key} must be a string, got {type_name(ctx[key])}")
    _check_paper_ids(ctx["cited_ids"], f"context {cid!r}: cited_ids", where)


GROUP_KEYS = ("set_id", "paper_ids", "context_ids", "contexts", "contexts_clean")


def _check_group(group: dict, path: Path, lineno: int, first_line: dict[str, int]) -> None:
    """`DataError` naming the file and line unless `group` is a co-cited set as `group_contexts` writes it
    (module docstring); `first_line` maps the set ids of the file met so far to their line."""
    require(group, GROUP_KEYS, path, lineno)
    where = f"{path}:{lineno}"
    sid = group["set_id"]
    if not isinstance(sid, str):
        raise DataError(f"{where}: set_id must be a string, got {type_name(sid)} {sid!r:.60}")
    _check_paper_ids(group["paper_ids"], f"co-cited set {sid!r}: paper_ids", where)
    if sid != set_id(group["paper_ids"]):
        raise DataError(f"{where}: set_id {sid!r} is not the set id of its paper_ids, {set_id(group['paper_ids'])!r}")
    if sid in first_line:
        raise DataError(f"{where}: co-cited set {sid!r} repeats the set of line {first_line[sid]}")
    first_line[sid] = lineno
    for key in ("context_ids", "contexts", "contexts_clean"):
        value = group[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise DataError(f"{where}: co-cited set {sid!r}: {key} must be a list of strings, got {value!r:.80}")
    lengths = {key: len(group[key]) for key in ("context_ids", "contexts", "contexts_clean")}
    if len(set(lengths.values())) != 1:
        raise DataError(f"{where}: co-cited set {sid!r}: context_ids, contexts and contexts_clean differ in "
                        f"length {lengths}")


def _iter_groups(path: Path) -> Iterator[tuple[int, dict]]:
    """(line, set) of a groups file, each checked by `_check_group`."""
    first_line: dict[str, int] = {}
    for lineno, group in iter_jsonl(path):
        _check_group(group, path, lineno, first_line)
        yield lineno, group


def group_contexts(in_dir: str | Path, out_dir: str | Path) -> dict:
    """Group the filtered contexts by co-cited set -> `groups.jsonl` (sorted by set id)."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    groups: dict[str, dict] = {}
    seen: dict[str, str] = {}
    for lineno, ctx in iter_jsonl(in_dir / "contexts.jsonl"):
        _check_context(ctx, in_dir / "contexts.jsonl", lineno, seen)
        sid = set_id(ctx["cited_ids"])
        group = groups.setdefault(
            sid, {"set_id": sid, "paper_ids": sorted(ctx["cited_ids"]), "context_ids": [], "contexts": [], "contexts_clean": []}
        )
        group["context_ids"].append(ctx["context_id"])
        group["contexts"].append(ctx["text"])
        group["contexts_clean"].append(ctx["text_clean"])
    begin_stage(out_dir, "group")
    with AtomicJsonl(out_dir / "groups.jsonl") as out:
        for sid in sorted(groups):
            out.write(groups[sid])
    _copy_jsonl(in_dir / "abstracts.jsonl", out_dir / "abstracts.jsonl")
    report = {
        "stage": "group",
        "input": str(in_dir),
        "sets": len(groups),
        "contexts": sum(len(g["context_ids"]) for g in groups.values()),
        "set_size_histogram": _histogram(len(g["paper_ids"]) for g in groups.values()),
        "contexts_per_set_histogram": _histogram(len(g["context_ids"]) for g in groups.values()),
    }
    write_json(out_dir / REPORT, report)
    end_stage(out_dir)
    return report


def _histogram(values: Iterable[int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(Counter(values).items())}


def _copy_jsonl(src: Path, dst: Path, keep: Callable[[dict], bool] = lambda obj: True) -> int:
    with AtomicJsonl(dst) as out:
        for _, obj in iter_jsonl(src):
            if keep(obj):
                out.write(obj)
        return out.count


def _read_papers(abstracts: Path) -> dict[str, Paper]:
    """{paper id: its title and abstract, as `same_work_groups` reads them} of an `abstracts.jsonl`: each line needs
    a unique non-empty string `paper_id` (`DataError` naming the line otherwise); an absent or odd title or
    abstract names nothing (a string abstract is one sentence)."""
    seen: dict[str, str] = {}  # a paper twice would be copied twice; a non-string id crashed the sort
    papers: dict[str, Paper] = {}
    for lineno, obj in iter_jsonl(abstracts):
        require(obj, ("paper_id",), abstracts, lineno)
        pid = unique_id(obj["paper_id"], "paper_id", f"{abstracts}:{lineno}", seen)
        title, abstract = obj.get("title"), obj.get("abstract")
        papers[pid] = Paper(pid, title if isinstance(title, str) else "",
                            [abstract] if isinstance(abstract, str) else abstract if isinstance(abstract, list) else [])
    return papers


def _work_of(papers: dict[str, Paper]) -> dict[str, str]:
    """{paper id: the smallest id of its work} for the papers that are one work under several ids
    (`same_work_groups`); a paper of one id is not in it."""
    return {pid: ids[0] for ids in same_work_groups(papers) for pid in ids}


# ---- stage 4: split -----------------------------------------------------------------------------
def cocited_partners(sets: Iterable[Iterable[str]], same_work: Iterable[Iterable[str]] = ()) -> dict[str, set[str]]:
    """`{paper: every paper sharing one of `sets` (co-cited sets, each its paper ids) with it, itself included}`.
    `same_work`: disjoint groups of ids of one work (`aspire.data.acl.same_work_groups`), each read as one paper:
    its members are partners, and a set holding one member holds them all."""
    same_work = [list(ids) for ids in same_work]
    version = {pid: ids for ids in same_work for pid in ids}
    partners: dict[str, set[str]] = defaultdict(set)
    for paper_ids in [*({v for pid in ids for v in version.get(pid, [pid])} for ids in sets), *same_work]:
        for pid in paper_ids:
            partners[pid].update(paper_ids)
    return partners


def pairs_of(paper_ids: Iterable[str]) -> list[tuple[str, str]]:
    """Every unordered pair of a set, each as a sorted tuple."""
    return list(itertools.combinations(sorted(set(paper_ids)), 2))


def work_pairs(paper_ids: Iterable[str], work: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """`pairs_of(paper_ids)`, each paper written as its work (`work`: id -> the id standing for its work, `_work_of`;
    an id not in it is its own work), sorted: {P05-1018, C} and {J08-1001, C} give one pair, and two versions of
    one work a pair of that work with itself."""
    work = work or {}
    return [tuple(sorted((work.get(a, a), work.get(b, b)))) for a, b in pairs_of(paper_ids)]


def pair_components(sets: list[list[str]], work: dict[str, str] | None = None) -> list[int]:
    """Union-find over co-cited sets: sets sharing an unordered pair land in one component, one work under several
    ids read as one paper (`work_pairs`).

    Returns, for each set, the index of its component's root (the smallest set index in it).
    """
    parent = list(range(len(sets)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving
            i = parent[i]
        return i

    first_with_pair: dict[tuple[str, str], int] = {}
    for i, paper_ids in enumerate(sets):
        for pair in work_pairs(paper_ids, work):
            j = first_with_pair.setdefault(pair, i)
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)
    return [find(i) for i in range(len(sets))]


def split_groups(in_dir: str | Path, out_dir: str | Path, cfg: SplitConfig = SplitConfig()) -> dict:
    """Split co-cited sets into train and dev so that no unordered pair is in both.

    Sets sharing a pair (e.g. {A,B} and {A,B,C}) form one component (`pair_components`), one work under
    several ids (`aspire.data.acl.same_work_groups` over `abstracts.jsonl`, as `build_examples` reads it) read
    as one paper: {J95-2003, P05-1018} and {J08-1001, J95-2003} (P05-1018's journal version) share a pair. The
    components are shuffled with `cfg.seed` (those of the ids as written; one that versions join to others goes at
    the first one's turn) and, in that order, each one that fits goes to dev, until dev
    holds `round(dev_fraction * sets)` sets or no component is left (a component too big to fit is passed
    over, so dev can end with fewer); the rest go to train. Deterministic for a given input and seed.
    """
    if not 0.0 <= cfg.dev_fraction < 1.0:
        raise ValueError(f"split.dev_fraction must be in [0, 1), got {cfg.dev_fraction}")
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    set_ids, sets = [], []
    for _, group in _iter_groups(in_dir / "groups.jsonl"):
        set_ids.append(group["set_id"])
        sets.append(group["paper_ids"])
    work = _work_of(_read_papers(in_dir / "abstracts.jsonl"))
    roots = pair_components(sets, work)
    members: dict[int, list[int]] = defaultdict(list)
    for i, root in enumerate(roots):
        members[root].append(i)
    # the components of the pairs as written, roots in input (set id) order, then a seeded shuffle; one that a work's
    # versions join to others is placed whole at the first one's turn (so, without versions, the split they gave)
    components = sorted(set(pair_components(sets)))
    random.Random(cfg.seed).shuffle(components)
    target = round(cfg.dev_fraction * len(sets))
    in_dev: set[int] = set()
    placed: set[int] = set()
    for root in (roots[i] for i in components):
        if root in placed:
            continue
        placed.add(root)
        if len(in_dev) + len(members[root]) <= target:
            in_dev.update(members[root])
        if len(in_dev) == target:
            break
    assignment = {sid: ("dev" if i in in_dev else "train") for i, sid in enumerate(set_ids)}

    counts = {s: Counter(sets=0, contexts=0) for s in SPLITS}
    split_pairs: dict[str, set] = {s: set() for s in SPLITS}
    split_works: dict[str, set] = {s: set() for s in SPLITS}  # the pairs, a work's versions read as one paper
    begin_stage(out_dir, "split")
    writers = {s: AtomicJsonl(out_dir / f"groups.{s}.jsonl") for s in SPLITS}
    with writers["train"], writers["dev"]:
        for _, group in iter_jsonl(in_dir / "groups.jsonl"):
            split = assignment[group["set_id"]]
            writers[split].write(group)
            counts[split]["sets"] += 1
            counts[split]["contexts"] += len(group["context_ids"])
            split_pairs[split].update(pairs_of(group["paper_ids"]))
            split_works[split].update(work_pairs(group["paper_ids"], work))
    shared = split_works["train"] & split_works["dev"]
    if shared:  # pair_components guarantees this cannot happen; a guard against regressions
        raise AssertionError(f"split leaks {len(shared)} pair(s) into both train and dev, e.g. {sorted(shared)[:3]}")
    _copy_jsonl(in_dir / "abstracts.jsonl", out_dir / "abstracts.jsonl")
    report = {
        "stage": "split",
        "input": str(in_dir),
        "components": len(members),
        "largest_component_sets": max((len(m) for m in members.values()), default=0),
        **{s: {**counts[s], "pairs": len(split_pairs[s])} for s in SPLITS},
        "pairs_in_both": 0,
        "config": to_dict(cfg),
    }
    write_json(out_dir / REPORT, report)
    end_stage(out_dir)
    return report

# ---- stage 5: examples --------------------------------------------------------------------------
def _pick_negatives(pool: list[str], pool_set: frozenset[str], exclude: set[str], k: int,
                    rng: random.Random) -> list[str] | None:
    """`k` distinct papers from `pool` outside `exclude`, or None when fewer than `k` exist."""
    if len(pool_set) - len(exclude & pool_set) < k:
        return None
    picked: list[str] = []
    while len(picked) < k:
        candidate = pool[rng.randrange(len(pool))]
        if candidate not in exclude and candidate not in picked:
            picked.append(candidate)
    return picked


def build_examples(in_dir: str | Path, out_dir: str | Path, cfg: ExamplesConfig = ExamplesConfig()) -> dict:
    """One example per unordered co-cited pair of a split, with its contexts and negatives.

    The contexts of a pair are all contexts of the split whose co-cited set holds both papers.
    Negatives are drawn from the split's papers (`negatives_from="split"`) or all papers, never a
    paper co-cited with either paper of the pair in any set of either split (a paper cited in one
    sentence with the query is its positive in another example: as a negative it would be a false
    one, and both directions of a pair share its negatives; a paper in both splits can be a train
    paper's partner in a dev set, or the reverse, whichever the pool), with a generator seeded by
    `(seed, pair)`: the same pair gets the same negatives whatever the input order. One work under
    several ids (`aspire.data.acl.same_work_groups`: a shared normalised title or abstract key, such
    as P05-1018 and its journal version J08-1001) is read as one paper (`cocited_partners`): a
    negative is never a version of either paper of the pair, nor of a paper co-cited with one; such
    a version is only passed over when drawn, so the other pairs' draws stay as they were. A pair
    with too few candidates is dropped and counted. An abstract needs a unique non-empty string
    `paper_id` (`DataError` naming the line otherwise); its `title` and `abstract` (a string or a
    list of sentences) are read only to find the versions, and may be absent. `abstracts.jsonl` keeps
    every paper an example names: its pair, its negatives and the papers of its `set_ids` (training
    reads them as the anchor's members).
    """
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    abstracts = in_dir / "abstracts.jsonl"
    papers = _read_papers(abstracts)
    work = _work_of(papers)
    known = set(papers)
    all_papers = sorted(known)
    report: dict[str, Any] = {"stage": "examples", "input": str(in_dir), "config": to_dict(cfg)}
    named: set[str] = set()
    by_split: dict[str, tuple[dict[tuple[str, str], dict], set[str]]] = {}
    sets: list[list[str]] = []  # of both splits: a known partner is never a negative, whichever split knows it
    # pair (a work's versions read as one paper) -> (split, "FILE:LINE", the pair as written there) where first met
    pair_at: dict[tuple[str, str], tuple[str, str, tuple[str, str]]] = {}
    for split in SPLITS:  # both splits are read, and checked, before anything is written
        path = in_dir / f"groups.{split}.jsonl"
        pairs: dict[tuple[str, str], dict] = {}
        split_papers: set[str] = set()
        for lineno, group in _iter_groups(path):
            missing = [pid for pid in group["paper_ids"] if pid not in known]
            if missing:
                raise DataError(f"{path}:{lineno}: co-cited set {group['set_id']!r}: paper {missing[0]!r} has no "
                                f"abstract in {abstracts}")
            split_papers.update(group["paper_ids"])
            sets.append(group["paper_ids"])
            for pair, same in zip(pairs_of(group["paper_ids"]), work_pairs(group["paper_ids"], work)):
                first_split, first_at, first = pair_at.setdefault(same, (split, f"{path}:{lineno}", pair))
                if first_split != split:
                    raise DataError(f"{path}:{lineno}: the pair {pair[0]}|{pair[1]} is also in {first_at}"
                                    + (f" as {first[0]}|{first[1]} (one work under two ids)" if first != pair else "")
                                    + ": a pair in both train and dev leaks dev into training (`split` never "
                                    "writes one)")
                entry = pairs.setdefault(
                    pair, {"set_ids": [], "context_ids": [], "contexts": [], "contexts_clean": []}
                )
                entry["set_ids"].append(group["set_id"])
                for key in ("context_ids", "contexts", "contexts_clean"):
                    entry[key].extend(group[key])
        by_split[split] = pairs, split_papers
    # paper -> every paper of a set of either split with it, a work's versions read as one paper
    partners = cocited_partners(sets, same_work_groups(papers))
    begin_stage(out_dir, "examples")
    for split, (pairs, split_papers) in by_split.items():
        pool = sorted(split_papers) if cfg.negatives_from == "split" else all_papers
        pool_set = frozenset(pool)
        counts: Counter = Counter()
        n_contexts = 0  # of the examples written (a dropped pair's contexts are in no file)
        with AtomicJsonl(out_dir / f"examples.{split}.jsonl") as out:
            for (a, b) in sorted(pairs):
                entry = pairs[(a, b)]
                rng = random.Random(f"{cfg.seed}|{a}|{b}")
                negatives = _pick_negatives(pool, pool_set, partners[a] | partners[b], cfg.num_negatives, rng)
                if negatives is None:
                    counts["dropped_no_negative"] += 1
                    continue
                named.update((a, b, *negatives))  # and every paper of its sets: training keeps them out of its negatives
                named.update(pid for sid in entry["set_ids"] for pid in sid.split("|"))
                n_contexts += len(entry["context_ids"])
                out.write(
                    {
                        "example_id": f"{a}|{b}",
                        "split": split,
                        "query_id": a,
                        "positive_id": b,
                        "negative_ids": negatives,
                        "set_ids": entry["set_ids"],
                        "context_ids": entry["context_ids"],
                        "contexts": entry["contexts"],
                        "contexts_clean": entry["contexts_clean"],
                    }
                )
            counts["examples"] = out.count
        counts["contexts_per_example_mean"] = round(n_contexts / max(counts["examples"], 1), 3)
        report[split] = {**counts, "papers": len(split_papers), "negative_pool": len(pool)}
    report["papers_named"] = _copy_jsonl(in_dir / "abstracts.jsonl", out_dir / "abstracts.jsonl", lambda o: o["paper_id"] in named)
    for split in SPLITS:  # the co-cited sets travel with the examples (CoSentBert trains on them)
        _copy_jsonl(in_dir / f"groups.{split}.jsonl", out_dir / f"groups.{split}.jsonl")
    write_json(out_dir / REPORT, report)
    end_stage(out_dir)
    return report

