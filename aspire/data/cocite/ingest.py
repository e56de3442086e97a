"""Stages 1-2 of the co-citation pipeline: ingest co-citation records (input A), then filter.

Formats and the order of the filters: `aspire.data.cocite`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

from aspire.config import to_dict
from aspire.data.acl import removed_benchmark_entry, take_out
from aspire.data.cocite.config import REPORT, FilterConfig, IngestConfig
from aspire.data.cocite.stages import begin_stage, end_stage
from aspire.data.cocite.text import clean_citations, get_tokenizer
from aspire.data.guards import SURROGATE, invisible_text_reason
from aspire.data.papers import paper_id_problem
from aspire.io import AtomicJsonl, DataError, iter_checked_jsonl, iter_jsonl, require, type_name, unique_id, write_json


def _describe(value: Any) -> str:
    return "an empty string" if isinstance(value, str) else type_name(value)


def _text_fields_problem(title: Any, abstract: Any) -> str | None:
    """What is wrong with a paper's title (a string) and abstract (a list of sentences each with a visible
    character, as a papers file needs), or None. An empty abstract is the filter's to count (`too_few_sentences`)."""
    if not isinstance(title, str):
        return f"title must be a string, got {type_name(title)}"
    if SURROGATE.search(title):
        return "title " + invisible_text_reason(title)
    if not isinstance(abstract, list):
        return f"abstract must be a list of sentences, got {type_name(abstract)}"
    for j, sentence in enumerate(abstract):
        if not isinstance(sentence, str):
            return f"abstract[{j}] must be a string, got {type_name(sentence)}"
        if not sentence.strip():
            return f"abstract[{j}] is empty"
        reason = invisible_text_reason(sentence)
        if reason:
            return f"abstract[{j}] {reason}"
    return None


def _cited_id_problem(pid: str) -> str | None:
    """What keeps the string `pid` from being a cited paper's id (a papers-file id that a co-cited set's id, the
    ids joined by '|', can hold), or None."""
    if "|" in pid:
        return f"paper_id {pid!r} holds '|', which joins the ids of a co-cited set's id"
    return paper_id_problem(pid)


def _paper_record(paper_id: str, title: str, abstract: list[str]) -> dict:
    return {"paper_id": paper_id, "title": title, "abstract": abstract}


# ---- stage 1a: ingest records -------------------------------------------------------------------
def _check_record(rec: dict, path: str | Path, lineno: int) -> None:
    """Raise `DataError("FILE:LINE: ...")` if a co-citation record lacks a key, has a wrongly typed field, holds
    text that is not Unicode (a lone surrogate), has a citing paper id that is no paper id (`paper_id_problem`:
    whitespace in it, as for a cited id, so ' P1' is never taken for another paper than 'P1'), or names a cited paper
    the later stages would refuse: an id with '|' or whitespace, an abstract sentence with no visible character."""
    require(rec, ("citing_paper_id", "context", "cited"), path, lineno)
    def bad(message: str) -> DataError:
        return DataError(f"{path}:{lineno}: {message}")

    if not isinstance(rec["citing_paper_id"], str) or not rec["citing_paper_id"].strip():
        raise bad(f"citing_paper_id must be a non-empty string, got {_describe(rec['citing_paper_id'])}")
    if not isinstance(rec["context"], str):
        raise bad(f"context must be a string, got {type_name(rec['context'])}")
    if not isinstance(rec.get("source", ""), str):
        raise bad(f"source must be a string, got {type_name(rec['source'])}")
    if not isinstance(rec.get("all_links_confirmed", False), bool):  # bool("false") would be True
        raise bad(f"all_links_confirmed must be true or false, got {type_name(rec['all_links_confirmed'])} "
                  f"{rec['all_links_confirmed']!r:.40}")
    for key in ("citing_paper_id", "context", "source"):
        if SURROGATE.search(rec.get(key, "")):  # not Unicode text: no output file could hold it
            raise bad(f"{key} " + invisible_text_reason(rec[key]))
    problem = paper_id_problem(rec["citing_paper_id"])  # a cited id's rule: ' P1' citing 'P1' is no self-citation
    if problem:
        raise bad("citing_" + problem)
    if not isinstance(rec["cited"], list):
        raise bad(f"cited must be a list of papers, got {type_name(rec['cited'])}")
    for i, cited in enumerate(rec["cited"]):
        if not isinstance(cited, dict):
            raise bad(f"cited[{i}] is not an object")
        require(cited, ("paper_id", "title", "abstract"), path, lineno, f"cited[{i}]")
        if not isinstance(cited["paper_id"], str) or not cited["paper_id"].strip():
            raise bad(f"cited[{i}].paper_id must be a non-empty string, got {_describe(cited['paper_id'])}")
        problem = _cited_id_problem(cited["paper_id"]) or _text_fields_problem(cited["title"], cited["abstract"])
        if problem:
            raise bad(f"cited[{i}].{problem}")


