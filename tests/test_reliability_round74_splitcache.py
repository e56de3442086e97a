"""Round 74: the ACL sentence-split cache under two writers, and `acl_index`'s one read of the split file.

`aspire.data.acl.read_acl` read the split cache, split what it lacked and wrote back what it had read plus its own:
a second reader (another suite run, another torchrun rank) that wrote in between lost its entries to the last
write (split again by a later run, never stale). The write now reads the cache again and keeps the other writer's
entries (this reader's own split wins), under a lock file that a read-only folder or a lock held too long makes a
warning, not a failed run. `aspire.evaluate.probes.acl_index` read and checked the split file twice (`check_source`,
then `load_split`); `check_source` returns the split it read."""

from __future__ import annotations

import fcntl
import json
import logging

from aspire.data import acl
from aspire.data.acl import read_acl, split_cache_path
from aspire.data.sentences import DEFAULT_SPLITTER
from tests.test_reliability_round6_mend import _acl_folder
from tests.test_reliability_round28_acl import _write

TEXTS = {pid: f"First sentence of {pid} here. Second sentence of {pid} there." for pid in ("A1", "A2", "A3", "A4")}


def _acl(fresh):
    return _write(fresh / "acl.jsonl", [{"paper_id": pid, "title": f"Title {pid}", "abstract": text}
                                        for pid, text in TEXTS.items()])


def _between_read_and_write(monkeypatch, meanwhile):
    """`read_acl`'s splitter, running `meanwhile()` once, at its first split: after this reader read the cache and
    before it writes it, as a second writer would."""
    real = acl.get_splitter
    pending = [meanwhile]

    class Interleaved:
        def __init__(self):
            self.inner = real()

        def split(self, text):
            if pending:
                pending.pop()()
            return self.inner.split(text)

    monkeypatch.setattr(acl, "get_splitter", Interleaved)


def _expected(pid):
    return [f"First sentence of {pid} here.", f"Second sentence of {pid} there."]


def test_two_readers_that_split_at_once_both_keep_their_entries(fresh, monkeypatch):
    path = _acl(fresh)
    cache = split_cache_path(path, DEFAULT_SPLITTER)
    other = []
    _between_read_and_write(monkeypatch, lambda: other.append(read_acl(path, frozenset(), 0, {"A3", "A4"})))
    papers, _ = read_acl(path, frozenset(), 0, {"A1", "A2"})
    assert [p.paper_id for p in papers] == ["A1", "A2"] and [p.paper_id for p in other[0][0]] == ["A3", "A4"]
    stored = json.loads(cache.read_text())
    assert sorted(stored) == ["A1", "A2", "A3", "A4"], stored  # A3 and A4, the other's, were lost to our write
    assert all(stored[pid][1] == _expected(pid) for pid in TEXTS)
    split_again = []
    monkeypatch.setattr(acl, "get_splitter", lambda: split_again.append(1))
    read_acl.cache_clear()
    every, _ = read_acl(path, frozenset(), 0)  # all four from the cache: no splitter is built
    assert split_again == [] and {p.paper_id: p.sentences for p in every} == {pid: _expected(pid) for pid in TEXTS}


def test_our_split_wins_over_another_writers_entry_and_what_we_read_stays(fresh, monkeypatch):
    path = _acl(fresh)
    cache = split_cache_path(path, DEFAULT_SPLITTER)
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"Z0": ["aaaaaaaaaaaa", ["Read before."]]}))

    def other_writer():  # its file: its own entries only, one of them for our A1 under another text's hash
        cache.write_text(json.dumps({"A1": ["bbbbbbbbbbbb", ["Another text's cut."]], "Z9": ["cccccccccccc", ["Kept."]]}))

    _between_read_and_write(monkeypatch, other_writer)
    papers, _ = read_acl(path, frozenset(), 0, {"A1"})
    assert [p.sentences for p in papers] == [_expected("A1")]
    stored = json.loads(cache.read_text())
    assert stored["Z9"] == ["cccccccccccc", ["Kept."]], stored  # the other writer's entry was lost
    assert stored["Z0"] == ["aaaaaaaaaaaa", ["Read before."]]
    assert stored["A1"][1] == _expected("A1") and stored["A1"][0] != "bbbbbbbbbbbb"  # the text we split
    assert sorted(stored) == ["A1", "Z0", "Z9"]


def test_a_cache_lock_held_too_long_is_a_warning_naming_the_cache_not_a_hang(fresh, monkeypatch, caplog):
    path = _acl(fresh)
    cache = split_cache_path(path, DEFAULT_SPLITTER)
    cache.parent.mkdir(parents=True)
    monkeypatch.setattr(acl, "SPLIT_CACHE_WAIT_S", 0.2, raising=False)  # none before this round
    with open(cache.with_name(f"{cache.name}.lock"), "w") as held:  # another process's write, never ending
        fcntl.flock(held, fcntl.LOCK_EX)
        with caplog.at_level(logging.WARNING, logger="aspire.data.acl"):
            papers, stats = read_acl(path, frozenset(), 0)
    assert {p.paper_id: p.sentences for p in papers} == {pid: _expected(pid) for pid in TEXTS}
    assert stats["rejected"] == {} and not cache.exists()
    said = [r.getMessage() for r in caplog.records if "not cached" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"split abstracts of {path} not cached: {cache} (") and (
        f"{cache}.lock" in said[0]), said  # the cache, and the lock file (filelock's Timeout)


def test_acl_index_reads_the_split_file_once(tmp_path, monkeypatch):
    from aspire.benchmarks import acl_formats
    from aspire.benchmarks.acl_formats import checksum
    from aspire.checksum import file_sha256
    from aspire.evaluate.probes import acl_index

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    made_from = _acl_folder(tmp_path / "made", "abcd")
    body = {"venue_year": {"train": ["a"], "dev": ["b"], "test": ["c"]}, "same_author": {"test": ["d"]}}
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"splits": body, "checksum": checksum(body), "source_sha256": file_sha256(made_from)}))
    loaded = []
    real = acl_formats.load_split
    monkeypatch.setattr(acl_formats, "load_split", lambda split_file: loaded.append(split_file) or real(split_file))
    read_acl.cache_clear()
    try:
        papers, records = acl_index(made_from.parent, split)
    finally:
        read_acl.cache_clear()
    assert sorted(papers) == list("abcd") and sorted(records) == list("abcd")
    assert loaded == [split]  # read (and checked against its checksum) twice
    assert acl_formats.check_source(made_from, split) == real(split)  # the split check_source read, returned
