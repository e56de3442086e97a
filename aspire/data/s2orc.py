"""Input B: mine co-citation sentences from S2ORC-style full text.

Full text (`pdf_parses.jsonl`, S2ORC's pdf_parse format), one citing paper a line:
    {"paper_id": str,
     "body_text": [{"text": str, "section": str | null,
                    "cite_spans": [{"start": int, "end": int, "text": str, "ref_id": str | null}]}],
     "bib_entries": {ref_id: {"title": str, "link": paper_id | null}}}
Abstracts table (`abstracts.jsonl`), one paper a line: {"paper_id", "title", "abstract"} where
`abstract` is a list of sentences (each with a visible character, as a papers file needs) or one
string (split with the configured splitter; blank reads as no abstract, and one with no visible character is
refused), or null (no abstract); `title` is optional (a string; null reads as ""). No text may hold a lone
surrogate. A cited paper's id may not hold '|', which joins the ids of a co-cited set's id (as input A refuses it).

Ids (`paper_id`, a bib entry's `link`) are strings or integers, read as strings. A cite span's `text`, when
given, is the paragraph's characters [start:end] (checked: offsets that point elsewhere would give the citation
to another sentence). A record that breaks these formats (a wrong type, a citation span outside its paragraph
or whose `text` is not its characters, a paper id seen on an earlier line) raises `DataError("FILE:LINE: ...")`
naming what is wrong, or with `on_error="skip"` is skipped and counted in the report (`bad_lines`).

Each paragraph is split into sentences (character spans); a sentence boundary that falls inside
a citation span is a splitter mistake ("Lin et al. 2002") and the two sentences are merged. Each
citation span belongs to the sentence holding it. A sentence is kept when it cites at least two
distinct linked papers (bib `link` not null) that have an abstract; every other sentence is
counted by why it was dropped. A paper citing itself is no co-citation: its own id is taken out of the
sentence first (counted, `self_citations_removed`, as input A counts it). A cite span whose `ref_id` names
no bib entry links no paper; it is counted (`cite_spans_without_bib_entry`). Output: `contexts.jsonl` + `abstracts.jsonl` + `report.json` in
the formats of `aspire.data.cocite`, so the `filter` stage follows either input. As ingest does, the stage writes
`STAGE_MARKER` before its first file and removes it after its report (`aspire.data.cocite.stages.begin_stage`).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

from aspire.config import to_dict
from aspire.data.acl import removed_benchmark_entry, take_out
from aspire.data.cocite.config import REPORT, IngestConfig
from aspire.data.cocite.stages import begin_stage, end_stage
from aspire.data.cocite.text import finish_marks, free_mark
from aspire.data.guards import SURROGATE, invisible_text_reason
from aspire.data.papers import paper_id_problem
from aspire.io import AtomicJsonl, DataError, iter_checked_jsonl, iter_jsonl, require, type_name, write_json


class RegexSentenceSplitter:
    """A simple stand-in splitter: a sentence ends at . ! or ? followed by space and a capital.

    Kept apart and chosen only by name (`splitter: regex`); `aspire.data.sentences` is the real one.
    """

    name = "regex"
    _END = re.compile(r"[.!?]['\")\]]*\s+(?=[\"'(\[]?[A-Z0-9])")

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of the sentences of `text`, stripped, in order."""
        cuts = [0] + [m.end() for m in self._END.finditer(text)] + [len(text)]
        out = []
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            piece = text[lo:hi]
            if piece.strip():
                start = lo + len(piece) - len(piece.lstrip())
                out.append((start, lo + len(piece.rstrip())))
        return out


_WORD = re.compile(r"\w+")


def _words(text: str) -> str:
    """`text` as its lower-cased `\\w+` words (after Unicode NFC), each between single spaces (" a b c "), so that
    one text's words are a run of another's exactly when the first is found in the second."""
    return " " + " ".join(_WORD.findall(unicodedata.normalize("NFC", text).lower())) + " "


