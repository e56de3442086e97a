"""Round 54, bare NaN / Infinity / -Infinity in JSON files that aspire itself writes. Python's json reads them as
floats, but aspire's writers (`aspire.io.write_json`, `write_jsonl`, `aspire.jsonsafe.dumps`) never write them (a
non-finite number becomes null with a "non_finite" note), so one in such a file is damage or hand editing and was
read as data silently. `aspire.io`'s readers take `finite=True` to refuse them naming the file (and line) and the
constant; the readers of files that aspire writes only through those writers pass it (results files of the
evaluations, a shard's rejected.jsonl, the ACL sentence cache); third-party inputs stay permissive (a shard's
shard.json, written with plain `json.dumps`, was too until round 57: tests/test_reliability_round57_jsonfinite.py)."""

import json
import logging

import numpy as np
import pytest

from aspire.data import acl
from aspire.evaluate.fuse import check_csfcube_data, results_doc
from aspire.evaluate.probes import check_probe_results, compare_probe_results
from aspire.index.corpus import EncodedCorpus
from aspire.io import DataError, iter_checked_jsonl, iter_jsonl, loads_unique, read_json, read_jsonl, write_json
from tests.test_reliability_round6_inputs import acl_file  # noqa: F401 (a fixture)

CONSTANTS = ["NaN", "Infinity", "-Infinity"]


# ---- aspire.io: the `finite` keyword --------------------------------------------------------------------------------
@pytest.mark.parametrize("constant", CONSTANTS)
def test_read_json_finite_refuses_a_bare_constant_naming_file_and_constant(tmp_path, constant):
    path = tmp_path / "results.json"
    path.write_text('{"MAP": ' + constant + "}", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"results\.json: the results file holds a bare {constant}, which is not JSON"):
        read_json(path, "results file", finite=True)
    assert not np.isfinite(read_json(path, "results file")["MAP"])  # default (third-party files): as before


