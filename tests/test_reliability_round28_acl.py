"""Round 28: the ACL Anthology reader (`aspire.data.acl.read_acl`) and its held-out rules (`HeldOut`), checked
against brute force: on the real 59,416 abstracts every benchmark paper leaves by the rule the docstrings give and
no other paper does; an integer paper id is held out by its string id (the id the paper gets); a string given
for a set of titles, and a `max_papers` that is no count, are refused; the sample is `random.Random(0).sample` of
the valid, kept records."""

from __future__ import annotations

import gzip
import json
import random
import re
from collections import Counter

import numpy as np
import pytest

from aspire.data.acl import HeldOut, held_out, normalise_title, read_acl


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_an_integer_paper_id_is_held_out_by_its_string_id(fresh):
    """A papers file may carry an integer id (`paper_from_record` makes it the string "123"); the id rule compared
    only strings, so a held-out "123" written as 123 was kept and trained on as paper "123"."""
    rows = [{"paper_id": 123, "title": "Alpha beta", "abstract": ["One sentence here."]},
            {"paper_id": "X1", "title": "Gamma", "abstract": ["Two sentences here."]}]
    held = HeldOut(paper_ids=frozenset({"123"}))
    assert held.reason(123, "Alpha beta", ["One sentence here."]) == "paper_id"
    assert held.reason(True, "Alpha beta", ["One sentence here."]) is None  # a bool is no id
    papers, stats = read_acl(_write(fresh / "a.jsonl", rows), held, 0)
    assert [p.paper_id for p in papers] == ["X1"]
    assert stats["removed_benchmark"] == 1
    assert stats["removed_benchmark_by"] == {"title": 0, "paper_id": 1, "abstract": 0}


def test_one_string_for_a_set_of_titles_ids_or_abstracts_is_a_type_error(fresh):
    """`read_acl(path, "gamma", 0)` held out the titles "g", "a", "m" (`frozenset("gamma")`), so the paper titled
    "Gamma" was kept without a word; `HeldOut(titles="bert")` the same."""
    path = _write(fresh / "a.jsonl", [{"paper_id": "X1", "title": "Gamma", "abstract": ["Two sentences here."]}])
    with pytest.raises(TypeError, match="exclude must be a HeldOut or a set of normalised titles, got one str 'gamma'"):
        read_acl(path, "gamma", 0)
    for field in ("titles", "paper_ids", "abstracts"):
        with pytest.raises(TypeError, match=f"HeldOut.{field} must be a collection of strings, got one str 'bert'"):
            HeldOut(**{field: "bert"})
    assert held_out(frozenset({"gamma"})) == HeldOut(titles=frozenset({"gamma"}))
    assert read_acl(path, {"gamma"}, 0)[1]["removed_benchmark"] == 1  # a set (not only a frozenset) still works


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", None])
def test_a_max_papers_that_is_no_count_is_a_value_error_naming_it(fresh, bad):
    """-1 was random's "Sample larger than population or is negative", 1.5 "can't multiply sequence by non-int of
    type 'float'", and True a sample of one paper."""
    rows = [{"paper_id": f"P{i}", "title": f"Paper {i}", "abstract": [f"Sentence {i}."]} for i in range(3)]
    path = _write(fresh / "a.jsonl", rows)
    with pytest.raises(ValueError, match=re.escape(f"max_papers must be a whole number of papers, 0 or more "
                                                   f"(0 = all), got {bad!r}")):
        read_acl(path, frozenset(), bad)


def test_a_numpy_integer_max_papers_is_the_same_count(fresh):
    rows = [{"paper_id": f"P{i}", "title": f"Paper {i}", "abstract": [f"Sentence {i}."]} for i in range(5)]
    path = _write(fresh / "a.jsonl", rows)
    assert [p.paper_id for p in read_acl(path, frozenset(), np.int64(2))[0]] == \
        [p.paper_id for p in read_acl(path, frozenset(), 2)[0]]


def test_the_sample_is_seed_0s_sample_of_the_valid_kept_records_and_the_counts_add_up(fresh):
    """Reference: `random.Random(0).sample` over the records, in file order, that are neither held out nor bad;
    the same after the in-memory cache is dropped; every record is read, removed, rejected (named by line) or in the
    pool; each valid record is drawn about equally often over many seeds (the draw itself is uniform)."""
    rows = []
    for i in range(40):
        if i % 7 == 3:
            rows.append({"paper_id": f"B{i}", "title": f"Bad {i}", "abstract": ["   "]})  # no visible text
        elif i % 11 == 5:
            rows.append({"paper_id": f"H{i}", "title": f"Held paper {i}", "abstract": [f"Held sentence {i}."]})
        else:
            rows.append({"paper_id": f"P{i}", "title": f"Paper {i}", "abstract": [f"Sentence {i}."], "year": 2000 + i,
                         "authors": [f"A{i}"], "venues": ["acl"]})
    path = _write(fresh / "a.jsonl", rows)
    held = HeldOut(titles=frozenset(normalise_title(r["title"]) for r in rows if r["paper_id"].startswith("H")))
    valid = [r["paper_id"] for r in rows if r["paper_id"].startswith("P")]
    papers, stats = read_acl(path, held, 10)
    assert [p.paper_id for p in papers] == random.Random(0).sample(valid, 10)
    n_held = sum(r["paper_id"].startswith("H") for r in rows)
    assert stats["read"] == 40 and stats["removed_benchmark"] == n_held and stats["used"] == 10
    assert sorted(stats["rejected"]) == sorted(f"{path}:{i + 1}" for i, r in enumerate(rows) if r["paper_id"][0] == "B")
    assert stats["read"] == stats["removed_benchmark"] + len(stats["rejected"]) + len(valid)
    assert all(f"(paper_id 'B{int(k.rsplit(':', 1)[1]) - 1}')" in v for k, v in stats["rejected"].items())
    by_id = {r["paper_id"]: r for r in rows}
    for p in papers:  # the other fields kept as read
        assert p.extra == {k: by_id[p.paper_id][k] for k in ("year", "authors", "venues")}
    read_acl.cache_clear()
    assert [p.paper_id for p in read_acl(path, held, 10)[0]] == [p.paper_id for p in papers]
    assert len(read_acl(path, held, 0)[0]) == len(valid)
    assert len(read_acl(path, held, 10_000)[0]) == len(valid)
    drawn = Counter(pid for seed in range(2000) for pid in random.Random(seed).sample(valid, 10))
    assert set(drawn) == set(valid)  # the draw read_acl makes, over seeds: each paper about 10/len(valid) of draws
    expected = 2000 * 10 / len(valid)
    assert all(abs(n - expected) < 5 * (expected ** 0.5) for n in drawn.values())


