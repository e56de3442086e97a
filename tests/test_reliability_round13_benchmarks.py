"""Round 13 of the benchmark checks: what the benchmark readers used to drop or pick without a word (rating columns
past the tenth, cells past the header, a second ACL record of one id, a second text of one cited paper, a pool
the candidates cannot fill)."""

from __future__ import annotations

import json

import pytest

from aspire.benchmarks import context2doc as c2d
from aspire.benchmarks.acl_formats import read_records
from aspire.benchmarks.reviewers import load_ratings
from aspire.benchmarks.same_author import build_pools, counted_names


def _ratings_file(path, n_pairs: int, rows: list[list[str]]):
    header = ["ParticipantID", *(f"Paper{i}" for i in range(1, n_pairs + 1)),
              *(f"Expertise{i}" for i in range(1, n_pairs + 1))]
    path.write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")
    return path


def test_ratings_read_every_paper_column_of_the_header(tmp_path):
    papers = [f"p{i}" for i in range(1, 13)]
    grades = ["1", "2", "3", "4", "5", "1", "2", "3", "4", "5", "2", "5"]
    path = _ratings_file(tmp_path / "evaluations.csv", 12, [["r1", *papers, *grades]])
    rated = load_ratings(path)["r1"]
    assert [p for p, _ in rated] == papers  # the 11th and 12th ratings were dropped
    assert rated[-1] == ("p12", 5.0)


def test_ratings_refuse_a_cell_beyond_the_header(tmp_path):
    row = ["r1", "p1", "p2", "3", "4"]
    ok = _ratings_file(tmp_path / "ok.csv", 2, [row + [""]])  # an empty trailing cell is no rating
    assert load_ratings(ok) == {"r1": [("p1", 3.0), ("p2", 4.0)]}
    bad = _ratings_file(tmp_path / "bad.csv", 2, [row + ["p3", "5"]])
    with pytest.raises(ValueError, match=r"bad.csv:2: reviewer r1: .*beyond the header.*'p3'"):
        load_ratings(bad)


def test_acl_records_refuse_one_paper_id_twice(tmp_path):
    rec = {"paper_id": "P1", "title": "t", "abstract": "a b.", "year": "2020", "venues": ["acl"], "authors": ["A"]}
    lines = [rec, {**rec, "paper_id": "P2"}, {**rec, "venues": ["wmt"], "year": "2001"}]
    path = tmp_path / "papers.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    with pytest.raises(ValueError, match=r"papers.jsonl:3: paper P1 is on line 1 too"):
        read_records(path)
    path.write_text("\n".join(json.dumps(r) for r in lines[:2] + [{**lines[2], "abstract": ""}]) + "\n")
    assert [r["paper_id"] for r in read_records(path)] == ["P1", "P2"]  # no abstract: no paper of the formats


def test_same_author_pool_the_candidates_cannot_fill_is_refused():
    records = [{"paper_id": f"p{i}", "authors": [f"A{i // 3}", f"B{i // 3}"]} for i in range(12)]
    names = counted_names(records)
    ids = [r["paper_id"] for r in records]
    pools = build_pools(ids, names, {"test": 6, "dev": 6}, seed=0)
    assert sorted(map(len, pools.values())) == [6, 6]
    with pytest.raises(ValueError, match=r"pool 'dev': the candidates fill 3 of its 6 papers"):
        build_pools(ids, names, {"test": 9, "dev": 6}, seed=0)  # was a dev pool of 3 papers


def test_context2doc_refuses_two_texts_of_one_cited_paper(tmp_path):
    def cited(pid, title):
        return {"paper_id": pid, "title": title, "abstract": [f"{title} abstract."], "link": "x"}

    recs = [{"citing_paper_id": f"c{i}", "context": f"Work (Smith, 2001) on topic {i}.", "source": "x",
             "all_links_confirmed": True, "cited": [cited("A", "alpha"), cited(f"B{i}", f"beta {i}")]}
            for i in range(6)]
    folder = tmp_path / "cc"
    folder.mkdir()
    source = folder / "cocitations.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    split_file = tmp_path / "split.json"
    split_file.write_text(json.dumps(c2d.make_split(source)))
    bench = c2d.load_context2doc(folder, "test", split_file)
    assert sorted(p.paper_id for p in bench.candidates) == ["A", *(f"B{i}" for i in range(6))]
    recs[4]["cited"][0] = cited("A", "another alpha")  # line 5 gives paper A another title and abstract
    source.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    split_file.write_text(json.dumps(c2d.make_split(source)))
    with pytest.raises(ValueError, match=r"cited paper A has one title and abstract in record L1 and another in "
                                         r"record L5"):
        c2d.load_context2doc(folder, "test", split_file)