def ingest_records(records_path: str | Path, out_dir: str | Path, cfg: IngestConfig = IngestConfig(),
                   held_out: Collection[str] | None = None, held_out_papers: Any = None) -> dict:
    """Input A: co-citation records -> `contexts.jsonl` + `abstracts.jsonl` + `report.json`.

    Each record becomes one context citing its distinct cited paper ids, less the citing paper itself (a
    paper citing itself is no co-citation, as in input B: counted, `self_citations_removed`); records citing
    fewer than two other distinct papers are counted and dropped. Each cited paper's first-seen title and
    abstract go to `abstracts.jsonl` (a later record giving a different abstract is counted).
    With `exclude_benchmark_test`, a record whose sentence (stripped) is in `held_out` (stripped too; a string
    rather than a collection of sentences is a TypeError) — the context2doc
    test split's sentences, which the command layer reads from `aspire.benchmarks.context2doc` and passes
    here — is dropped and counted (`dropped_benchmark_test`), so training never sees a test query.
    `exclude_benchmark_test` without `held_out` is an error, never a silent no-op.

    With `exclude_benchmark_papers`, a cited paper that `held_out_papers` (an `aspire.data.acl.HeldOut`: the
    command layer passes `aspire.benchmarks.heldout.cited_benchmark_papers`, CSFCube's and the reviewer set's
    papers) matches by title, paper id, abstract key or containment, in any record's version of it, is taken out
    of every record citing it, and its abstract is never written. Only that paper goes: the record keeps its
    other cited papers, whose co-citation is sound, and is dropped when fewer than two are left
    (`dropped_benchmark_paper`; a record citing fewer than two before is `dropped_fewer_than_2_cited`). Counted:
    `records_citing_benchmark` (records that lost a paper), `benchmark_citations_removed`, and
    `removed_benchmark_by` (distinct papers taken out, by the first rule of `REMOVED_BY` that matched; each rule
    `held_out_papers` runs is listed, zero included: `aspire.data.acl.removed_benchmark_entry`).
    `exclude_benchmark_papers` without `held_out_papers` removes nothing, with a warning and
    `removed_benchmark_by: null` in the report; the commands (`aspire.cli.data`) always pass them, and a missing
    benchmark folder is their error.
    """
    records_path, out_dir = Path(records_path), Path(out_dir)
    bad: list[str] = []
    counts: Counter = Counter()
    held_out, exclude_papers = cfg.held_out_inputs(held_out, held_out_papers, records_path)
    # every record first: a paper is held out everywhere when any record's version of it is a benchmark paper's
    records = list(iter_checked_jsonl(records_path, _check_record, cfg.on_error, bad))
    benchmark = _benchmark_cited(records, held_out_papers) if exclude_papers else {}
    removed: set[str] = set()
    seen_abstracts: dict[str, str] = {}
    begin_stage(out_dir, "ingest")
    with AtomicJsonl(out_dir / "contexts.jsonl") as contexts, AtomicJsonl(out_dir / "abstracts.jsonl") as abstracts:
        for lineno, rec in records:
            counts["records"] += 1
            if rec["context"].strip() in held_out:
                counts["dropped_benchmark_test"] += 1
                continue
            distinct = {c["paper_id"] for c in rec["cited"]}
            if rec["citing_paper_id"] in distinct:  # a paper citing itself is no co-citation (as in input B)
                counts["self_citations_removed"] += 1
            cited_ids = sorted(distinct - {rec["citing_paper_id"]})
            cited_ids, dropped = take_out(cited_ids, benchmark, counts, removed)
            if len(cited_ids) < 2:
                counts["dropped_benchmark_paper" if dropped and len(cited_ids) + dropped >= 2
                       else "dropped_fewer_than_2_cited"] += 1
                continue
            for c in rec["cited"]:
                if c["paper_id"] not in cited_ids:
                    continue
                digest = hashlib.sha1(json.dumps([c["title"], c["abstract"]]).encode()).hexdigest()
                if c["paper_id"] not in seen_abstracts:
                    seen_abstracts[c["paper_id"]] = digest
                    abstracts.write(_paper_record(c["paper_id"], c["title"], list(c["abstract"])))
                elif seen_abstracts[c["paper_id"]] != digest:
                    counts["conflicting_abstracts_ignored"] += 1
            contexts.write(
                {
                    "context_id": f"{rec['citing_paper_id']}#L{lineno}",
                    "citing_paper_id": rec["citing_paper_id"],
                    "text": rec["context"],
                    "text_clean": clean_citations(rec["context"], cfg.placeholder),
                    "cited_ids": cited_ids,
                    "source": rec.get("source", ""),
                    "links_confirmed": bool(rec.get("all_links_confirmed", False)),
                }
            )
        counts["contexts"] = contexts.count
        counts["papers"] = abstracts.count
    report = {"stage": "ingest", "input": str(records_path), "counts": dict(counts),
              "bad_lines": len(bad), "bad_line_messages": bad[:20], "config": to_dict(cfg)}
    report.update(removed_benchmark_entry(cfg.exclude_benchmark_papers, held_out_papers,
                                          [benchmark[pid] for pid in removed]))
    write_json(out_dir / REPORT, report)
    end_stage(out_dir)
    return report


