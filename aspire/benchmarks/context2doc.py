"""Citation-context retrieval (context2doc), built from `../shared/data/cocite-acl/cocitations.jsonl`.

Each citing sentence, its citation markers removed (`query_text`), is a query; the papers it cites
are its relevant documents (grade 1); every cited abstract of the file (768) is a candidate. A
query id is `L` + the record's 1-based line number.

The split is by citing paper: citing papers that share an identical citing sentence (the file has
21 such repeats across papers) are tied into one group, and each group goes to train / dev / test
by a hash of its smallest citing-paper id (buckets 0-69 / 70-79 / 80-99 of 100), so no citing paper
and no raw sentence sits in two splits. The split is committed as `splits/context2doc.json`
(query and citing-paper ids per split, their sizes, the source file's SHA-256 and a checksum of the
split itself); `load_split` refuses a source or a split file that does not match.
The tie is by raw sentence, so a sentence can reach two splits with its citation markers written
differently (in the shared co-citation file, P05-1018 in train and its journal version J08-1001 in test cite the same
two papers with one sentence, "Lapata, 2003" against "Lapata 2003"): `load_context2doc` leaves such a
train or dev query out (`Context2Doc.left_out`) when its query text is a test query's, and
`held_out_sentences` gives every raw sentence whose query text is a test query's (the test sentences
and such twins), which the training pipeline leaves out. A reworded copy (another sentence holding at least half
of a test query's word 5-grams) is not left out here; the `context2doc` training task leaves it out when it
also cites one of the test query's papers (`held_out_queries`, `aspire.train.tasks.reworded_test_twins`), and so
does the co-citation pipeline's ingest of records (`aspire.benchmarks.heldout.reworded_test_sentences`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from aspire.checksum import file_sha256
from aspire.data.papers import Paper
from aspire.io import read_json
from aspire.paths import DATA

SPLIT_FILE = Path(__file__).with_name("splits") / "context2doc.json"
SPLIT_NAMES = ("train", "dev", "test")
BUCKETS = (70, 80, 100)  # cumulative upper bounds of train, dev, test among 100 buckets
SOURCE = "cocite-acl/cocitations.jsonl"


@dataclass
class Context2Doc:
    """Queries `{qid: text}`, qrels `{qid: {paper_id: 1}}` and the candidate papers of one split."""

    split: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    candidates: list[Paper]
    citing: dict[str, str]  # qid -> citing paper id
    left_out: list[str] = field(default_factory=list)  # train/dev qids whose query text is a test query's
    # the split file it was read from: {"split_file", "checksum", "source_sha256"} (`load_context2doc`)
    provenance: dict[str, str] = field(default_factory=dict)


def query_text(context: str) -> str:
    """The citing sentence without its citation markers (`aspire.data.cocite.clean_citations`), as the benchmark's
    queries were fixed: markers joined by ", and" stay two (`comma_and=False`: ten test queries, among them L2541,
    keep a ", and" between their markers' places; collapsing it would move every committed context2doc figure).

    >>> query_text("For example, Petrov et al (2012) build taggers using TNT (Brants, 2000), with 95%.")
    'For example, build taggers using TNT, with 95%.'
    """
    from aspire.data.cocite import clean_citations

    text = clean_citations(context, "", comma_and=False)
    text = re.sub(r"\s+([,.;:])", r"\1", text)
    text = re.sub(r"([,;:])(?=[,.;:])", "", text)
    text = re.sub(r"\(\s*\)|\[\s*\]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def read_records(path: Path) -> list[tuple[str, dict]]:
    """`[(qid, record), ...]` of a co-citation file; raises ValueError naming a bad line."""
    out = []
    with open(path, encoding="utf-8-sig") as fh:  # a byte-order mark: no part of line 1
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line}: not JSON ({err})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("context"), str) or \
                    not isinstance(rec.get("citing_paper_id"), str) or not isinstance(rec.get("cited"), list):
                raise ValueError(f"{path}:{line}: needs string 'context', 'citing_paper_id' and a list 'cited'")
            for cited in rec["cited"]:
                if not isinstance(cited, dict) or not isinstance(cited.get("paper_id"), str):
                    raise ValueError(f"{path}:{line}: every cited paper needs a string 'paper_id'")
                abstract, title = cited.get("abstract"), cited.get("title")
                if abstract is not None and (not isinstance(abstract, list)
                                             or not all(isinstance(x, str) for x in abstract)):
                    raise ValueError(f"{path}:{line}: cited paper {cited['paper_id']}: 'abstract' must be a list of "
                                     f"sentences (strings), got {type(abstract).__name__}")
                if title is not None and not isinstance(title, str):
                    raise ValueError(f"{path}:{line}: cited paper {cited['paper_id']}: 'title' must be a string, "
                                     f"got {type(title).__name__}")
            out.append((f"L{line}", rec))
    return out


def _bucket(key: str) -> str:
    b = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 100
    return next(name for name, top in zip(SPLIT_NAMES, BUCKETS) if b < top)


def _checksum(splits: dict) -> str:
    return hashlib.sha256(json.dumps(splits, sort_keys=True).encode()).hexdigest()


def make_split(path: str | Path) -> dict:
    """The split of a co-citation file (see the module docstring), as the JSON object to commit."""
    path = Path(path)
    records = read_records(path)
    parent = {r["citing_paper_id"]: r["citing_paper_id"] for _, r in records}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    by_text: dict[str, str] = {}
    for _, rec in records:  # tie citing papers that share a sentence
        first = by_text.setdefault(rec["context"].strip(), rec["citing_paper_id"])
        a, b = find(first), find(rec["citing_paper_id"])
        if a != b:
            parent[max(a, b)] = min(a, b)
    splits = {name: {"queries": [], "citing_papers": set()} for name in SPLIT_NAMES}
    excluded = []
    for qid, rec in records:
        if not query_text(rec["context"]) or not rec["cited"]:
            excluded.append(qid)
            continue
        part = splits[_bucket(find(rec["citing_paper_id"]))]
        part["queries"].append(qid)
        part["citing_papers"].add(rec["citing_paper_id"])
    body = {
        name: {"n_queries": len(p["queries"]), "n_citing_papers": len(p["citing_papers"]),
               "queries": p["queries"], "citing_papers": sorted(p["citing_papers"])}
        for name, p in splits.items()
    }
    return {
        "source": SOURCE,
        "source_sha256": file_sha256(path),
        "rule": "groups of citing papers sharing a sentence; sha256(smallest id) % 100: <70 train, <80 dev, else test",
        "excluded_queries": excluded,
        "splits": body,
        "checksum": _checksum(body),
    }


def load_split(split_file: str | Path = SPLIT_FILE, source: str | Path | None = None) -> dict:
    """The committed split, checked against its checksum and (given `source`) the data file's SHA-256. A file
    that is not `{"splits": {train|dev|test: {"queries": [qid, ...], ...}}, "checksum": ..., "source_sha256": ...}`
    or that puts a query in two splits is a ValueError naming the file and key."""
    split_file = Path(split_file)
    data = read_json(split_file, "context2doc split file")
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict) or \
            not all(isinstance(data.get(k), str) for k in ("checksum", "source_sha256")):
        raise ValueError(f"{split_file}: a context2doc split file is a JSON object with 'splits' (an object), "
                         "'checksum' and 'source_sha256' (strings); rebuild it with make_split")
    seen: dict[str, str] = {}
    for name in SPLIT_NAMES:
        part = data["splits"].get(name)
        queries = part.get("queries") if isinstance(part, dict) else None
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise ValueError(f"{split_file}: splits.{name}.queries is not a list of query ids (strings)")
        for qid in queries:
            if qid in seen:
                raise ValueError(f"{split_file}: query {qid} is in two splits: {seen[qid]} and {name}")
            seen[qid] = name
    if _checksum(data["splits"]) != data["checksum"]:
        raise ValueError(f"{split_file}: checksum mismatch (the split was edited)")
    if source is not None and file_sha256(Path(source)) != data["source_sha256"]:
        raise ValueError(f"{source} differs from the file the split {split_file} was made from "
                         "(source_sha256 mismatch); rebuild the split with make_split")
    return data


def load_context2doc(data_dir: str | Path, split: str = "test", split_file: str | Path = SPLIT_FILE) -> Context2Doc:
    """One split's queries and qrels, with every cited paper of the file as a candidate; of train and dev, less the
    queries whose query text is a test query's (`Context2Doc.left_out`, module docstring), and the split file's path,
    checksum and source SHA-256 (`Context2Doc.provenance`). A cited paper id given
    two different titles or abstracts in the file is a ValueError naming it and both records (one of the texts
    would be scored silently); so is a split query whose record has no cited paper or an empty query text (which
    `make_split` excludes)."""
    if split not in SPLIT_NAMES:
        raise ValueError(f"unknown split {split!r}; valid: {list(SPLIT_NAMES)}")
    source = Path(data_dir) / "cocitations.jsonl"
    if not source.is_file():
        raise ValueError(f"co-citation file not found: {source}")
    meta = load_split(split_file, source)
    wanted = set(meta["splits"][split]["queries"])
    records = read_records(source)
    test_texts = set() if split == "test" else _test_texts(records, meta)
    queries, qrels, citing, cands, left_out, found = {}, {}, {}, {}, [], set()
    first: dict[str, str] = {}  # cited paper id -> the qid whose record gave its text
    for qid, rec in records:
        for cited in rec["cited"]:
            pid, abstract = cited["paper_id"], cited.get("abstract") or []
            paper = Paper(pid, cited.get("title") or "", list(abstract))
            if pid not in cands:
                cands[pid], first[pid] = paper, qid
            elif (cands[pid].title, cands[pid].sentences) != (paper.title, paper.sentences):
                raise ValueError(f"{source}: cited paper {pid} has one title and abstract in record {first[pid]} and "
                                 f"another in record {qid}: a candidate is one text")
        if qid in wanted:
            found.add(qid)
            text = query_text(rec["context"])
            if not text or not rec["cited"]:  # make_split excludes these: a split that lists one is not the rule's
                raise ValueError(f"split {split}: query {qid} of {split_file} has "
                                 f"{'no cited paper' if text else 'an empty query text'} in {source}; "
                                 "make_split excludes such records (excluded_queries)")
            if text in test_texts:  # the test query itself, its markers written otherwise: a leak
                left_out.append(qid)
                continue
            queries[qid] = text
            qrels[qid] = {c["paper_id"]: 1 for c in rec["cited"]}
            citing[qid] = rec["citing_paper_id"]
    if found != wanted:
        raise ValueError(f"split {split}: {len(wanted - found)} queries of the split are not in {source}")
    provenance = {"split_file": str(split_file), "checksum": meta["checksum"], "source_sha256": meta["source_sha256"]}
    return Context2Doc(split, queries, qrels, [cands[k] for k in sorted(cands)], citing, left_out, provenance)


def held_out_queries(data_dir: str | Path, split_file: str | Path = SPLIT_FILE) -> dict[str, tuple[str, frozenset[str]]]:
    """`{qid: (query text, cited paper ids)}` of the test split's queries, read as `load_context2doc` reads them:
    what a training source checks its citing sentences against (the `context2doc` task leaves out a train or dev
    query that is a reworded copy of one, `aspire.train.tasks.reworded_test_twins`)."""
    source = Path(data_dir) / "cocitations.jsonl"
    if not source.is_file():
        raise ValueError(f"co-citation file not found: {source}")
    test = set(load_split(split_file, source)["splits"]["test"]["queries"])
    return {qid: (query_text(rec["context"]), frozenset(c["paper_id"] for c in rec["cited"]))
            for qid, rec in read_records(source) if qid in test}


def _test_texts(records: list[tuple[str, dict]], meta: dict) -> set[str]:
    """The query texts (`query_text`) of the test split's queries."""
    test = set(meta["splits"]["test"]["queries"])
    return {query_text(rec["context"]) for qid, rec in records if qid in test}


def held_out_sentences(data_dir: str | Path, split_file: str | Path = SPLIT_FILE) -> set[str]:
    """The raw citing sentences (stripped) whose query text is a test query's: the test split's sentences and
    any other record's sentence that differs from one only in its citation markers. Training must not see them."""
    return _held_out_of(Path(data_dir) / "cocitations.jsonl", split_file)


def _held_out_of(source: Path, split_file: str | Path = SPLIT_FILE) -> set[str]:
    """`held_out_sentences` of the co-citation file `source` itself, whatever its name."""
    meta = load_split(split_file, source)
    records = read_records(source)
    test_texts = _test_texts(records, meta)
    return {rec["context"].strip() for _, rec in records if query_text(rec["context"]) in test_texts}


def held_out_for(records_path: str | Path, data: str | Path = DATA) -> set[str]:
    """The context2doc test sentences a co-citation pipeline reading `records_path` must leave out: from
    `records_path` itself when the split was made from that very file (under any name: a renamed copy once read
    `cocitations.jsonl` beside it, found none and held out nothing), else from the shared co-citation data under
    `data`; empty when neither is there (nothing of the benchmark to leak)."""
    records_path = Path(records_path)
    if records_path.is_file() and file_sha256(records_path) == load_split(SPLIT_FILE)["source_sha256"]:
        return _held_out_of(records_path)
    source = Path(data) / "cocite-acl"
    return held_out_sentences(source) if (source / "cocitations.jsonl").is_file() else set()
