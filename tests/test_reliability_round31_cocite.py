"""Round 31: co-citation ingest, filter and stage folders against hand loops and the real records.

Defects fixed: `filter_contexts` read a hand-built context naming a paper twice as it came (["A", "A"] passed
`min_cited` as two papers and reached `group`, which refused it; ["A", "A", "B"] was counted removed by `max_cited=2`
though its set is two papers) and a repeated or non-string `context_id` (dropped as a `dedup` or passed on to
`group`), though its docstring says a context not as ingest writes it raises `DataError` naming the line;
`check_stage_input` refused a finished run-all folder as a stage's input, naming the stage folder to read, but read
one whose run stopped early (a stage left nothing) as a hand-built folder: "No such file or directory: OUT/abstracts.jsonl".
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import pytest

from aspire.data import cocite
from aspire.data.cocite import CociteConfig, DataError, FilterConfig, IngestConfig, filter_contexts, ingest_records
from aspire.data.cocite.text import clean_citations, get_tokenizer
from tests.test_cocite import _write_jsonl

ABSTRACT = ["First sentence here.", "Second sentence here.", "Third sentence here."]
LONG = "this context is long enough to pass every length filter"


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _ingest_folder(root: Path, contexts: list[dict], papers=("A", "B", "C")) -> Path:
    """A hand-built ingest output (no report): `papers` with good abstracts, `contexts` as given."""
    _write_jsonl(root / "abstracts.jsonl", [{"paper_id": p, "title": f"T {p}", "abstract": ABSTRACT} for p in papers])
    _write_jsonl(root / "contexts.jsonl", contexts)
    return root


def _ctx(cid: str, ids: list[str], text: str = LONG) -> dict:
    return {"context_id": cid, "text": text, "text_clean": text, "cited_ids": ids}


# --------------------------------------------------------------------------- filter: hand-built contexts


@pytest.mark.parametrize("ids, cfg", [(["A", "A"], FilterConfig()),
                                      (["A", "A", "B"], FilterConfig(max_cited=2))])
def test_filter_refuses_a_context_naming_a_paper_twice(tmp_path, ids, cfg):
    src = _ingest_folder(tmp_path / "in", [_ctx("c1", ["A", "B"], "a first context that is long enough here"),
                                           _ctx("c2", ids)])
    with pytest.raises(DataError, match=r"contexts.jsonl:2: context 'c2': cited_ids names a paper twice"):
        filter_contexts(src, tmp_path / "out", cfg)
    assert not (tmp_path / "out" / "contexts.jsonl").exists()


@pytest.mark.parametrize("second, message", [
    (_ctx("c1", ["A", "C"], "another sentence entirely, long enough to pass"), "context_id 'c1' repeats the one of"),
    (_ctx(7, ["A", "C"], "another sentence entirely, long enough to pass"), "context_id must be a non-empty string"),
])
def test_filter_refuses_a_repeated_or_non_string_context_id(tmp_path, second, message):
    src = _ingest_folder(tmp_path / "in", [_ctx("c1", ["A", "B"]), second])
    for dedup in ("text", "none"):
        with pytest.raises(DataError, match=rf"contexts.jsonl:2: {message}"):
            filter_contexts(src, tmp_path / "out", FilterConfig(dedup=dedup))


def test_filter_still_keeps_distinct_ids_and_counts_as_before(tmp_path):
    src = _ingest_folder(tmp_path / "in", [_ctx("c1", ["A", "B"]), _ctx("c2", ["A", "B"]),
                                           _ctx("c3", ["B", "C"], "a different sentence that is long enough too")])
    report = filter_contexts(src, tmp_path / "out", FilterConfig())
    assert [c["context_id"] for c in _read(tmp_path / "out" / "contexts.jsonl")] == ["c1", "c3"]
    assert {r["filter"]: r["removed"] for r in report["removed_in_order"]}["dedup"] == 1


# --------------------------------------------------------------------------- stage folders


def _tiny_records() -> list[dict]:
    paper = {p: {"paper_id": p, "title": f"Title {p}", "abstract": ABSTRACT} for p in "ABCD"}
    return [{"citing_paper_id": f"Z{i}", "context": f"{LONG} number {i}", "cited": [paper[a], paper[b]]}
            for i, (a, b) in enumerate(itertools.combinations("ABCD", 2))]


def test_stage_input_refuses_a_run_all_folder_that_stopped_early(tmp_path):
    src = _write_jsonl(tmp_path / "r.jsonl", _tiny_records())
    cfg = CociteConfig(ingest=IngestConfig(exclude_benchmark_test=False, exclude_benchmark_papers=False),
                       filter=FilterConfig(min_context_tokens=1000, max_context_tokens=None))
    with pytest.raises(ValueError, match="the filters removed all 6 contexts"):
        cocite.run_all(src, tmp_path / "run", cfg)
    assert not (tmp_path / "run" / cocite.PIPELINE_REPORT).exists()
    with pytest.raises(ValueError, match=r"run is run-all's folder; filter reads the output of stage 'ingest': "
                                         r".*run/1_ingest"):
        cocite.check_stage_input(tmp_path / "run", "filter")
    cocite.check_stage_input(tmp_path / "run" / "1_ingest", "filter")  # the folder it names is read
    cocite.check_stage_input(_ingest_folder(tmp_path / "hand", []), "filter")  # a hand-built folder still is


def test_stage_reruns_are_byte_identical_and_other_stages_outputs_refused(tmp_path):
    src = _write_jsonl(tmp_path / "r.jsonl", _tiny_records())
    cfg = IngestConfig(exclude_benchmark_test=False, exclude_benchmark_papers=False)
    digests = []
    for _ in range(2):  # each stage rerun into its own earlier output
        cocite.check_stage_out(tmp_path / "1", "ingest")
        ingest_records(src, tmp_path / "1", cfg)
        cocite.check_stage_out(tmp_path / "2", "filter")
        filter_contexts(tmp_path / "1", tmp_path / "2")
        digests.append({f"{d}/{f.name}": hashlib.sha1(f.read_bytes()).hexdigest()
                        for d in ("1", "2") for f in sorted((tmp_path / d).iterdir())})
    assert digests[0] == digests[1] and len(digests[0]) == 6
    with pytest.raises(FileExistsError, match="output of stage 'ingest', not of 'filter'"):
        cocite.check_stage_out(tmp_path / "1", "filter")
    with pytest.raises(ValueError, match="holds the output of stage 'filter'; filter reads the output of stage"):
        cocite.check_stage_input(tmp_path / "2", "filter")


# --------------------------------------------------------------------------- real records, a hand loop


@pytest.mark.parametrize("dedup, bad_abstract", [("text_and_set", "drop_context"), ("none", "drop_paper")])
def test_real_ingest_and_filter_match_a_hand_loop(tmp_path, shared_data, dedup, bad_abstract):
    """500 real records (their sentences repeat, and some abstracts fail the filters) through ingest and a
    non-default filter, against a loop written here: every record is a context or counted, ids matched exactly."""
    lines = (shared_data / "cocite-acl" / "cocitations.jsonl").read_text(encoding="utf-8").splitlines()[:500]
    src = _write_jsonl(tmp_path / "r.jsonl", lines)
    report = ingest_records(src, tmp_path / "1", IngestConfig(exclude_benchmark_test=False,
                                                               exclude_benchmark_papers=False))
    fcfg = FilterConfig(dedup=dedup, bad_abstract=bad_abstract, confirmed_only=False, max_cited=4)
    freport = filter_contexts(tmp_path / "1", tmp_path / "2", fcfg)
    records = [json.loads(line) for line in lines]
    first: dict[str, tuple] = {}
    contexts = []
    for lineno, rec in enumerate(records, 1):
        ids = sorted({c["paper_id"] for c in rec["cited"]} - {rec["citing_paper_id"]})
        if len(ids) < 2:
            continue
        for c in rec["cited"]:
            if c["paper_id"] in ids:
                first.setdefault(c["paper_id"], (c["title"], c["abstract"]))
        contexts.append((f"{rec['citing_paper_id']}#L{lineno}", rec["context"], ids))
    assert report["counts"]["records"] == 500 == len(contexts) + report["counts"].get("dropped_fewer_than_2_cited", 0)
    assert [(c["context_id"], c["cited_ids"]) for c in _read(tmp_path / "1" / "contexts.jsonl")] == [
        (cid, ids) for cid, _, ids in contexts]
    assert {p["paper_id"]: (p["title"], p["abstract"]) for p in _read(tmp_path / "1" / "abstracts.jsonl")} == first
    tokens = get_tokenizer("regex")
    good = {p for p, (_, a) in first.items() if 3 <= len(a) <= 20 and all(len(tokens(s)) <= 80 for s in a)}
    assert good != set(first)  # some real abstract fails, so bad_abstract is exercised
    kept, seen, removed = [], set(), dict.fromkeys(["max_cited", "context_tokens", "bad_abstract", "min_cited", "dedup"], 0)
    for cid, text, ids in contexts:
        if len(ids) > 4:
            removed["max_cited"] += 1
            continue
        if not 5 <= len(tokens(clean_citations(text))) <= 60:
            removed["context_tokens"] += 1
            continue
        left = [p for p in ids if p in good]
        if left != ids and bad_abstract == "drop_context":
            removed["bad_abstract"] += 1
            continue
        if len(left) < 2:
            removed["min_cited"] += 1
            continue
        key = (" ".join(text.lower().split()), tuple(left) if dedup == "text_and_set" else ())
        if dedup != "none" and key in seen:
            removed["dedup"] += 1
            continue
        seen.add(key)
        kept.append((cid, left))
    assert [(c["context_id"], c["cited_ids"]) for c in _read(tmp_path / "2" / "contexts.jsonl")] == kept
    got = {r["filter"]: r["removed"] for r in freport["removed_in_order"]}
    assert got == {"confirmed_only": 0, **removed}
    assert freport["contexts_in"] == len(contexts) == sum(removed.values()) + len(kept)
    assert {p["paper_id"] for p in _read(tmp_path / "2" / "abstracts.jsonl")} == {p for _, ids in kept for p in ids}