class HeldOutSentences:
    """The benchmark's test sentences that a sentence of the full text must not overlap (`overlaps`): be one
    (stripped), be part of one or hold one, compared as runs of lower-cased words (`_words`: spacing, punctuation
    and case aside). The full text's splitter cuts where it will, not where the benchmark's record did: pysbd cuts
    "... from other resources? the LinGO ERG lexicon (Copestake and Flickinger, 2000) contains ..." in two, and the
    second piece, citing the test query's papers, was no test sentence to an exact match."""

    def __init__(self, sentences: Collection[str]) -> None:
        self.exact = {s.strip() for s in sentences} - {""}  # a blank one is no sentence
        self.words = sorted({w for w in map(_words, self.exact) if w.strip()})
        self.joined = "\n".join(self.words)  # a sentence's words never hold "\n": no run across two sentences

    def overlaps(self, sentence: str) -> bool:
        if sentence.strip() in self.exact:
            return True
        words = _words(sentence)
        if not self.words or not words.strip():
            return False
        return words in self.joined or any(test in words for test in self.words)


def get_span_splitter(name: str):
    """An object with `.spans(text) -> [(start, end)]`: `regex`, or a name in `aspire.data.sentences`; an unknown
    name raises ValueError listing the valid ones, `regex` included."""
    if name == "regex":
        return RegexSentenceSplitter()
    from aspire.data.sentences import SPLITTERS, get_splitter

    if name not in SPLITTERS:  # get_splitter's own message would leave `regex` out of the valid names
        raise ValueError(f"unknown sentence splitter {name!r}; valid: {sorted([*SPLITTERS, 'regex'])}")
    return get_splitter(name)


