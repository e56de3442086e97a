"""Search arguments are checked at the boundary (issue 29, item 4): a zero or negative `k`, a zero
shortlist, a NaN or non-positive temperature, an out-of-range or empty selection give one clear
SearchArgumentError naming the argument (API) or a one-line error (CLI), never a deep error or an
empty result."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aspire.cli.search import main as search_main
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.search import (
    SearchArgumentError,
    Searcher,
    check_selection,
    checked_search_config,
)

N_PAPERS = 12


def _index() -> SentenceIndex:
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 4, size=N_PAPERS)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    corpus = EncodedCorpus(rng.standard_normal((int(offsets[-1]), 8)).astype(np.float32), offsets,
                           [f"p{i}" for i in range(N_PAPERS)], [f"t{i}" for i in range(N_PAPERS)],
                           [[f"s{i}.{j}" for j in range(c)] for i, c in enumerate(counts.tolist())])
    return SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp", "tiny")


INDEX = _index()
SEARCHER = Searcher(INDEX)
QUERY = SEARCHER.query_from_index("p0")

_INTS = st.one_of(st.integers(-3, 3), st.integers(4, 10**40), st.integers(-(10**40), -4))
_ANY = st.one_of(st.none(), _INTS, st.floats(allow_nan=True), st.booleans(), st.text(max_size=2))


@settings(max_examples=60, deadline=None)
@given(k=_ANY, shortlist=_ANY, rerank=st.sampled_from([None, "none", "minl2", "ot", "bogus"]))
def test_property_search_arguments_are_checked_or_searched(k, shortlist, rerank):
    def valid_count(v):
        return v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)

    ok = valid_count(k) and valid_count(shortlist) and rerank != "bogus"
    if not ok:
        with pytest.raises(SearchArgumentError) as err:
            SEARCHER.search(QUERY, k=k, rerank=rerank, shortlist=shortlist)
        bad = [name for name, good in (("k", valid_count(k)), ("shortlist", valid_count(shortlist)),
                                       ("rerank", rerank != "bogus")) if not good]
        assert str(err.value).split(":")[0] in bad  # names one of the bad arguments
        return
    wanted = 10 if k is None else k
    if (rerank or "none") != "none" and shortlist is not None and shortlist < wanted:  # once fewer than k, unsaid
        with pytest.raises(SearchArgumentError, match=rf"^shortlist \({shortlist}\) must be at least k \({wanted}\)"):
            SEARCHER.search(QUERY, k=k, rerank=rerank, shortlist=shortlist)
        return
    hits = SEARCHER.search(QUERY, k=k, rerank=rerank, shortlist=shortlist)
    assert len(hits) == min(wanted, N_PAPERS - 1)  # never silently empty
    assert all(h.paper_id != "p0" and math.isfinite(h.score) for h in hits)


@given(tau=st.one_of(st.floats(max_value=0.0), st.sampled_from([math.nan, math.inf, -math.inf])),
       name=st.sampled_from(["ot_tau", "ot_eps", "ot_tol", "sentence_k_factor"]))
def test_property_nan_or_non_positive_temperatures_are_refused(tau, name):
    with pytest.raises(SearchArgumentError, match=rf"^{name}: must be"):
        checked_search_config(SEARCHER.config, **{name: tau})
    with pytest.raises(SearchArgumentError, match=rf"^{name}: must be"):
        Searcher(INDEX, replace(SEARCHER.config, **{name: tau}))


@given(selection=st.lists(st.one_of(st.integers(-5, 8), st.floats(0, 3), st.booleans()), max_size=4))
def test_property_selections_are_checked_against_the_paper(selection):
    n = int(QUERY.lengths[0])
    good = (selection and all(isinstance(j, int) and not isinstance(j, bool) and 0 <= j < n for j in selection))
    if good:
        query = SEARCHER.query_from_index("p0", selection)
        assert query.mask[0].nonzero()[:, 0].tolist() == sorted(set(selection))
        assert SEARCHER.search(query, k=3)
    else:  # empty, not integers, or out of range: a ValueError saying so (SearchArgumentError for the range)
        with pytest.raises(ValueError, match=r"(?i)selection|sentences|position|facet"):
            SEARCHER.query_from_index("p0", selection)


def test_check_selection_messages_name_the_paper_and_range():
    with pytest.raises(SearchArgumentError, match=r"positions \[5\] out of range 0\.\.1 for paper x \(2 sentence"):
        check_selection([0, 5], 2, "paper x")
    with pytest.raises(SearchArgumentError, match="empty"):
        check_selection([], 2)
    assert check_selection(None, 2) is None and check_selection([1, 1, 0], 2) == [0, 1]


def test_unknown_argument_and_exhaustive_k_are_checked():
    with pytest.raises(SearchArgumentError, match="unknown search argument"):
        checked_search_config(SEARCHER.config, kk=3)
    with pytest.raises(SearchArgumentError, match="^k: must be >= 1, got 0"):
        SEARCHER.exhaustive(QUERY, k=0)


@pytest.mark.parametrize("args, message", [
    (["--k", "0"], "--k: expected a positive integer, got 0"),  # argparse, at the boundary
    (["--k", "-3"], "--k: expected a positive integer, got -3"),
    (["--shortlist", "0", "--rerank", "ot"], "--shortlist: expected a positive integer, got 0"),
    (["search.k=0"], "error: search.k: must be >= 1, got 0"),  # the config's range, when it loads
    (["search.shortlist=0"], "error: search.shortlist: must be >= 1, got 0"),
    (["search.ot_tau=.nan"], "error: search.ot_tau: must be a finite number, got nan"),
    (["search.ot_tau=0"], "error: search.ot_tau: must be > 0, got 0.0"),
    (["--sentences", "0,7"], "[7] out of range 0.."),
    (["--sentences", "-1"], "[-1] out of range 0.."),
])
def test_cli_rejects_bad_arguments_with_one_line(tmp_path, capsys, args, message):
    INDEX.save(tmp_path / "idx")
    try:
        code = search_main(["--index", str(tmp_path / "idx"), "--query-id", "p0", *args])
    except SystemExit as exit_:  # argparse's own usage error
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err.splitlines()[-1] and "Traceback" not in err


def test_facet_query_on_an_index_whose_model_is_absent(tmp_path, capsys, caplog):
    """A facet-selected indexed query needs no model unless a code is asked for: `auto` answers from the
    index with a warning that the code was not checked; an explicit `--facet-code` names the missing model."""
    labels = [["method_label"] * len(s) for s in INDEX.sentences]
    rng = np.random.default_rng(1)
    corpus = EncodedCorpus(rng.standard_normal((int(INDEX.offsets[-1]), 8)).astype(np.float32), INDEX.offsets,
                           list(INDEX.paper_ids), list(INDEX.titles), [list(s) for s in INDEX.sentences],
                           labels=labels)
    SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp", "tiny").save(tmp_path / "idx")
    args = ["--index", str(tmp_path / "idx"), "--query-id", "p0", "--sentences", "method", "--k", "2", "--json"]
    with caplog.at_level("WARNING"):
        assert search_main(args) == 0
    assert "facet code not checked" in caplog.text and "'tiny'" in caplog.text
    capsys.readouterr()
    assert search_main([*args, "--facet-code", "method"]) == 2
    assert "unknown model 'tiny'" in capsys.readouterr().err