@pytest.mark.parametrize("constant", CONSTANTS)
def test_iter_jsonl_finite_refuses_a_bare_constant_naming_file_line_and_constant(tmp_path, constant):
    path = tmp_path / "examples.jsonl"
    path.write_text('{"a": 1}\n\n{"a": [1, ' + constant + "]}\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"examples\.jsonl:3: a bare {constant}, which is not JSON"):
        list(iter_jsonl(path, finite=True))
    with pytest.raises(DataError, match=rf"examples\.jsonl:3: a bare {constant}"):
        read_jsonl(path, finite=True)
    bad = []
    assert list(iter_checked_jsonl(path, lambda o, p, n: None, "skip", bad, finite=True)) == [(1, {"a": 1})]
    assert len(bad) == 1 and f"examples.jsonl:3: a bare {constant}" in bad[0]
    assert [n for n, _ in iter_jsonl(path)] == [1, 3]  # default: read as before


def test_loads_unique_finite_keeps_strings_and_finite_numbers():
    text = '{"t": "NaN Infinity", "x": 1e308, "y": -0.0, "z": [1, 2.5]}'
    assert loads_unique(text, finite=True) == json.loads(text)
    with pytest.raises(ValueError, match="a bare NaN"):
        loads_unique('{"x": NaN}', finite=True)
    with pytest.raises(ValueError, match="twice"):  # the repeated-key check still applies with finite
        loads_unique('{"x": 1, "x": 2}', finite=True)


def test_what_aspire_writes_reads_back_with_finite(tmp_path):
    write_json(tmp_path / "r.json", {"MAP": float("nan"), "ok": 1.5})
    assert read_json(tmp_path / "r.json", "results file", finite=True) == {"MAP": None, "ok": 1.5,
                                                                            "non_finite": {"MAP": "nan"}}


# ---- the wired readers ----------------------------------------------------------------------------------------------
def test_fuse_results_doc_refuses_a_bare_nan_naming_the_file(tmp_path):
    (tmp_path / "results.json").write_text('{"benchmark": "csfcube", "MAP": NaN}')
    with pytest.raises(ValueError, match=r"results\.json: the results file holds a bare NaN"):
        results_doc(tmp_path)  # was {"MAP": nan} read as a score


def test_fuse_check_csfcube_data_refuses_a_bare_infinity_naming_the_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text('{"benchmark": "csfcube", "MAP": Infinity}')
    with pytest.raises(ValueError, match=r"run/results\.json: the results file holds a bare Infinity"):
        check_csfcube_data([run], tmp_path / "no-csfcube-read")  # was None: nothing recorded, root not read


def _probe_results(path, value: str):
    path.mkdir()
    (path / "results.json").write_text('{"format": "venue", "representations": {"cls": {"test": {"macro-F1": '
                                       + value + "}}}}")
    return path


def test_probe_compare_check_refuses_a_bare_nan_naming_the_file(tmp_path):
    run = _probe_results(tmp_path / "run", "NaN")
    with pytest.raises(ValueError, match=r"--compare .*run: .*results\.json: the results file holds a bare NaN"):
        check_probe_results(run, "venue")  # was accepted: compared against after the run


def test_compare_probe_results_refuses_a_bare_constant_naming_the_file(tmp_path):
    a, b = _probe_results(tmp_path / "a", "-Infinity"), _probe_results(tmp_path / "b", "0.5")
    with pytest.raises(ValueError, match=r"a/results\.json: the results file holds a bare -Infinity"):
        compare_probe_results(a, b)


def _shard(tmp_path):
    corpus = EncodedCorpus(np.ones((2, 4), np.float32), np.array([0, 1, 2]), ["p1", "p2"], ["t1", "t2"],
                           [["s1."], ["s2."]], rejected=[{"paper_id": "p3", "reason": "no abstract"}])
    return corpus.save_shard(tmp_path / "shard", {"model_name": "m", "model_fingerprint": "fp"})


def test_load_shard_refuses_a_bare_nan_in_rejected_naming_the_file_and_line(tmp_path):
    path = _shard(tmp_path)
    loaded, _ = EncodedCorpus.load_shard(path)
    assert loaded.rejected == [{"paper_id": "p3", "reason": "no abstract"}]
    (path / "rejected.jsonl").write_text('{"paper_id": "p3", "reason": "no abstract", "score": NaN}\n')
    with pytest.raises(ValueError, match=r"rejected\.jsonl:1: a bare NaN"):
        EncodedCorpus.load_shard(path)  # was read as a rejected record holding nan


def test_acl_sentence_cache_with_a_bare_nan_is_not_used_and_is_named(acl_file, caplog):  # noqa: F811 (fixture)
    papers, _ = acl.read_acl(acl_file, frozenset(), 0)
    cache = acl.split_cache_path(acl_file, acl.DEFAULT_SPLITTER)
    stored = json.loads(cache.read_text())
    stored["A1"][1] = ["Cut by hand."]  # a hit if the cache is used
    cache.write_text(json.dumps(stored)[:-1] + ', "junk": NaN}')
    acl.read_acl.cache_clear()
    with caplog.at_level(logging.WARNING, logger="aspire.data.acl"):
        papers, _ = acl.read_acl(acl_file, frozenset(), 0)
    assert "sentence cache not used" in caplog.text and cache.name in caplog.text and "bare NaN" in caplog.text
    assert {p.paper_id: p.sentences for p in papers}["A1"] == ["One here.", "Two there."]  # split again
    assert sorted(json.loads(cache.read_text())) == ["A1", "A2"]  # rewritten whole, the damage gone


# ---- real data --------------------------------------------------------------------------------------------------
def test_real_shared_files_hold_no_bare_constant(shared_data):
    """The published JSON files read through aspire.io hold no bare constant (read with `finite=True`); the
    default-permissive readers of third-party files lose nothing by it."""
    files = sorted((shared_data / "csfcube").rglob("*.json")) + sorted((shared_data / "reviewer-matching").rglob("*.json"))
    assert len(files) > 20
    for path in files:
        read_json(path, "file", finite=True)
    assert len(read_jsonl(shared_data / "cocite-acl" / "cocitations.jsonl", finite=True)) > 0


def test_real_acl_papers_split_cache_round_trips_through_the_finite_reader(shared_data, tmp_path, monkeypatch):
    """A real ACL file's abstracts, split and cached, read back from the cache (finite) with no warning."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    lines = []
    import gzip
    with gzip.open(shared_data / "acl-anthology" / "papers.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            lines.append(line)
            if len(lines) == 20:
                break
    path = tmp_path / "acl.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    acl.read_acl.cache_clear()
    try:
        first, _ = acl.read_acl(path, frozenset(), 0)
        cache = acl.split_cache_path(path, acl.DEFAULT_SPLITTER)
        assert cache.is_file()
        assert read_json(cache, "sentence cache", mapping=True, finite=True)
        acl.read_acl.cache_clear()
        second, _ = acl.read_acl(path, frozenset(), 0)
    finally:
        acl.read_acl.cache_clear()
    assert [p.sentences for p in second] == [p.sentences for p in first] and len(first) > 0


def test_two_fold_load_refuses_a_bare_nan_naming_the_file(tmp_path):
    """The two-fold protocol read results.json with plain json.loads: a bare NaN figure was read as data (the lead's
    mend beside round 54's readers)."""
    from aspire.evaluate.two_fold import load

    (tmp_path / "results.json").write_text('{"folds": {"a": {"MAP": NaN}}}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"results\.json: not a results file .*NaN"):
        load(tmp_path)
    (tmp_path / "results.json").write_text('{"folds": {"a": {"MAP": 1.0}}}', encoding="utf-8")
    assert load(tmp_path)["folds"]["a"]["MAP"] == 1.0