# --- the real data ------------------------------------------------------------------------------------------------

_NOT_ASCII_ALNUM = re.compile(r"[^a-z0-9]")


def _norm(text: str) -> str:
    return _NOT_ASCII_ALNUM.sub("", text.lower())


def _key(abstract) -> str:
    if isinstance(abstract, list):
        abstract = " ".join(s for s in abstract if isinstance(s, str))
    return _norm(abstract)[:200] if isinstance(abstract, str) else ""


def _grams(text: str) -> set[str]:
    w = re.findall(r"\w+", text.lower())
    return {" ".join(w[i:i + 5]) for i in range(len(w) - 4)}


def _brute_reason(held: HeldOut, record: dict, bench_grams: list[set[str]] | None) -> str | None:
    title, pid, abstract = record.get("title"), record.get("paper_id"), record.get("abstract")
    if isinstance(title, str) and (norm := _norm(title)) and norm in held.titles:
        return "title"
    if str(pid) in held.paper_ids:
        return "paper_id"
    if (key := _key(abstract)) and key in held.abstracts:
        return "abstract"
    if bench_grams is not None:
        g = _grams(abstract if isinstance(abstract, str) else " ".join(abstract))
        if any(b and len(b & g) / len(b) >= 0.5 for b in bench_grams):
            return "containment"
    return None


@pytest.mark.slow
def test_on_the_real_acl_file_exactly_the_benchmark_papers_leave_by_the_documented_rules(shared_data, fresh):
    """Every one of the 59,416 records: `HeldOut.reason` (what `read_acl` removes by) against a brute force of the
    documented rules (exact id, normalised title, 200-character abstract key) for all, and of the containment rule
    (at least half of some benchmark abstract's distinct word 5-grams) for every record it removed plus 150 it kept;
    the 409 CSFCube and 371 reviewer-set papers in the file all leave; `read_acl`'s counts are the brute force's."""
    from aspire.benchmarks.heldout import excluded_papers, ranking_titles

    held, counts = excluded_papers(shared_data, "benchmarks_dir")
    path = shared_data / "acl-anthology" / "papers.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    assert len(records) == 59416
    reasons = [held.reason(r.get("paper_id"), r.get("title"), r.get("abstract")) for r in records]
    by_field = [_brute_reason(held, r, None) for r in records]
    for r, got, brute in zip(records, reasons, by_field):  # the first three rules: exact, everywhere
        assert (got if got != "containment" else None) == brute, r["paper_id"]
    bench_grams = [_grams(t) for t in held.containment.texts]
    assert len(bench_grams) == counts["containment_abstracts"]
    contained = [i for i, why in enumerate(reasons) if why == "containment"]
    assert contained  # the rule removes some (20 at the time of writing)
    kept = random.Random(28).sample([i for i, why in enumerate(reasons) if why is None], 150)
    for i in contained + kept:
        assert _brute_reason(held, records[i], bench_grams) == reasons[i], records[i]["paper_id"]
    titles = ranking_titles(shared_data)
    for bench, n in (("csfcube", 409), ("reviewer", 371)):
        rows = [i for i, r in enumerate(records) if _norm(r["title"]) in titles[bench]]
        assert len(rows) == n and all(reasons[i] is not None for i in rows), bench
    papers, stats = read_acl(path, held, 20)
    brute = Counter(reasons)
    assert stats["read"] == 59416
    assert stats["removed_benchmark"] == len(records) - brute[None]
    assert stats["removed_benchmark_by"] == {rule: brute[rule] for rule in ("title", "paper_id", "abstract",
                                                                            "containment")}
    assert sum(stats["removed_benchmark_by"].values()) == stats["removed_benchmark"]
    assert stats["used"] == len(papers) == 20
    out = {r["paper_id"] for r, why in zip(records, reasons) if why is not None}
    assert not out & {p.paper_id for p in papers}
    valid = [r["paper_id"] for r, why in zip(records, reasons) if why is None]
    assert not stats["rejected"]  # every real record kept is a valid paper
    assert [p.paper_id for p in papers] == random.Random(0).sample(valid, 20)
