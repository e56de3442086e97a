"""The page server, round 79: `aspire serve` refuses a search.ot_tau override outside the temperatures a page request
may ask (the page then refused its own default temperature; below about 1e-39, before round 78's shifted OT weights,
every OT search was a 500 too), and
refuses a --corpus that is a folder by its option, before the index loads (it was refused only after the index and
the cross-encoder had loaded, naming no option)."""

from __future__ import annotations

import re

import pytest
from serve_support import PAPERS, build_index, request, running
from test_reliability_round6_serve import no_serving  # noqa: F401 - a fixture: `aspire serve` returns, not serves

import aspire.serve.reload as reload
from aspire.encoders import load_encoder
from aspire.serve import open_service
from aspire.serve.__main__ import main as serve_main
from aspire.serve.requests import MAX_TAU, MIN_TAU


@pytest.fixture(scope="module")
def index(tiny_model_dir, tmp_path_factory):
    return build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path_factory.mktemp("round79") / "index", "tiny")


@pytest.mark.parametrize("tau", ["1e-40", "20000"])
def test_serve_refuses_an_ot_tau_outside_what_a_request_may_ask(index, capsys, no_serving, tau):  # noqa: F811
    # once served: the page refused to send its own default ("Temperature 20000 is out of range"; 1e-40 likewise)
    message = (f"search.ot_tau={float(tau):g}: the page serves OT temperatures in [{MIN_TAU:g}, {MAX_TAU:g}] "
               "(a request's tau too)")
    with pytest.raises(ValueError, match=re.escape(message)):
        open_service(index, ["search.rerank=ot", f"search.ot_tau={tau}"])
    assert serve_main(["--index", str(index), "--port", "0", "search.rerank=ot", f"search.ot_tau={tau}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {message}"


def test_an_ot_tau_within_the_page_s_range_is_served_as_its_default(index):
    service = open_service(index, ["search.rerank=ot", f"search.ot_tau={MAX_TAU:g}", "search.k=2"])
    assert service.info()["ot"]["tau"] == MAX_TAU
    with running(service) as srv:
        status, _, _ = request(srv, "POST", "/api/search", {"paper_id": "q", "sentences": [0, 1], "tau": MAX_TAU})
    assert status == 200  # the default the page shows is one it may send


def test_serve_refuses_a_corpus_folder_by_its_option_before_the_index_loads(index, capsys, monkeypatch,
                                                                           no_serving):  # noqa: F811
    opened = []
    real = reload.open_service
    monkeypatch.setattr(reload, "open_service", lambda *a, **k: opened.append(a) or real(*a, **k))
    assert serve_main(["--index", str(index), "--port", "0", "--corpus", str(index)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: Is a directory, not a file (--corpus): {index}"
    assert opened == []  # refused before the index (and a cross-encoder) load


def test_an_index_whose_saved_ot_tau_is_outside_the_page_s_range_is_refused_unless_overridden(tmp_path,
                                                                                             tiny_model_dir):
    """Round 80: only an override was checked; an index whose own saved search config held ot_tau 1e-7 was served,
    and the page showed that default and refused to send it."""
    from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex, encode_corpus, model_fingerprint
    from aspire.index.config import SearchConfig

    encoder = load_encoder(tiny_model_dir)
    out = tmp_path / "index"
    config = IndexBuildConfig(index=IndexConfig(kind="flat"), search=SearchConfig(ot_tau=1e-7))
    SentenceIndex.build(encode_corpus(encoder, PAPERS, progress=False), config, model_fingerprint(encoder),
                        "tiny").save(out)
    with pytest.raises(ValueError, match=re.escape(f"{out}: its search config has ot_tau=1e-07, outside the OT "
                                                   f"temperatures the page serves [{MIN_TAU:g}, {MAX_TAU:g}]")):
        open_service(out)
    assert open_service(out, ["search.ot_tau=0.5"]).info()["ot"]["tau"] == 0.5  # the override serves it