def _benchmark_cited(records: list[tuple[int, dict]], held_out_papers: Any) -> dict[str, str]:
    """{paper id: the first rule of `REMOVED_BY` that matched} of the cited papers `held_out_papers` (a `HeldOut`)
    matches in any record's version of them (title and abstract); each distinct version is tried once."""
    found: dict[str, str] = {}
    tried: set[tuple[str, str]] = set()
    for _, rec in records:
        for c in rec["cited"]:
            version = (c["paper_id"], json.dumps([c["title"], c["abstract"]]))
            if c["paper_id"] in found or version in tried:
                continue
            tried.add(version)
            why = held_out_papers.reason(c["paper_id"], c["title"], c["abstract"])
            if why is not None:
                found[c["paper_id"]] = why
    return found


# ---- stage 2: filter ----------------------------------------------------------------------------
def _abstract_failure(sentences: list[str], cfg: FilterConfig, tokenize) -> str | None:
    """The first abstract filter `sentences` fails, or None when it passes. An abstract without a sentence always
    fails (`too_few_sentences`), whatever `min_abstract_sentences` (0 or None included): no papers-file reader takes
    it, so training and `align` would refuse the examples' abstracts."""
    if not sentences or (cfg.min_abstract_sentences is not None and len(sentences) < cfg.min_abstract_sentences):
        return "too_few_sentences"
    if cfg.max_abstract_sentences is not None and len(sentences) > cfg.max_abstract_sentences:
        return "too_many_sentences"
    if cfg.max_sentence_tokens is not None and any(len(tokenize(s)) > cfg.max_sentence_tokens for s in sentences):
        return "sentence_too_long"
    return None


