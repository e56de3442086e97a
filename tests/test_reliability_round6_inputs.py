"""Inputs a user types or points at (reliability round 6): the ACL reader's sentence cache, sentence selections,
`$ASPIRE_CACHE`, the distance routine's inputs and `aspire data`'s input files. A bad input is an error naming it,
a damaged or stale cache is split again, never read back."""

from __future__ import annotations

import importlib.metadata
import json
import logging

import pytest
import torch

from aspire.cli import data as data_cli
from aspire.data import acl
from aspire.data.facets import parse_selection, resolve_selection
from aspire.paths import cache_root
from aspire.scoring.distance import as_store, cross_l2_cost, gathered_l2_cost, l2_cost


@pytest.fixture()
def acl_file(tmp_path, monkeypatch):
    """A two-paper ACL file with string abstracts, read with a private $ASPIRE_CACHE and a fresh `read_acl`."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acl.jsonl"
    path.write_text("".join(json.dumps({"paper_id": pid, "title": f"Title {pid}", "abstract": "One here. Two there."})
                            + "\n" for pid in ("A1", "A2")))
    acl.read_acl.cache_clear()
    yield path
    acl.read_acl.cache_clear()


def _sentences(path) -> dict:
    acl.read_acl.cache_clear()
    papers, stats = acl.read_acl(path, frozenset(), 0)
    assert stats["rejected"] == {}
    return {p.paper_id: p.sentences for p in papers}


# ---- aspire.data.acl: the split cache ------------------------------------------------------------------------------
@pytest.mark.parametrize("content", ["{broken", "[1, 2]", json.dumps({"A1": [], "A2": {"k": 1}})])
def test_a_damaged_split_cache_is_split_again_with_a_warning(acl_file, content, caplog):
    cache = acl.split_cache_path(acl_file, acl.DEFAULT_SPLITTER)
    cache.parent.mkdir(parents=True)
    cache.write_text(content)  # once: a raw JSONDecodeError, AttributeError ('list'.get) or IndexError
    with caplog.at_level(logging.WARNING, logger="aspire.data.acl"):
        assert _sentences(acl_file) == {"A1": ["One here.", "Two there."], "A2": ["One here.", "Two there."]}
    assert ("sentence cache not used" in caplog.text) == (content != json.dumps({"A1": [], "A2": {"k": 1}}))
    assert sorted(json.loads(cache.read_text())) == ["A1", "A2"]  # rewritten whole


def test_a_cache_entry_holding_no_sentence_list_does_not_reject_the_paper(acl_file):
    _sentences(acl_file)
    cache = acl.split_cache_path(acl_file, acl.DEFAULT_SPLITTER)
    stored = json.loads(cache.read_text())
    stored["A1"][1] = [1, 2]  # the right text hash, a damaged list: the good paper was rejected as a bad record
    cache.write_text(json.dumps(stored))
    assert _sentences(acl_file)["A1"] == ["One here.", "Two there."]


def test_a_cache_folder_that_cannot_be_written_is_a_warning_not_a_failed_run(acl_file, tmp_path, monkeypatch, caplog):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "a-file"))  # no folder can be made under it
    with caplog.at_level(logging.WARNING, logger="aspire.data.acl"):
        assert _sentences(acl_file)["A2"] == ["One here.", "Two there."]  # was a raw FileExistsError
    assert "not cached" in caplog.text


def test_the_split_cache_is_not_read_back_after_the_splitter_changes(acl_file, monkeypatch):
    _sentences(acl_file)
    cache = acl.split_cache_path(acl_file, acl.DEFAULT_SPLITTER)
    stored = json.loads(cache.read_text())
    stored["A1"][1] = ["Cut by the old rules."]
    cache.write_text(json.dumps(stored))
    assert _sentences(acl_file)["A1"] == ["Cut by the old rules."]  # the same splitter: a hit
    real_version = importlib.metadata.version  # pySBD upgraded: its cuts may differ
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "99.0" if name == "pysbd" else real_version(name))
    assert acl.split_cache_path(acl_file, acl.DEFAULT_SPLITTER) != cache
    assert _sentences(acl_file)["A1"] == ["One here.", "Two there."]  # was the old cut, served from the cache


# ---- aspire.data.facets: a typed selection ------------------------------------------------------------------------
def test_a_selection_item_that_only_looks_numeric_is_named_not_an_int_error():
    assert parse_selection("0, -1,--1,²") == [0, -1, "--1", "²"]  # "--1" was int()'s "invalid literal" error
    with pytest.raises(ValueError, match=r"paper 'p' has no '--1' sentence; its labels: method_label"):
        resolve_selection("0,--1", ["method_label", "method_label"], "p")


# ---- aspire.paths ---------------------------------------------------------------------------------------------------
def test_a_tilde_in_aspire_cache_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ASPIRE_CACHE", "~/big/cache")  # quoted in a shell, or a Dockerfile's ENV: not expanded
    assert cache_root() == tmp_path / "home" / "big" / "cache"  # was ./~/big/cache under the working folder


# ---- aspire.scoring.distance ---------------------------------------------------------------------------------------
def test_distances_refuse_two_dtypes_or_shapes_naming_them():
    x, y = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    for fn in (l2_cost, cross_l2_cost):
        for a, b in ((x, y.half()), (x.half(), y), (x, y.double())):  # a raw "expected scalar type" error, or
            with pytest.raises(ValueError, match=f"vectors are {a.dtype} and {b.dtype}"):  # half x: computed in half
                fn(a, b)
        with pytest.raises(ValueError, match=r"expected vectors .*got \(2, 3, 4\), \(2, 5, 3\)"):
            fn(x, torch.randn(2, 5, 3))  # cross_l2_cost: "shape '[10, 4]' is invalid for input of size 30"
        with pytest.raises(ValueError, match=r"got \(3, 4\), \(5, 4\)"):
            fn(x[0], y[0])  # "too many indices" / "not enough values to unpack"
    with pytest.raises(ValueError, match=r"expected vectors \(B, N, D\), \(B, M, D\)"):
        l2_cost(x, y[:1])
    assert cross_l2_cost(x, y[:1]).shape == (2, 1, 3, 5)  # all pairs: any two batch sizes


def test_gathered_distances_refuse_fractional_rows_and_two_dtypes():
    mask = torch.ones(2, 3, dtype=torch.bool)
    (qs, qr), (cs, cr) = as_store(torch.randn(2, 3, 4), mask), as_store(torch.randn(2, 3, 4), mask)
    with pytest.raises(ValueError, match="integer row numbers"):
        gathered_l2_cost(qs, qr + 0.7, cs, cr.float())  # the compiled pass truncated them silently
    with pytest.raises(ValueError, match="vectors are torch.float32 and torch.float64"):
        gathered_l2_cost(qs, qr, cs.double(), cr)
    assert gathered_l2_cost(qs, qr.int(), cs, cr.int()).shape == (2, 3, 3)


# ---- aspire data: input files --------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, option", [
    (["cocite-from-records", "--in", "{dir}"], "--in"),
    (["run-all", "--in", "{dir}"], "--in"),
    (["cocite-from-s2orc", "--fulltext", "{file}", "--abstracts", "{dir}"], "--abstracts"),
])
def test_a_folder_given_for_an_input_file_is_named_before_out_is_made(tmp_path, capsys, argv, option):
    (tmp_path / "file.jsonl").write_text("{}\n")
    argv = [a.format(dir=tmp_path, file=tmp_path / "file.jsonl") for a in argv]
    assert data_cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert f"Is a directory, not a file ({option})" in capsys.readouterr().err  # was "Is a directory: DIR"
    assert not (tmp_path / "out").exists()  # was left behind, empty
