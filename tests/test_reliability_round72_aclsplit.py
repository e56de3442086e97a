"""Round 72: the SciRepEval formats split only the ACL abstracts their split names. `aspire.evaluate.probes.acl_index`
sentence-split every one of the 59,416 abstracts of the ACL file (about 8 minutes on a first run, nothing said until
the end) for the formats' 2,030 papers; `aspire.data.acl.read_acl` now takes the `ids` it needs, splits only those
(the split cache keeps them, and a later call splits only what it lacks), and says how many it splits when it
starts."""

from __future__ import annotations

import json
import logging

import pytest

from aspire.data import acl
from aspire.data.acl import read_acl
from tests.test_reliability_round6_mend import _acl_folder

IDS = "abcdef"


def _write(path, ids=IDS, text="Sentence one of {pid} here. Sentence two of {pid} there."):
    path.write_text("".join(json.dumps({"paper_id": pid, "title": f"Title {pid}", "year": 2000 + i,
                                        "abstract": text.format(pid=pid)}) + "\n" for i, pid in enumerate(ids)),
                    encoding="utf-8")
    return path


@pytest.fixture()
def split_texts(monkeypatch):
    """The abstracts `read_acl`'s splitter is given, in order."""
    seen = []
    real = acl.get_splitter

    class Counting:
        def __init__(self):
            self.inner = real()

        def split(self, text):
            seen.append(text)
            return self.inner.split(text)

    monkeypatch.setattr(acl, "get_splitter", Counting)
    return seen


def _of(*pids):
    return [f"Sentence one of {pid} here. Sentence two of {pid} there." for pid in pids]


def test_only_the_requested_papers_are_split(fresh, split_texts):
    path = _write(fresh / "acl.jsonl")
    papers, stats = read_acl(path, frozenset(), 0, ids={"d", "b", "zz"})  # an id the file lacks: nothing for it
    assert [p.paper_id for p in papers] == ["b", "d"]  # the file's order
    assert split_texts == _of("b", "d")  # only the requested ones were split (once, every abstract of the file was)
    assert stats["read"] == 6 and stats["used"] == 2


def test_a_later_call_splits_only_the_papers_it_lacks_and_a_full_read_the_rest(fresh, split_texts):
    path = _write(fresh / "acl.jsonl")
    read_acl(path, frozenset(), 0, ids={"b", "d"})
    read_acl.cache_clear()  # the in-memory reading gone: what is reused is the split cache on disk
    papers, _ = read_acl(path, frozenset(), 0, ids={"b", "c", "d"})
    assert [p.paper_id for p in papers] == ["b", "c", "d"]
    assert split_texts == _of("b", "d", "c")
    read_acl.cache_clear()
    full, _ = read_acl(path, frozenset(), 0)  # a cache written for a few papers is no partial answer for all
    assert [p.paper_id for p in full] == list(IDS)
    assert split_texts == _of("b", "d", "c", "a", "e", "f")
    assert all(len(p.sentences) == 2 for p in full)


def test_a_changed_abstract_is_split_again_not_served_stale(fresh, split_texts):
    path = _write(fresh / "acl.jsonl")
    read_acl(path, frozenset(), 0, ids={"b"})
    read_acl.cache_clear()
    _write(path, text="Another text of {pid}. It has three sentences. The last.")
    papers, _ = read_acl(path, frozenset(), 0, ids={"b"})
    assert papers[0].sentences == ["Another text of b.", "It has three sentences.", "The last."]
    assert len(split_texts) == 2


def test_the_requested_papers_are_the_full_reading_s_papers(fresh, tmp_path, monkeypatch):
    path = _write(fresh / "acl.jsonl", ids=[f"p{i}" for i in range(20)])
    full, full_stats = read_acl(path, frozenset({"titlep3"}), 8)  # held out, then a sample of 8
    wanted = {p.paper_id for p in full[::2]} | {"p3", "nope"}  # p3 is held out: it stays out
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "other-cache"))  # split afresh, not read from the full split
    read_acl.cache_clear()
    some, stats = read_acl(path, frozenset({"titlep3"}), 8, ids=wanted)
    expected = [p for p in full if p.paper_id in wanted]
    assert some == expected and [p.extra for p in some] == [p.extra for p in expected] and len(some) == 4
    assert stats == {**full_stats, "used": 4}


def test_ids_given_as_one_string_are_refused(fresh):
    with pytest.raises(TypeError, match="ids must be a collection of paper ids, got one str 'abc'"):
        read_acl(_write(fresh / "acl.jsonl"), frozenset(), 0, ids="abc")


def test_a_split_says_how_many_abstracts_it_splits_when_it_starts(fresh, caplog, split_texts):
    path = _write(fresh / "acl.jsonl")
    with caplog.at_level(logging.INFO, logger="aspire.data.acl"):
        read_acl(path, frozenset(), 0)
        said = [r.getMessage() for r in caplog.records]
        started = [i for i, m in enumerate(said) if m.startswith("splitting 6 abstracts of ")]
        done = [i for i, m in enumerate(said) if m.startswith("split 6 abstracts of ")]
        assert started and done and started[0] < done[0], said  # the end was the only word of an 8-minute split
        assert "cached" in said[started[0]]
        read_acl.cache_clear()
        caplog.clear()
        read_acl(path, frozenset(), 0)  # all cached: nothing to split, nothing said
        assert not [r for r in caplog.records if "split" in r.getMessage()]


def test_the_formats_index_splits_only_the_papers_their_split_names(tmp_path, monkeypatch, split_texts):
    from aspire.benchmarks.acl_formats import checksum
    from aspire.checksum import file_sha256
    from aspire.evaluate.probes import acl_index

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    read_acl.cache_clear()
    made_from = _acl_folder(tmp_path / "made", "abcdefgh")
    body = {"venue_year": {"train": ["a"], "dev": ["b"], "test": ["c"]}, "same_author": {"test": ["d"], "dev": ["e"]}}
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"splits": body, "checksum": checksum(body), "source_sha256": file_sha256(made_from)}))
    try:
        papers, records = acl_index(made_from.parent, split)
        assert sorted(papers) == list("abcde") and sorted(records) == list("abcdefgh")
        assert len(split_texts) == 5  # f, g and h are in no split: not split
        every, _ = acl_index(made_from.parent, split, every_paper=True)  # experiments/same_work_pools.py's
        assert sorted(every) == list("abcdefgh") and len(split_texts) == 8
        assert all(every[p] == papers[p] for p in papers)
    finally:
        read_acl.cache_clear()