def _check_filter_paper(obj: dict, path: Path, lineno: int, first_line: dict[str, int]) -> None:
    """`DataError("FILE:LINE: ...")` unless `obj` is a paper of an ingest output: a `paper_id` string that a cited
    paper may have (`_cited_id_problem`), met once in the file (`first_line`: id -> its line), and an `abstract` list
    of sentences with a visible character (a string would be counted a character a sentence)."""
    require(obj, ("paper_id", "abstract"), path, lineno)
    where, pid = f"{path}:{lineno}", obj["paper_id"]
    if not isinstance(pid, str) or not pid.strip():
        raise DataError(f"{where}: paper_id must be a non-empty string, got {_describe(pid)} {pid!r:.40}")
    problem = _cited_id_problem(pid) or _text_fields_problem(obj.get("title", ""), obj["abstract"])
    if problem:
        raise DataError(f"{where}: paper {pid!r}: {problem}")
    if pid in first_line:
        raise DataError(f"{where}: paper {pid!r} repeats the paper of line {first_line[pid]}")
    first_line[pid] = lineno


def _check_filter_context(ctx: dict, path: Path, lineno: int, seen: dict[str, str]) -> None:
    """`DataError("FILE:LINE: context ID: ...")` unless `ctx` is a context of an ingest output: a `context_id`
    string that `seen` (id -> "FILE:LINE" where met) does not hold yet, `text` and `text_clean` strings (these, the id,
    `citing_paper_id` and `source` Unicode text: no lone surrogate, which no output file could hold), `cited_ids`
    a list of distinct paper id strings (a string "A|B" would be read a character an id; ["A", "A"] would pass
    `min_cited` as two papers), `links_confirmed`, when given, true or false."""
    require(ctx, ("context_id", "text", "text_clean", "cited_ids"), path, lineno)
    unique_id(ctx["context_id"], "context_id", f"{path}:{lineno}", seen)
    where = f"{path}:{lineno}: context {ctx['context_id']!r:.60}"
    for key in ("text", "text_clean"):
        if not isinstance(ctx[key], str):
            raise DataError(f"{where}: {key} must be a string, got {type_name(ctx[key])}")
    for key in ("context_id", "text", "text_clean", "citing_paper_id", "source"):  # as ingest refuses them
        if isinstance(ctx.get(key), str) and SURROGATE.search(ctx[key]):  # no output file could hold it
            raise DataError(f"{where}: {key} " + invisible_text_reason(ctx[key]))
    ids = ctx["cited_ids"]
    if not isinstance(ids, list) or not all(isinstance(p, str) and p for p in ids):
        raise DataError(f"{where}: cited_ids must be a list of non-empty paper id strings, got {ids!r:.80}")
    if len(set(ids)) != len(ids):
        raise DataError(f"{where}: cited_ids names a paper twice: {ids!r:.80}")
    if not isinstance(ctx.get("links_confirmed", False), bool):  # bool("false") would be True
        raise DataError(f"{where}: links_confirmed must be true or false, got {type_name(ctx['links_confirmed'])} "
                        f"{ctx['links_confirmed']!r:.40}")


