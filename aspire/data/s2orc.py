"""Input B: mine co-citation sentences from S2ORC-style full text.

Full text (`pdf_parses.jsonl`, S2ORC's pdf_parse format), one citing paper a line:
    {"paper_id": str,
     "body_text": [{"text": str, "section": str,
                    "cite_spans": [{"start": int, "end": int, "text": str, "ref_id": str | null}]}],
     "bib_entries": {ref_id: {"title": str, "link": paper_id | null}}}
Abstracts table (`abstracts.jsonl`), one paper a line: {"paper_id", "title", "abstract"} where
`abstract` is a list of sentences or one string (split with the configured splitter).

Each paragraph is split into sentences (character spans); a sentence boundary that falls inside
a citation span is a splitter mistake ("Lin et al. 2002") and the two sentences are merged. Each
citation span belongs to the sentence holding it. A sentence is kept when it cites at least two
distinct linked papers (bib `link` not null) that have an abstract; every other sentence is
counted by why it was dropped. Output: `contexts.jsonl` + `abstracts.jsonl` + `report.json` in
the formats of `aspire.data.cocite`, so the `filter` stage follows either input.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from pathlib import Path

from aspire.config import to_dict
from aspire.data.cocite.config import REPORT, IngestConfig
from aspire.data.cocite.text import MARK, finish_marks
from aspire.io import AtomicJsonl, DataError, iter_checked_jsonl, iter_jsonl, require, write_json


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


def get_span_splitter(name: str):
    """An object with `.spans(text) -> [(start, end)]`: `regex`, or a name in `aspire.data.sentences`."""
    if name == "regex":
        return RegexSentenceSplitter()
    from aspire.data.sentences import get_splitter

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


def _abstract_ids(path: Path, cfg: IngestConfig, bad: list[str]) -> set[str]:
    ids = set()
    for _, obj in iter_checked_jsonl(path, lambda o, p, n: require(o, ("paper_id", "abstract"), p, n), cfg.on_error, bad):
        abstract = obj["abstract"]
        if (isinstance(abstract, str) and abstract.strip()) or (isinstance(abstract, list) and abstract):
            ids.add(obj["paper_id"])
    return ids


def mine_s2orc(fulltext_path: str | Path, abstracts_path: str | Path, out_dir: str | Path,
               cfg: IngestConfig = IngestConfig()) -> dict:
    """Input B -> `contexts.jsonl` + `abstracts.jsonl` + `report.json` (counts of what was dropped and why)."""
    fulltext_path, abstracts_path, out_dir = Path(fulltext_path), Path(abstracts_path), Path(out_dir)
    splitter = get_span_splitter(cfg.splitter)
    bad: list[str] = []
    with_abstract = _abstract_ids(abstracts_path, cfg, bad)
    counts: Counter = Counter()
    cited_kept: set[str] = set()
    with AtomicJsonl(out_dir / "contexts.jsonl") as out:
        for _, paper in iter_checked_jsonl(fulltext_path, _check_paper, cfg.on_error, bad):
            counts["papers"] += 1
            bib = paper["bib_entries"]
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
                    i = bisect.bisect_right(starts, cite["start"]) - 1
                    if i < 0 or not spans[i][0] <= cite["start"] < spans[i][1]:
                        counts["cite_spans_outside_sentences"] += 1
                        continue
                    per_sentence[i].append(cite)
                for s_idx, ((s_start, s_end), sent_cites) in enumerate(zip(spans, per_sentence)):
                    if not sent_cites:
                        counts["sentences_without_citations"] += 1
                        continue
                    linked = {(bib.get(c.get("ref_id")) or {}).get("link") for c in sent_cites} - {None}
                    linked.discard(paper["paper_id"])  # a paper citing itself is no co-citation
                    if len(linked) < 2:
                        counts["dropped_fewer_than_2_linked"] += 1
                        continue
                    kept = sorted(linked & with_abstract)
                    if len(kept) < 2:
                        counts["dropped_fewer_than_2_with_abstract"] += 1
                        continue
                    raw = text[s_start:s_end]
                    marked = raw
                    for c in sorted(sent_cites, key=lambda c: c["start"], reverse=True):
                        a, b = c["start"] - s_start, min(c["end"], s_end) - s_start
                        marked = marked[:a] + MARK + marked[b:]
                    cited_kept.update(kept)
                    out.write(
                        {
                            "context_id": f"{paper['paper_id']}#p{p_idx}s{s_idx}",
                            "citing_paper_id": paper["paper_id"],
                            "text": raw,
                            "text_clean": finish_marks(marked, cfg.placeholder),
                            "cited_ids": kept,
                            "source": "s2orc:" + str(para.get("section", "")),
                            "links_confirmed": True,
                        }
                    )
        counts["contexts"] = out.count
    with AtomicJsonl(out_dir / "abstracts.jsonl") as abstracts:
        for _, obj in iter_jsonl(abstracts_path, cfg.on_error, []):
            if obj.get("paper_id") not in cited_kept:
                continue
            abstract = obj["abstract"]
            sentences = [abstract[a:b] for a, b in splitter.spans(abstract)] if isinstance(abstract, str) else list(abstract)
            abstracts.write({"paper_id": obj["paper_id"], "title": obj.get("title", ""), "abstract": sentences})
        counts["papers_cited"] = abstracts.count
    report = {"stage": "ingest", "input": [str(fulltext_path), str(abstracts_path)], "counts": dict(counts),
              "papers_with_abstract": len(with_abstract), "bad_lines": len(bad), "bad_line_messages": bad[:20],
              "config": to_dict(cfg)}
    write_json(out_dir / REPORT, report)
    return report


def _check_paper(paper: dict, path: Path, lineno: int) -> None:
    require(paper, ("paper_id", "body_text", "bib_entries"), path, lineno)
    if not isinstance(paper["body_text"], list) or not isinstance(paper["bib_entries"], dict):
        raise DataError(f"{path}:{lineno}: body_text must be a list and bib_entries an object")
    for i, para in enumerate(paper["body_text"]):
        if not isinstance(para, dict) or "text" not in para:
            raise DataError(f"{path}:{lineno}: body_text[{i}] lacks 'text'")
        for cite in para.get("cite_spans", []):
            if not all(k in cite for k in ("start", "end")):
                raise DataError(f"{path}:{lineno}: body_text[{i}] has a cite span without start/end")
