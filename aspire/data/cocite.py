"""Co-citation training data: ingest -> filter -> group -> split -> examples.

Every stage reads the previous stage's directory, writes JSONL files plus a `report.json` of
counts, and writes each file atomically (a temp file, then a rename; `report.json` last, so its
presence marks a finished stage). `python -m aspire.data STAGE ...` runs one stage;
`run_all` (CLI `run-all`) chains them for co-citation records (input A) on embedded defaults.

Inputs
------
A. Co-citation records (`../shared/data/cocite-acl/cocitations.jsonl`): one a line,
   `{citing_paper_id, context, source, all_links_confirmed, cited: [{paper_id, title, abstract}]}`
   -> `ingest_records`.
B. S2ORC-style full text + a table of abstracts -> `aspire.data.s2orc.mine_s2orc` (same output).

Formats (all JSONL, one object a line, UTF-8)
----------------------------------------------
`contexts.jsonl` (ingest, filter): one citing sentence
    {"context_id": str (unique), "citing_paper_id": str, "text": raw sentence,
     "text_clean": the sentence with citation markers replaced by `placeholder` ("[CIT]"),
     "cited_ids": sorted distinct cited paper ids, "source": str, "links_confirmed": bool}
`abstracts.jsonl` (ingest, filter, examples): the `Paper` JSONL format
    {"paper_id": str, "title": str, "abstract": [sentences]}
`groups.jsonl` (group) and `groups.{train,dev}.jsonl` (split): one co-cited set
    {"set_id": "|".join(paper_ids), "paper_ids": sorted ids, "context_ids": [...],
     "contexts": [raw texts], "contexts_clean": [cleaned texts]}
`examples.{train,dev}.jsonl` (examples): one unordered co-cited pair (p, p') of a split
    {"example_id": "p|p'", "split": "train"|"dev", "query_id": p, "positive_id": p' (p < p'),
     "negative_ids": [n, ...] (seeded; never a member of any set holding the pair),
     "set_ids": sets holding the pair, "context_ids", "contexts", "contexts_clean": every
     context of the split citing both p and p'}
    The examples directory also holds `abstracts.jsonl` for every paper the examples name and a
    copy of `groups.{train,dev}.jsonl`, so it is self-contained. `aspire.data.align` (CLI
    `align`) writes the same files with each example's `cc_align` / `abs_align` added.

Tokens (for the length filters) are counted by a named tokenizer from `TOKENIZERS`:
`regex` (default: words, numbers and hyphen/apostrophe compounds are one token, so is a
bracketed upper-case tag such as the placeholder "[CIT]", each other non-space character is one
token; close to spaCy's English tokenizer), `whitespace`, or `spacy_blank` (spaCy's rule-based
English tokenizer, no model; it splits "[CIT]" into three tokens). Context lengths are counted on
`text_clean` by default (`filter.count_on`), so a citation marker like "(Brants, 2000)" counts
as one token rather than five.

Citation markers (`clean_citations`) are found by regular expressions tuned on ACL-style text:
parentheses or brackets holding a year ("(Brants, 2000)", "(Lin, 1998; Lin and Pantel, 2002)"),
numeric brackets ("[12]", "[3, 4]"), and narrative citations ("Petrov et al (2012)",
"Dale and Reiter (1995)"). It is best-effort: the raw text is always kept beside it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import random
import re
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal

from aspire.config import load_config, to_dict
from aspire.data.papers import Paper, _type_name

REPORT = "report.json"
SPLITS = ("train", "dev")


class DataError(ValueError):
    """A malformed input line; the message names the file and the line."""


# --------------------------------------------------------------------------- configs


@dataclass
class IngestConfig:
    placeholder: str = "[CIT]"  # replaces citation markers in `text_clean`
    splitter: str = "pysbd"  # input B only: a name in aspire.data.sentences.SPLITTERS, or "regex"
    on_error: Literal["raise", "skip"] = "raise"  # bad lines: stop, or skip and count them
    # leave out the context2doc benchmark's test sentences (aspire.evaluate.context2doc), wherever they occur
    exclude_benchmark_test: bool = True


@dataclass
class FilterConfig:
    """Each filter is switched off by setting its bound to null (None)."""

    confirmed_only: bool = False  # keep only contexts whose every citation link is confirmed
    max_cited: int | None = 3  # co-cited sets of at most this many papers
    min_context_tokens: int | None = 5
    max_context_tokens: int | None = 60
    count_on: Literal["text", "text_clean"] = "text_clean"  # which context text the bounds count
    tokenizer: str = "regex"  # a name in TOKENIZERS
    min_abstract_sentences: int | None = 3
    max_abstract_sentences: int | None = 20
    max_sentence_tokens: int | None = 80  # no abstract sentence longer than this
    # a context citing a paper whose abstract fails: drop that paper from the context's set
    # (the context stays if >= 2 cited papers remain) or drop the whole context
    bad_abstract: Literal["drop_paper", "drop_context"] = "drop_paper"
    dedup: Literal["text", "text_and_set", "none"] = "text"  # key for dropping repeated contexts


@dataclass
class SplitConfig:
    dev_fraction: float = 0.1  # share of co-cited sets placed in dev (whole components at a time)
    seed: int = 13


@dataclass
class ExamplesConfig:
    num_negatives: int = 1
    negatives_from: Literal["split", "all"] = "split"  # papers of the same split, or every paper
    seed: int = 13


@dataclass
class CociteConfig:
    ingest: IngestConfig = field(default_factory=IngestConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    examples: ExamplesConfig = field(default_factory=ExamplesConfig)


def load_cocite_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> CociteConfig:
    """Defaults, then the YAML file (e.g. `configs/data_cocite.yaml`), then dotted overrides."""
    return load_config(CociteConfig, path, list(overrides))


# --------------------------------------------------------------------------- JSONL in and out


def iter_jsonl(path: str | Path, on_error: str = "raise", bad: list[str] | None = None) -> Iterator[tuple[int, dict]]:
    """Yield `(line_number, object)` for each non-blank line of a JSONL file, streaming.

    A line that is not UTF-8 or not a JSON object raises `DataError("FILE:LINE: ...")`, or with
    `on_error="skip"` is appended to `bad` (which must then be given) and skipped.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if on_error == "skip" and bad is None:
        raise ValueError("on_error='skip' needs a `bad` list to record the skipped lines")
    path = Path(path)
    with path.open("rb") as handle:  # decoded line by line, so a bad byte is named by its line
        for lineno, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            except UnicodeDecodeError as err:
                message = f"{path}:{lineno}: not UTF-8 ({err.reason} at byte {err.start})"
            except json.JSONDecodeError as err:
                message = f"{path}:{lineno}: invalid JSON: {err}"
            except DataError as err:
                message = str(err)
            else:
                yield lineno, obj
                continue
            if on_error == "raise":
                raise DataError(message) from None
            bad.append(message)


