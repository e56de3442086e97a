"""Round 77: `aspire.evaluate.probes.acl_index` parses the ACL file once.

It parsed the 24 MB gzipped file twice: `read_acl` for the split's papers, then `read_records` for every record's
metadata (about 1.7 s of the real file's 7-9 s, measured old against new, alternated). Both now take the records the
caller read (`records=`); `read_acl` leaves them as they were (it replaced the sampled records' abstracts by their
sentences, harmless only while the records were its own)."""

from __future__ import annotations

import copy
import gzip
import json

import pytest

from aspire.benchmarks.acl_formats import read_records
from aspire.data import papers as papers_module
from aspire.data.acl import read_acl
from aspire.data.papers import DataError, jsonl_objects
from tests.test_reliability_round6_mend import _acl_folder
from tests.test_reliability_round28_acl import _write


def _split_for(made_from, tmp_path):
    from aspire.benchmarks.acl_formats import checksum
    from aspire.checksum import file_sha256

    body = {"venue_year": {"train": ["a"], "dev": ["b"], "test": ["c"]}, "same_author": {"test": ["d"]}}
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"splits": body, "checksum": checksum(body), "source_sha256": file_sha256(made_from)}))
    return split


def test_acl_index_parses_the_acl_file_once(fresh, monkeypatch):
    from aspire.evaluate.probes import acl_index

    made_from = _acl_folder(fresh / "made", "abcde")
    split = _split_for(made_from, fresh)
    opened = []
    real = papers_module._open_bytes
    monkeypatch.setattr(papers_module, "_open_bytes", lambda path: opened.append(path) or real(path))
    papers, records = acl_index(made_from.parent, split)
    assert opened == [made_from]  # read_acl's parse, then read_records' second one
    assert sorted(papers) == list("abcd") and sorted(records) == list("abcde")
    assert all(papers[p].sentences == ["x"] for p in papers)
    assert records["e"] == {"paper_id": "e", "title": "Title e", "year": None, "venues": None, "booktitle": None,
                            "authors": None}


def test_read_acl_and_read_records_of_given_records_are_those_of_the_file(fresh):
    rows = [{"paper_id": "A1", "title": "One", "abstract": "First sentence here. Second sentence there.",
             "authors": ["X"], "year": 2001},
            {"paper_id": "A2", "title": "Two", "abstract": "Only sentence of A2 here.", "year": 2002},
            {"paper_id": "A3", "title": "Three", "abstract": "   "},  # not a valid paper: rejected by read_acl
            {"paper_id": "A4", "title": "Four"}]  # no abstract: no record of the formats
    path = _write(fresh / "acl.jsonl", rows)
    records = list(jsonl_objects(path))
    before = copy.deepcopy(records)
    given, given_stats = read_acl(path, frozenset(), 0, {"A1", "A3"}, records)
    assert records == before  # the caller's records keep their abstracts (read_records reads them after)
    read_acl.cache_clear()
    read, stats = read_acl(path, frozenset(), 0, {"A1", "A3"})
    assert given == read and given_stats == stats and stats["used"] == 1 and list(stats["rejected"]) == [f"{path}:3", f"{path}:4"]
    assert given[0].sentences == ["First sentence here.", "Second sentence there."]
    assert read_records(path, records) == read_records(path) and [r["paper_id"] for r in read_records(path)] == [
        "A1", "A2", "A3"]


def test_acl_index_still_names_a_bad_line_and_a_repeated_id(fresh):
    """One parse, the same errors: a line that is not JSON named by file and line, and a paper id on two valid
    records named by `read_acl`, which reads the records first."""
    from aspire.evaluate.probes import acl_index

    made_from = _acl_folder(fresh / "made", "abcd")
    good = gzip.decompress(made_from.read_bytes())
    for body, said in ((good + b"{not json\n", f"{made_from}:5: not a JSON line"),
                       (good + good.splitlines(keepends=True)[0], f"{made_from}: paper id 'a' is used by two records "
                                                                  "(lines 1 and 5)")):
        made_from.write_bytes(gzip.compress(body))
        split = _split_for(made_from, fresh)  # the split of this very file: it is read
        read_acl.cache_clear()
        with pytest.raises((DataError, ValueError)) as err:
            acl_index(made_from.parent, split)
        assert str(err.value).startswith(said), err.value