def filter_contexts(in_dir: str | Path, out_dir: str | Path, cfg: FilterConfig = FilterConfig()) -> dict:
    """Apply the paper's filters, in this order, counting what each removes.

    Abstracts first: a paper passes with `min..max_abstract_sentences` sentences, none over
    `max_sentence_tokens` tokens. Then each context, in order: `confirmed_only`; `max_cited`
    (on the ingested set); `context_tokens` (`min..max_context_tokens` on `count_on`);
    `bad_abstract` (drop the failing papers or the context); `min_cited` (>= 2 papers left);
    `dedup` (the first of repeated contexts is kept). Writes the kept contexts and the abstracts of
    the papers they cite. A paper or context that is not as ingest writes it (a folder built by hand) raises
    `DataError` naming the file, the line and the record (`_check_filter_paper`, `_check_filter_context`; a context
    citing a paper that `abstracts.jsonl` does not hold, which ingest never writes).
    """
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    tokenize = get_tokenizer(cfg.tokenizer)
    paper_counts: Counter = Counter()
    good_papers: set[str] = set()
    first_line: dict[str, int] = {}
    for lineno, obj in iter_jsonl(in_dir / "abstracts.jsonl"):
        _check_filter_paper(obj, in_dir / "abstracts.jsonl", lineno, first_line)
        paper_counts["papers_in"] += 1
        failure = _abstract_failure(obj["abstract"], cfg, tokenize)
        if failure is None:
            good_papers.add(obj["paper_id"])
        else:
            paper_counts[f"removed_{failure}"] += 1
    paper_counts["papers_passing"] = len(good_papers)

    order = ["confirmed_only", "max_cited", "context_tokens", "bad_abstract", "min_cited", "dedup"]
    removed = dict.fromkeys(order, 0)
    trimmed = 0  # contexts that lost papers to `bad_abstract="drop_paper"` (not removed by it)
    seen: set[bytes] = set()
    cited_papers: set[str] = set()
    context_at: dict[str, str] = {}
    n_in = 0
    begin_stage(out_dir, "filter")
    with AtomicJsonl(out_dir / "contexts.jsonl") as out:
        for lineno, ctx in iter_jsonl(in_dir / "contexts.jsonl"):
            _check_filter_context(ctx, in_dir / "contexts.jsonl", lineno, context_at)
            missing = [p for p in ctx["cited_ids"] if p not in first_line]
            if missing:  # ingest writes every cited paper's abstract: never counted as a failing abstract
                raise DataError(f"{in_dir / 'contexts.jsonl'}:{lineno}: context {ctx['context_id']!r:.60}: cited "
                                f"paper(s) {missing!r:.80} have no abstract in {in_dir / 'abstracts.jsonl'}")
            n_in += 1
            if cfg.confirmed_only and not ctx.get("links_confirmed", False):
                removed["confirmed_only"] += 1
                continue
            if cfg.max_cited is not None and len(ctx["cited_ids"]) > cfg.max_cited:
                removed["max_cited"] += 1
                continue
            n_tokens = len(tokenize(ctx[cfg.count_on]))
            if (cfg.min_context_tokens is not None and n_tokens < cfg.min_context_tokens) or (
                cfg.max_context_tokens is not None and n_tokens > cfg.max_context_tokens
            ):
                removed["context_tokens"] += 1
                continue
            kept_ids = [p for p in ctx["cited_ids"] if p in good_papers]
            if len(kept_ids) < len(ctx["cited_ids"]):
                if cfg.bad_abstract == "drop_context":
                    removed["bad_abstract"] += 1
                    continue
                ctx = {**ctx, "cited_ids": kept_ids}
                trimmed += 1
            if len(kept_ids) < 2:
                removed["min_cited"] += 1
                continue
            if cfg.dedup != "none":
                key = " ".join(ctx["text"].lower().split())
                if cfg.dedup == "text_and_set":  # the set, whatever order a hand-built context lists it in
                    key += "\t" + "|".join(sorted(kept_ids))
                digest = hashlib.sha1(key.encode("utf-8")).digest()
                if digest in seen:
                    removed["dedup"] += 1
                    continue
                seen.add(digest)
            cited_papers.update(kept_ids)
            out.write(ctx)
        n_out = out.count
    with AtomicJsonl(out_dir / "abstracts.jsonl") as abstracts:
        for _, obj in iter_jsonl(in_dir / "abstracts.jsonl"):
            if obj["paper_id"] in cited_papers:
                abstracts.write(obj)
    report = {
        "stage": "filter",
        "input": str(in_dir),
        "papers": dict(paper_counts),
        "contexts_in": n_in,
        "removed_in_order": [{"filter": name, "removed": removed[name]} for name in order],
        "contexts_trimmed_by_bad_abstract": trimmed,
        "contexts_out": n_out,
        "papers_out": len(cited_papers),
        "config": to_dict(cfg),
    }
    write_json(out_dir / REPORT, report)
    end_stage(out_dir)
    return report