def require(obj: dict, keys: Iterable[str], path: str | Path, lineno: int) -> None:
    """Raise `DataError` naming the file and line if `obj` lacks any of `keys`."""
    missing = [k for k in keys if k not in obj]
    if missing:
        raise DataError(f"{path}:{lineno}: missing key(s) {missing}")


class AtomicJsonl:
    """Write JSONL to a temp file beside `path`; rename onto `path` only on a clean exit."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.count = 0

    def __enter__(self) -> "AtomicJsonl":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        self._handle = os.fdopen(fd, "w", encoding="utf-8")
        return self

    def write(self, obj: dict) -> None:
        self._handle.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.count += 1

    def __exit__(self, exc_type, exc, tb) -> None:
        self._handle.close()
        if exc_type is None:
            os.replace(self._tmp, self.path)
        else:
            os.unlink(self._tmp)


def write_json(path: str | Path, obj: Any) -> None:
    """Write one JSON document atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _describe(value: Any) -> str:
    return "an empty string" if isinstance(value, str) else _type_name(value)


def _text_fields_problem(title: Any, abstract: Any) -> str | None:
    """What is wrong with a paper's title (a string) and abstract (a list of strings), or None."""
    if not isinstance(title, str):
        return f"title must be a string, got {_type_name(title)}"
    if not isinstance(abstract, list):
        return f"abstract must be a list of sentences, got {_type_name(abstract)}"
    for j, sentence in enumerate(abstract):
        if not isinstance(sentence, str):
            return f"abstract[{j}] must be a string, got {_type_name(sentence)}"
    return None