def merge_spans_across_citations(spans: list[tuple[int, int]], cites: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], int]:
    """Merge neighbouring sentence spans whenever a citation span straddles their boundary.

    Returns the merged spans and how many merges were made.
    """
    merged = [list(s) for s in spans]
    n_merges = 0
    for c_start, c_end in sorted(cites):
        i = 0
        while i < len(merged) - 1:
            if merged[i][0] <= c_start < merged[i][1] < c_end:
                merged[i][1] = merged[i + 1][1]
                del merged[i + 1]
                n_merges += 1
                continue
            i += 1
    return [tuple(s) for s in merged], n_merges


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or repeated (start, end) spans merged, in order: each is replaced by one mark, from the last, so
    two spans over the same characters (a citation listed twice) would cut the text between their ends."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a < out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _id(value: Any, what: str, path: Path, lineno: int) -> str | None:
    """A paper id (string or integer) as a string; None stays None. Anything else raises `DataError`."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise DataError(f"{path}:{lineno}: {what} must be a string or an integer, got {type_name(value)}")


def _paper_id(obj: dict, path: Path, lineno: int, first_line: dict[str, int]) -> str:
    """The record's `paper_id` (a string or an integer that `paper_id_problem` accepts), not seen on an earlier
    line."""
    pid = _id(obj["paper_id"], "paper_id", path, lineno)
    if pid is None:
        raise DataError(f"{path}:{lineno}: paper_id must be a non-empty string, got None")
    problem = paper_id_problem(pid)
    if problem:
        raise DataError(f"{path}:{lineno}: {problem}")
    if pid in first_line:
        raise DataError(f"{path}:{lineno}: duplicate paper_id {pid!r}, first seen on line {first_line[pid]}")
    return pid


def _check_abstract(obj: dict, path: Path, lineno: int, first_line: dict[str, int]) -> None:
    require(obj, ("paper_id", "abstract"), path, lineno)
    pid = _paper_id(obj, path, lineno, first_line)
    if "|" in pid:  # a co-cited set's id joins its paper ids by '|': the group stage would refuse it stages later
        raise DataError(f"{path}:{lineno}: paper_id {pid!r} holds '|', which joins the ids of a co-cited set's id")
    abstract = obj["abstract"]
    if isinstance(abstract, list):
        for j, sentence in enumerate(abstract):
            if not isinstance(sentence, str):
                raise DataError(f"{path}:{lineno}: paper {pid!r}: abstract[{j}] must be a string, "
                                f"got {type_name(sentence)}")
            problem = "is empty" if not sentence.strip() else invisible_text_reason(sentence)
            if problem:  # as input A refuses it: else the papers reader refuses the written abstracts stages later
                raise DataError(f"{path}:{lineno}: paper {pid!r}: abstract[{j}] {problem}")
    elif isinstance(abstract, str):
        # blank is no abstract; text with no visible character would be split into a sentence the papers reader
        # refuses stages later (the splitters keep such a piece whole)
        if SURROGATE.search(abstract) or (abstract.strip() and invisible_text_reason(abstract)):
            raise DataError(f"{path}:{lineno}: paper {pid!r}: abstract {invisible_text_reason(abstract)}")
    elif abstract is not None:
        raise DataError(f"{path}:{lineno}: paper {pid!r}: abstract must be a list of sentences, a string or "
                        f"null, got {type_name(abstract)}")
    title = obj.get("title")
    if not isinstance(title, (str, type(None))):
        raise DataError(f"{path}:{lineno}: paper {pid!r}: title must be a string, got {type_name(obj['title'])}")
    if title is not None and SURROGATE.search(title):
        raise DataError(f"{path}:{lineno}: paper {pid!r}: title {invisible_text_reason(title)}")
    first_line[pid] = lineno


def _abstract_ids(path: Path, cfg: IngestConfig, bad: list[str], held_out_papers: Any = None
                  ) -> tuple[set[str], dict[str, int], dict[str, str]]:
    """The papers with a non-empty abstract, the line each accepted paper id was read from, and {paper id: the
    first rule of `REMOVED_BY` that matched} of the papers with an abstract that `held_out_papers` (a `HeldOut`, or
    None: no paper) matches by their id, title and abstract."""
    ids, first_line, benchmark = set(), {}, {}
    for _, obj in iter_checked_jsonl(path, lambda o, p, n: _check_abstract(o, p, n, first_line), cfg.on_error, bad):
        abstract = obj["abstract"]
        if (isinstance(abstract, str) and abstract.strip()) or (isinstance(abstract, list) and abstract):
            pid = str(obj["paper_id"])
            ids.add(pid)
            why = None if held_out_papers is None else held_out_papers.reason(pid, obj.get("title") or "", abstract)
            if why is not None:
                benchmark[pid] = why
    return ids, first_line, benchmark


def mine_s2orc(fulltext_path: str | Path, abstracts_path: str | Path, out_dir: str | Path,
               cfg: IngestConfig = IngestConfig(), held_out: Collection[str] | None = None,
               held_out_papers: Any = None) -> dict:
    """Input B -> `contexts.jsonl` + `abstracts.jsonl` + `report.json` (counts of what was dropped and why).

    With `exclude_benchmark_test`, a co-citation sentence that overlaps a sentence of `held_out` — the context2doc
    test split's sentences, which the command layer passes here as it does to `ingest_records` — is dropped and
    counted (`dropped_benchmark_test`): one that is part of a test sentence or holds one, compared as lower-cased
    words (`HeldOutSentences`), since the splitter cuts a paragraph where it will, not where the benchmark's record
    did (an exact match let 26 pieces of the real test sentences through, their records written as full text).
    `exclude_benchmark_test` without `held_out` is an error, never a silent no-op.

    With `exclude_benchmark_papers`, a cited paper that `held_out_papers` (an `aspire.data.acl.HeldOut`: the
    command layer passes `aspire.benchmarks.heldout.cited_benchmark_papers`, CSFCube's and the reviewer set's
    papers, as it does to `ingest_records`) matches by paper id, title, abstract key or containment, read from its
    line of the abstracts table, is taken out of every sentence citing it, and its abstract is never written.
    The sentence keeps its other papers and is dropped when fewer than two are left (`dropped_benchmark_paper`).
    Counted as input A counts them (a record there is a co-citation sentence here): `records_citing_benchmark`
    (sentences that lost a paper), `benchmark_citations_removed`, and `removed_benchmark_by` (distinct papers
    taken out, by the first rule of `REMOVED_BY` that matched; each rule `held_out_papers` runs is listed, zero
    included: `aspire.data.acl.removed_benchmark_entry`). `exclude_benchmark_papers` without
    `held_out_papers` removes nothing, with a warning and `removed_benchmark_by: null` in the report.
    """
    fulltext_path, abstracts_path, out_dir = Path(fulltext_path), Path(abstracts_path), Path(out_dir)
    held_out, exclude_papers = cfg.held_out_inputs(held_out, held_out_papers, fulltext_path)
    held_out_sentences = HeldOutSentences(held_out)
    splitter = get_span_splitter(cfg.splitter)
    bad: list[str] = []
    with_abstract, abstract_line, benchmark = _abstract_ids(abstracts_path, cfg, bad,
                                                            held_out_papers if exclude_papers else None)
    removed: set[str] = set()
    counts: Counter = Counter()
    cited_kept: set[str] = set()
    citing_line: dict[str, int] = {}
    begin_stage(out_dir, "ingest")  # the abstracts table is read and checked; the full text is checked as it is read
    with AtomicJsonl(out_dir / "contexts.jsonl") as out:
        for _, paper in iter_checked_jsonl(fulltext_path, lambda o, p, n: _check_paper(o, p, n, citing_line),
                                           cfg.on_error, bad):
            counts["papers"] += 1
            paper_id = str(paper["paper_id"])
            bib = {ref: None if entry.get("link") is None else str(entry["link"])  # ref_id -> linked paper id
                   for ref, entry in paper["bib_entries"].items()}
            for p_idx, para in enumerate(paper["body_text"]):
                counts["paragraphs"] += 1
                text, cites = para["text"], para.get("cite_spans", [])
                spans, merges = merge_spans_across_citations(splitter.spans(text), [(c["start"], c["end"]) for c in cites])
                counts["sentence_merges_at_citations"] += merges
                counts["sentences"] += len(spans)
                starts = [s for s, _ in spans]
                per_sentence: list[list[dict]] = [[] for _ in spans]
                for cite in cites:
                    counts["cite_spans"] += 1
                    if cite.get("ref_id") is not None and cite["ref_id"] not in bib:
                        counts["cite_spans_without_bib_entry"] += 1  # links no paper, as a null ref_id does
                    i = bisect.bisect_right(starts, cite["start"]) - 1
                    if i < 0 or not spans[i][0] <= cite["start"] < spans[i][1]:
                        counts["cite_spans_outside_sentences"] += 1
                        continue
                    per_sentence[i].append(cite)
                for s_idx, ((s_start, s_end), sent_cites) in enumerate(zip(spans, per_sentence)):
                    if not sent_cites:
                        counts["sentences_without_citations"] += 1
                        continue
                    linked = {bib.get(c.get("ref_id")) for c in sent_cites} - {None}
                    if paper_id in linked:  # a paper citing itself is no co-citation (counted as input A counts it)
                        linked.discard(paper_id)
                        counts["self_citations_removed"] += 1
                    if len(linked) < 2:
                        counts["dropped_fewer_than_2_linked"] += 1
                        continue
                    kept = sorted(linked & with_abstract)
                    if len(kept) < 2:
                        counts["dropped_fewer_than_2_with_abstract"] += 1
                        continue
                    raw = text[s_start:s_end]
                    if held_out_sentences.overlaps(raw):
                        counts["dropped_benchmark_test"] += 1
                        continue
                    kept, dropped = take_out(kept, benchmark, counts, removed)
                    if dropped and len(kept) < 2:
                        counts["dropped_benchmark_paper"] += 1
                        continue
                    marked, mark = raw, free_mark(raw)  # never a character of the text (a NUL of its own)
                    for a, b in reversed(_union([(c["start"] - s_start, min(c["end"], s_end) - s_start)
                                                 for c in sent_cites])):
                        marked = marked[:a] + mark + marked[b:]
                    cited_kept.update(kept)
                    out.write(
                        {
                            "context_id": f"{paper_id}#p{p_idx}s{s_idx}",
                            "citing_paper_id": paper_id,
                            "text": raw,
                            "text_clean": finish_marks(marked, cfg.placeholder, mark),
                            "cited_ids": kept,
                            "source": "s2orc:" + str(para.get("section") or ""),
                            "links_confirmed": True,
                        }
                    )
        counts["contexts"] = out.count
    with AtomicJsonl(out_dir / "abstracts.jsonl") as abstracts:
        for lineno, obj in iter_jsonl(abstracts_path, cfg.on_error, []):
            pid = obj.get("paper_id")
            pid = str(pid) if isinstance(pid, (str, int)) and not isinstance(pid, bool) else None
            if pid not in cited_kept or abstract_line[pid] != lineno:  # only the line the first pass accepted
                continue
            abstract = obj["abstract"]
            sentences = [abstract[a:b] for a, b in splitter.spans(abstract)] if isinstance(abstract, str) else list(abstract)
            abstracts.write({"paper_id": pid, "title": obj.get("title") or "", "abstract": sentences})
        counts["papers_cited"] = abstracts.count
    report = {"stage": "ingest", "input": [str(fulltext_path), str(abstracts_path)], "counts": dict(counts),
              "papers_with_abstract": len(with_abstract), "bad_lines": len(bad), "bad_line_messages": bad[:20],
              "config": to_dict(cfg)}
    report.update(removed_benchmark_entry(cfg.exclude_benchmark_papers, held_out_papers,
                                          [benchmark[pid] for pid in removed]))
    write_json(out_dir / REPORT, report)
    end_stage(out_dir)
    return report


def _check_paper(paper: dict, path: Path, lineno: int, first_line: dict[str, int]) -> None:
    """Raise `DataError("FILE:LINE: ...")` if a full-text record breaks the pdf_parse format (see the module
    docstring) or repeats a paper id; record the line of an accepted paper id in `first_line`."""
    def bad(message: str) -> DataError:
        return DataError(f"{path}:{lineno}: {message}")

    require(paper, ("paper_id", "body_text", "bib_entries"), path, lineno)
    if not isinstance(paper["body_text"], list) or not isinstance(paper["bib_entries"], dict):
        raise bad("body_text must be a list and bib_entries an object")
    pid = _paper_id(paper, path, lineno, first_line)
    for ref, entry in paper["bib_entries"].items():
        if not isinstance(entry, dict):
            raise bad(f"paper {pid!r}: bib_entries[{ref!r}] must be an object, got {type_name(entry)}")
        _id(entry.get("link"), f"paper {pid!r}: bib_entries[{ref!r}].link", path, lineno)
    for i, para in enumerate(paper["body_text"]):
        if not isinstance(para, dict):
            raise bad(f"paper {pid!r}: body_text[{i}] must be an object, got {type_name(para)}")
        if "text" not in para:
            raise bad(f"paper {pid!r}: body_text[{i}] lacks 'text'")
        if not isinstance(para["text"], str):
            raise bad(f"paper {pid!r}: body_text[{i}].text must be a string, got {type_name(para['text'])}")
        if not isinstance(para.get("section"), (str, type(None))):  # written into each context's `source`
            raise bad(f"paper {pid!r}: body_text[{i}].section must be a string or null, "
                      f"got {type_name(para['section'])}")
        for key in ("text", "section"):  # as input A refuses a context or source that is not Unicode text
            if SURROGATE.search(para.get(key) or ""):
                raise bad(f"paper {pid!r}: body_text[{i}].{key} {invisible_text_reason(para[key])}")
        cites = para.get("cite_spans", [])
        if not isinstance(cites, list):
            raise bad(f"paper {pid!r}: body_text[{i}].cite_spans must be a list, got {type_name(cites)}")
        for j, cite in enumerate(cites):
            where = f"paper {pid!r}: body_text[{i}].cite_spans[{j}]"
            if not isinstance(cite, dict) or not all(k in cite for k in ("start", "end")):
                raise bad(f"body_text[{i}] has a cite span without start/end ({where})")
            start, end = cite["start"], cite["end"]
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
                raise bad(f"{where}: start and end must be integers, got {start!r} and {end!r}")
            if not 0 <= start < end <= len(para["text"]):
                raise bad(f"{where}: span ({start}, {end}) is not inside the paragraph's "
                          f"{len(para['text'])} characters (0 <= start < end <= length)")
            if not isinstance(cite.get("ref_id"), (str, type(None))):
                raise bad(f"{where}: ref_id must be a string or null, got {type_name(cite['ref_id'])}")
            if "text" in cite:  # offsets that point elsewhere would give the citation to another sentence
                if not isinstance(cite["text"], str):
                    raise bad(f"{where}: text must be a string, got {type_name(cite['text'])}")
                if cite["text"] != para["text"][start:end]:
                    raise bad(f"{where}: text {cite['text']!r:.60} is not the paragraph's characters "
                              f"[{start}:{end}] {para['text'][start:end]!r:.60}")
    first_line[pid] = lineno