def read_papers(path: str | Path) -> dict[str, Paper]:
    """`abstracts.jsonl` -> {paper_id: Paper}.

    A paper_id that is not a non-empty string or an integer, a title that is not a string, an
    abstract that is not a list of strings, and a repeated paper_id raise `DataError` naming the
    file, the line and the paper id.
    """
    papers: dict = {}
    first_line: dict = {}
    for lineno, obj in iter_jsonl(path):
        require(obj, ("paper_id", "title", "abstract"), path, lineno)
        pid, title, abstract = obj["paper_id"], obj["title"], obj["abstract"]
        if isinstance(pid, bool) or not isinstance(pid, (str, int)) or (isinstance(pid, str) and not pid.strip()):
            raise DataError(f"{path}:{lineno}: paper_id must be a non-empty string or an integer, got {_describe(pid)}")
        where = f"{path}:{lineno} (paper_id {pid!r})"
        if pid in first_line:
            raise DataError(f"{where}: duplicate paper_id, first seen on line {first_line[pid]}")
        problem = _text_fields_problem(title, abstract)
        if problem:
            raise DataError(f"{where}: {problem}")
        first_line[pid] = lineno
        papers[pid] = Paper(pid, title, list(abstract))
    return papers


def iter_examples(examples_dir: str | Path, split: str) -> Iterator[dict]:
    """Stream the training examples of one split (`examples.{split}.jsonl`)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {list(SPLITS)}")
    for _, obj in iter_jsonl(Path(examples_dir) / f"examples.{split}.jsonl"):
        yield obj


def _paper_record(paper_id: str, title: str, abstract: list[str]) -> dict:
    return {"paper_id": paper_id, "title": title, "abstract": abstract}


# --------------------------------------------------------------------------- tokens and citations


def _regex_tokens(text: str) -> list[str]:
    return re.findall(r"\[[A-Z]+\]|\w+(?:['’-]\w+)*|[^\w\s]", text)


@functools.lru_cache(maxsize=1)
def _spacy_blank():
    import spacy

    return spacy.blank("en").tokenizer


TOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "regex": _regex_tokens,
    "whitespace": str.split,
    "spacy_blank": lambda text: [t.text for t in _spacy_blank()(text) if not t.is_space],
}


def get_tokenizer(name: str) -> Callable[[str], list[str]]:
    """A tokenizer by name: text -> list of token strings."""
    if name not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {name!r}; valid: {sorted(TOKENIZERS)}")
    return TOKENIZERS[name]


_YEAR = r"(?:1[89]|20)\d\d[a-z]?"
_NAME = r"(?:(?:van|von|de|der|del|di|la|le|du|dos|da)\s+)*[A-Z][\w'’`.-]*"
_AUTHORS = rf"{_NAME}(?:\s+(?:et\s+al\.?|(?:and|&)\s+{_NAME}))?"
_CITATION_PATTERNS = [  # narrative first, so "Petrov et al (2012)" goes whole
    re.compile(rf"\b{_AUTHORS},?\s*(?:\[|\()\s*{_YEAR}(?:\s*[,;]\s*{_YEAR})*\s*(?:\]|\))"),  # Petrov et al (2012)
    re.compile(rf"\((?=[^()]*\b{_YEAR}\b)[^()]*\)"),  # (Brants, 2000) · (Lin, 1998; Lin and Pantel, 2002)
    re.compile(rf"\[(?=[^\[\]]*\b{_YEAR}\b)[^\[\]]*\]"),  # [Ganchev et al, 2009]
    re.compile(r"\[\s*\d{1,3}(?:\s*[,;–-]\s*\d{1,3})*\s*\]"),  # [12] · [3, 4] · [5-7]
]


MARK = "\0"  # stands for one citation marker while cleaning


def clean_citations(text: str, placeholder: str = "[CIT]") -> str:
    """Replace citation markers by `placeholder` (best-effort regexes; see the module docstring).

    Runs of markers joined by commas, semicolons or "and" collapse into one placeholder.
    """
    out = text
    for _ in range(3):  # nested markers: "(e.g., (Lin, 1998))" needs the inner one first
        before = out
        for pattern in _CITATION_PATTERNS:
            out = pattern.sub(MARK, out)
        if out == before:
            break
    return finish_marks(out, placeholder)


def finish_marks(text: str, placeholder: str) -> str:
    """Collapse runs of `MARK` (and a bracket around one), squeeze spaces, write `placeholder`."""
    out = re.sub(rf"{MARK}(?:\s*(?:[,;]|and|&)?\s*{MARK})+", MARK, text)
    out = re.sub(rf"\(\s*{MARK}\s*\)|\[\s*{MARK}\s*\]", MARK, out)
    out = re.sub(r"\s+", " ", out).strip()
    return out.replace(MARK, placeholder)


# --------------------------------------------------------------------------- stage 1a: ingest records


def _check_record(rec: dict, path: str | Path, lineno: int) -> None:
    """Raise `DataError("FILE:LINE: ...")` if a field of a co-citation record has the wrong type."""
    def bad(message: str) -> DataError:
        return DataError(f"{path}:{lineno}: {message}")

    if not isinstance(rec["citing_paper_id"], str) or not rec["citing_paper_id"].strip():
        raise bad(f"citing_paper_id must be a non-empty string, got {_describe(rec['citing_paper_id'])}")
    if not isinstance(rec["context"], str):
        raise bad(f"context must be a string, got {_type_name(rec['context'])}")
    if not isinstance(rec["cited"], list):
        raise bad(f"cited must be a list of papers, got {_type_name(rec['cited'])}")
    for i, cited in enumerate(rec["cited"]):
        if not isinstance(cited, dict):
            raise bad(f"cited[{i}] is not an object")
        require(cited, ("paper_id", "title", "abstract"), path, lineno)
        if not isinstance(cited["paper_id"], str) or not cited["paper_id"].strip():
            raise bad(f"cited[{i}].paper_id must be a non-empty string, got {_describe(cited['paper_id'])}")
        problem = _text_fields_problem(cited["title"], cited["abstract"])
        if problem:
            raise bad(f"cited[{i}].{problem}")

def _benchmark_test_sentences(records_path: Path) -> set[str]:
    """The context2doc test sentences: from `records_path` when the split was made from it, else from
    the shared co-citation file beside the repository (empty when neither is there)."""
    from aspire.evaluate.context2doc import SPLIT_FILE, held_out_sentences, load_split, sha256_file

    source = Path(__file__).resolve().parents[3] / "shared" / "data" / "cocite-acl"
    if sha256_file(records_path) == load_split(SPLIT_FILE)["source_sha256"]:
        source = records_path.parent
    return held_out_sentences(source) if (source / "cocitations.jsonl").is_file() else set()


def ingest_records(records_path: str | Path, out_dir: str | Path, cfg: IngestConfig = IngestConfig()) -> dict:
    """Input A: co-citation records -> `contexts.jsonl` + `abstracts.jsonl` + `report.json`.

    Each record becomes one context citing its distinct cited paper ids (records citing fewer
    than two distinct papers are counted and dropped); each cited paper's first-seen title and
    abstract go to `abstracts.jsonl` (a later record giving a different abstract is counted).
    With `exclude_benchmark_test`, a record whose sentence is one of the context2doc test split's
    is dropped and counted (`dropped_benchmark_test`), so training never sees a test query.
    """
    records_path, out_dir = Path(records_path), Path(out_dir)
    bad: list[str] = []
    counts: Counter = Counter()
    held_out = _benchmark_test_sentences(records_path) if cfg.exclude_benchmark_test else set()
    seen_abstracts: dict[str, str] = {}
    with AtomicJsonl(out_dir / "contexts.jsonl") as contexts, AtomicJsonl(out_dir / "abstracts.jsonl") as abstracts:
        for lineno, rec in iter_jsonl(records_path, cfg.on_error, bad):
            try:
                require(rec, ("citing_paper_id", "context", "cited"), records_path, lineno)
                _check_record(rec, records_path, lineno)
            except DataError as err:
                if cfg.on_error == "raise":
                    raise
                bad.append(str(err))
                continue
            counts["records"] += 1
            if rec["context"].strip() in held_out:
                counts["dropped_benchmark_test"] += 1
                continue
            cited_ids = sorted({c["paper_id"] for c in rec["cited"]})
            if len(cited_ids) < 2:
                counts["dropped_fewer_than_2_cited"] += 1
                continue
            for c in rec["cited"]:
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
    write_json(out_dir / REPORT, report)
    return report


# --------------------------------------------------------------------------- stage 2: filter


def _abstract_failure(sentences: list[str], cfg: FilterConfig, tokenize) -> str | None:
    """The first abstract filter `sentences` fails, or None when it passes."""
    if cfg.min_abstract_sentences is not None and len(sentences) < cfg.min_abstract_sentences:
        return "too_few_sentences"
    if cfg.max_abstract_sentences is not None and len(sentences) > cfg.max_abstract_sentences:
        return "too_many_sentences"
    if cfg.max_sentence_tokens is not None and any(len(tokenize(s)) > cfg.max_sentence_tokens for s in sentences):
        return "sentence_too_long"
    return None


def filter_contexts(in_dir: str | Path, out_dir: str | Path, cfg: FilterConfig = FilterConfig()) -> dict:
    """Apply the paper's filters, in this order, counting what each removes.

    Abstracts first: a paper passes with `min..max_abstract_sentences` sentences, none over
    `max_sentence_tokens` tokens. Then each context, in order: `confirmed_only`; `max_cited`
    (on the ingested set); `context_tokens` (`min..max_context_tokens` on `count_on`);
    `bad_abstract` (drop the failing papers or the context); `min_cited` (>= 2 papers left);
    `dedup` (the first of repeated contexts is kept). Writes the kept contexts and the abstracts of
    the papers they cite.
    """
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    tokenize = get_tokenizer(cfg.tokenizer)
    paper_counts: Counter = Counter()
    good_papers: set[str] = set()
    for lineno, obj in iter_jsonl(in_dir / "abstracts.jsonl"):
        require(obj, ("paper_id", "abstract"), in_dir / "abstracts.jsonl", lineno)
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
    n_in = 0
    with AtomicJsonl(out_dir / "contexts.jsonl") as out:
        for lineno, ctx in iter_jsonl(in_dir / "contexts.jsonl"):
            require(ctx, ("context_id", "text", "text_clean", "cited_ids"), in_dir / "contexts.jsonl", lineno)
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
                if cfg.dedup == "text_and_set":
                    key += "\t" + "|".join(kept_ids)
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
    return report


# --------------------------------------------------------------------------- stage 3: group


def set_id(paper_ids: Iterable[str]) -> str:
    """The id of a co-cited set: its sorted paper ids joined by '|'."""
    return "|".join(sorted(paper_ids))


def group_contexts(in_dir: str | Path, out_dir: str | Path) -> dict:
    """Group the filtered contexts by co-cited set -> `groups.jsonl` (sorted by set id)."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    groups: dict[str, dict] = {}
    for lineno, ctx in iter_jsonl(in_dir / "contexts.jsonl"):
        require(ctx, ("context_id", "text", "text_clean", "cited_ids"), in_dir / "contexts.jsonl", lineno)
        sid = set_id(ctx["cited_ids"])
        group = groups.setdefault(
            sid, {"set_id": sid, "paper_ids": sorted(ctx["cited_ids"]), "context_ids": [], "contexts": [], "contexts_clean": []}
        )
        group["context_ids"].append(ctx["context_id"])
        group["contexts"].append(ctx["text"])
        group["contexts_clean"].append(ctx["text_clean"])
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
    return report


def _histogram(values: Iterable[int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(Counter(values).items())}


def _copy_jsonl(src: Path, dst: Path, keep: Callable[[dict], bool] = lambda obj: True) -> int:
    with AtomicJsonl(dst) as out:
        for _, obj in iter_jsonl(src):
            if keep(obj):
                out.write(obj)
        return out.count


# --------------------------------------------------------------------------- stage 4: split


def pairs_of(paper_ids: Iterable[str]) -> list[tuple[str, str]]:
    """Every unordered pair of a set, each as a sorted tuple."""
    return list(itertools.combinations(sorted(set(paper_ids)), 2))


def pair_components(sets: list[list[str]]) -> list[int]:
    """Union-find over co-cited sets: sets sharing an unordered pair land in one component.

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
        for pair in pairs_of(paper_ids):
            j = first_with_pair.setdefault(pair, i)
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)
    return [find(i) for i in range(len(sets))]


def split_groups(in_dir: str | Path, out_dir: str | Path, cfg: SplitConfig = SplitConfig()) -> dict:
    """Split co-cited sets into train and dev so that no unordered pair is in both.

    Sets sharing a pair (e.g. {A,B} and {A,B,C}) form one component (`pair_components`); the
    components are shuffled with `cfg.seed` and put in dev while dev stays within
    `dev_fraction` of the sets, the rest in train. Deterministic for a given input and seed.
    """
    if not 0.0 <= cfg.dev_fraction < 1.0:
        raise ValueError(f"split.dev_fraction must be in [0, 1), got {cfg.dev_fraction}")
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    set_ids, sets = [], []
    for lineno, group in iter_jsonl(in_dir / "groups.jsonl"):
        require(group, ("set_id", "paper_ids"), in_dir / "groups.jsonl", lineno)
        set_ids.append(group["set_id"])
        sets.append(group["paper_ids"])
    roots = pair_components(sets)
    members: dict[int, list[int]] = defaultdict(list)
    for i, root in enumerate(roots):
        members[root].append(i)
    components = sorted(members)  # roots in input (set id) order, then a seeded shuffle
    random.Random(cfg.seed).shuffle(components)
    target = round(cfg.dev_fraction * len(sets))
    in_dev: set[int] = set()
    for root in components:
        if len(in_dev) + len(members[root]) <= target:
            in_dev.update(members[root])
        if len(in_dev) == target:
            break
    assignment = {sid: ("dev" if i in in_dev else "train") for i, sid in enumerate(set_ids)}

    counts = {s: Counter(sets=0, contexts=0) for s in SPLITS}
    split_pairs: dict[str, set] = {s: set() for s in SPLITS}
    writers = {s: AtomicJsonl(out_dir / f"groups.{s}.jsonl") for s in SPLITS}
    with writers["train"], writers["dev"]:
        for _, group in iter_jsonl(in_dir / "groups.jsonl"):
            split = assignment[group["set_id"]]
            writers[split].write(group)
            counts[split]["sets"] += 1
            counts[split]["contexts"] += len(group["context_ids"])
            split_pairs[split].update(pairs_of(group["paper_ids"]))
    shared = split_pairs["train"] & split_pairs["dev"]
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
    return report


# --------------------------------------------------------------------------- stage 5: examples


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
    Negatives are drawn from the split's papers (`negatives_from="split"`) or all papers, never
    from any set holding the pair, with a generator seeded by `(seed, pair)`: the same pair gets
    the same negatives whatever the input order. A pair with too few candidates is dropped and
    counted.
    """
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    all_papers = sorted(obj["paper_id"] for _, obj in iter_jsonl(in_dir / "abstracts.jsonl"))
    report: dict[str, Any] = {"stage": "examples", "input": str(in_dir), "config": to_dict(cfg)}
    named: set[str] = set()
    for split in SPLITS:
        pairs: dict[tuple[str, str], dict] = {}
        split_papers: set[str] = set()
        for _, group in iter_jsonl(in_dir / f"groups.{split}.jsonl"):
            split_papers.update(group["paper_ids"])
            for pair in pairs_of(group["paper_ids"]):
                entry = pairs.setdefault(
                    pair, {"set_ids": [], "members": set(), "context_ids": [], "contexts": [], "contexts_clean": []}
                )
                entry["set_ids"].append(group["set_id"])
                entry["members"].update(group["paper_ids"])
                for key in ("context_ids", "contexts", "contexts_clean"):
                    entry[key].extend(group[key])
        pool = sorted(split_papers) if cfg.negatives_from == "split" else all_papers
        pool_set = frozenset(pool)
        counts: Counter = Counter()
        with AtomicJsonl(out_dir / f"examples.{split}.jsonl") as out:
            for (a, b) in sorted(pairs):
                entry = pairs[(a, b)]
                rng = random.Random(f"{cfg.seed}|{a}|{b}")
                negatives = _pick_negatives(pool, pool_set, entry["members"], cfg.num_negatives, rng)
                if negatives is None:
                    counts["dropped_no_negative"] += 1
                    continue
                named.update((a, b, *negatives))
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
        counts["contexts_per_example_mean"] = round(
            sum(len(e["context_ids"]) for e in pairs.values()) / max(len(pairs), 1), 3
        )
        report[split] = {**counts, "papers": len(split_papers), "negative_pool": len(pool)}
    report["papers_named"] = _copy_jsonl(in_dir / "abstracts.jsonl", out_dir / "abstracts.jsonl", lambda o: o["paper_id"] in named)
    for split in SPLITS:  # the co-cited sets travel with the examples (CoSentBert trains on them)
        _copy_jsonl(in_dir / f"groups.{split}.jsonl", out_dir / f"groups.{split}.jsonl")
    write_json(out_dir / REPORT, report)
    return report


# --------------------------------------------------------------------------- all stages


STAGE_DIRS = ("1_ingest", "2_filter", "3_group", "4_split", "5_examples")


def run_all(records_path: str | Path, out_dir: str | Path, cfg: CociteConfig | None = None) -> Path:
    """Input A end to end: `out_dir/{1_ingest,...,5_examples}` and `out_dir/pipeline_report.json`.

    Returns the examples directory (`examples.{train,dev}.jsonl`, `abstracts.jsonl`,
    `groups.{train,dev}.jsonl`); `python -m aspire.data align` adds the sentence alignments.
    """
    cfg = cfg or CociteConfig()
    out_dir = Path(out_dir)
    dirs = [out_dir / name for name in STAGE_DIRS]
    reports = {
        "ingest": ingest_records(records_path, dirs[0], cfg.ingest),
        "filter": filter_contexts(dirs[0], dirs[1], cfg.filter),
        "group": group_contexts(dirs[1], dirs[2]),
        "split": split_groups(dirs[2], dirs[3], cfg.split),
        "examples": build_examples(dirs[3], dirs[4], cfg.examples),
    }
    write_json(out_dir / "pipeline_report.json", {"config": to_dict(cfg), "stages": reports})
    return dirs[4]
