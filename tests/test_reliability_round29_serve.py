"""The page server's framing and the command-line pieces, round 29 (correctness).

Fixed: a request whose body h11 refuses after taking its head (a bad chunk header) was answered 400 by the protocol
and then the app's own answer was sent to h11 too, which refused it: the server logged an internal error with a
traceback (and uvicorn "returned without completing response") for a client's mistake; `make_server` took any
timeout (a head_timeout <= 0 closed connections unanswered, a body_timeout <= 0 answered every search 408, NaN set
no deadline). Checked as they are: malformed requests each get a JSON error naming the key, and the server goes on;
a search's answer read back as JSON is the Searcher's; `aspire evaluate`'s scorer options are refused (named) for a
scorer that does not read them, and its defaults are the documented ones; the demo's table is made of the figures
of the runs it just ran."""

from __future__ import annotations

import inspect
import json
import math

import pytest
from serve_support import PAPERS, LogRecords, encoder_fixture, index_fixture, raw_exchange, request, running  # noqa: F401 (fixtures encoder, index)

from aspire.serve import make_server, open_service

OVERRIDES = ["k=3", "ot_max_iter=100"]


@pytest.fixture(scope="module")
def service(index):
    return open_service(index, OVERRIDES)


@pytest.fixture(scope="module")
def server(service):
    with running(service) as srv:
        yield srv


def answers(reply: bytes) -> list[tuple[int, bytes]]:
    """The (status, body) of each response in `reply`, by its Content-Length."""
    out = []
    while reply:
        head, _, rest = reply.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        size = int(headers["content-length"])
        out.append((int(lines[0].split(" ", 2)[1]), rest[:size]))
        reply = rest[size:]
    return out


def post(body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (b"POST /api/search HTTP/1.1\r\nHost: t\r\nContent-Type: " + ctype + b"\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body))


# ---- fixed: a body h11 refuses is answered once, without a traceback ----------------------------------------------

CHUNKED_HEADS = {
    "search": b"POST /api/search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    "reload": b"POST /api/reload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
    "info": b"GET /api/info HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
}


@pytest.mark.parametrize("route", list(CHUNKED_HEADS))
def test_a_bad_chunk_after_the_head_is_one_json_400_and_no_traceback(server, route):
    """The head and a bad chunk header in one packet: h11 takes the head (the app's task is started) then refuses the
    chunk. Once the protocol's 400 went out and then the app's answer (411 / 400) was sent to h11, which refused it:
    'request POST /api/search failed' with a LocalProtocolError traceback, and uvicorn's 'ASGI callable returned
    without completing response', for a client's mistake."""
    with LogRecords() as logs:
        reply = raw_exchange(server, CHUNKED_HEADS[route] + b"zz\r\n")
        for _ in range(3):  # the app's late answer has long run by the end of three more exchanges
            assert request(server, "GET", "/api/info")[0] == 200  # and the server goes on
    got = answers(reply)
    assert [status for status, _ in got] == [400]
    assert json.loads(got[0][1])["error"].startswith("bad request: illegal chunk header")
    assert logs.tracebacks() == []


# ---- fixed: the server's timeouts are checked ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["head_timeout", "body_timeout"])
@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, True, "5"])
def test_make_server_refuses_a_timeout_that_is_no_deadline(service, name, value):
    """Once taken as given: head_timeout=0 closed connections before their answer, body_timeout=0 answered every
    search 408 ('no more within 0 s'), NaN set no deadline at all."""
    with pytest.raises(ValueError, match=f"{name} must be a finite number of seconds > 0"):
        make_server(service, "127.0.0.1", 0, **{name: value})


def test_short_timeouts_are_taken(service):
    srv = make_server(service, "127.0.0.1", 0, head_timeout=0.5, body_timeout=2)
    srv.server_close()


# ---- checked: malformed requests each get a JSON error naming what is wrong; the loop goes on ----------------------

MALFORMED = [  # (raw request, status, words the error must hold)
    (post(b"{"), 400, "not valid JSON"),
    (post(b"[1]"), 400, "must be a JSON object, got an array"),
    (post(b'{"sentences": [0]}'), 400, "paper_id is required"),
    (post(b'{"paper_id": "q", "sentences": [0], "k": "3"}'), 400, "k must be an integer in 1..50"),
    (post(b'{"paper_id": "q", "sentences": [0], "k": 3.0}'), 400, "k must be an integer"),
    (post(b'{"paper_id": "q", "sentences": [0], "k": 0}'), 400, "k must be an integer in 1..50; got 0"),
    (post(b'{"paper_id": "q", "sentences": ["a"]}'), 400, "sentences must be"),
    (post(b'{"paper_id": "q", "sentences": [99]}'), 400, "sentence positions [99] out of range 0..2 for paper 'q'"),
    (post(b'{"paper_id": "q", "sentences": [-1]}'), 400, "sentence positions [-1] out of range"),
    (post(b'{"paper_id": "zz", "sentences": [0]}'), 404, "unknown paper_id 'zz'"),
    (post(b'{"paper_id": "q", "sentences": [0], "foo": 1}'), 400, "unknown field(s) 'foo'; valid: paper_id"),
    (post(b'{"paper_id": "q", "sentences": [0], "tau": -1}'), 400, "tau must be a number in"),
    (post(b'{"paper_id": "q", "sentences": [0], "tau": NaN}'), 400, "NaN, which is not JSON"),
    (post(b'{"paper_id": "q", "sentences": [12345678901234567890]}'), 400, "integer of 20 digits"),
    (post(b"[" * 5000 + b"]" * 5000), 400, "nested too deeply"),
    (post(b'{"paper_id": "' + b"x" * 17000 + b'"}'), 413, "too large (at most 16384)"),
    (post(b"{}", b"text/plain"), 415, "must be JSON"),
    (post(b'{"paper_id": "\xff", "sentences": [0]}'), 400, "not valid JSON"),
    (b"GARBAGE\r\n\r\n", 400, "bad request: illegal request line"),
    (b"GET /api/info HTTP/1.1\r\nHost: t\r\nno colon\r\n\r\n", 400, "bad request: illegal header line"),
    (b"POST /api/search HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n", 400, "bad request: bad Content-Length"),
    (b"POST /api/search HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "bad request: Only Transfer"),
    (b"GET /api/info HTTP/1.1\r\n\r\n", 400, "Host"),
    (b"GET /api/papers?limit=abc HTTP/1.1\r\nHost: t\r\n\r\n", 400, "limit must be an integer in 1..100; got 'abc'"),
    (b"GET /api/papers?foo=1 HTTP/1.1\r\nHost: t\r\n\r\n", 400, "unknown field(s) 'foo'"),
]


def test_malformed_requests_each_get_a_json_error_naming_the_key(server):
    with LogRecords() as logs:
        for raw, status, words in MALFORMED:
            got = answers(raw_exchange(server, raw))
            assert len(got) == 1 and got[0][0] == status, (raw[:60], got)
            assert words in json.loads(got[0][1])["error"], (raw[:60], got)
        assert request(server, "GET", "/api/info")[0] == 200
    assert logs.tracebacks() == []


def test_a_search_answer_round_trips_as_the_searchers(server, service):
    """The JSON a client reads back: the hits `Searcher.search` ranks for the same query, in order, and the request's
    own fields echoed."""
    status, ctype, body = request(server, "POST", "/api/search", {"paper_id": "q", "sentences": [0, 2], "k": 2})
    assert status == 200 and ctype.startswith("application/json")
    answer = json.loads(body)
    searcher = service.searcher
    hits = searcher.search(searcher.query_from_index("q", [0, 2]), k=2)
    assert [(h["rank"], h["paper_id"]) for h in answer["hits"]] == [(h.rank, h.paper_id) for h in hits]
    assert [h["score"] for h in answer["hits"]] == pytest.approx([h.score for h in hits], rel=1e-6)
    assert (answer["paper_id"], answer["sentences"], answer["k"]) == ("q", [0, 2], 2)
    titles = {p.paper_id: p.title for p in PAPERS}
    assert all(h["title"] == titles[h["paper_id"]] for h in answer["hits"])


# ---- checked: evaluate's options ------------------------------------------------------------------------------------

def _args(argv):
    from aspire.cli.evaluate import build_parser

    return build_parser().parse_args(argv)


def test_each_scorer_option_is_read_by_exactly_the_scorers_the_table_names():
    """SCORER_OPTION_READERS against the scorers' own signatures (the reference), and `eval_options` refuses an option
    to any other scorer, naming it."""
    from aspire.cli.evaluate_options import SCORER_OPTION_READERS, eval_options
    from aspire.scoring import SCORERS

    for flag, readers in SCORER_OPTION_READERS.items():
        takes = tuple(n for n, cls in SCORERS.items() if flag[2:] in inspect.signature(cls).parameters)
        assert sorted(readers) == sorted(takes), flag
        value = "2"
        for scorer in (*SCORERS, "abstract"):
            args = _args(["csfcube", "--data", "x", "--model", "m", "--scorer", scorer, flag, value, "--out", "o"])
            if scorer in readers:
                assert eval_options(args).scorer_options == {flag[2:]: float(value) if flag != "--window" else 2}
            else:
                with pytest.raises(ValueError, match=f"{flag} goes with --scorer .*; {scorer} does not read it"):
                    eval_options(args)


def test_evaluate_defaults_are_the_documented_ones():
    from aspire.cli.evaluate_options import eval_options, stage_options
    from aspire.scoring import SCORERS

    args = _args(["csfcube", "--data", "x", "--model", "m", "--scorer", "ot", "--out", "o"])
    options, stages = eval_options(args), stage_options(args.command_parser, args)
    assert (options.encoding, options.batch_size, options.scorer_options, options.query_text,
            options.cand_sentences, options.facet_code) == ("contextual", 32, {}, "abstract", "all", "auto")
    assert (stages.bm25, stages.alpha, stages.k1, stages.b, stages.rerank) == (False, None, 1.25, 0.75, None)
    assert inspect.signature(SCORERS["maxpassage"]).parameters["window"].default == 1  # "--window (default 1)"


@pytest.mark.parametrize("extra, words", [
    (["--tau", "0"], "--tau must be > 0"),
    (["--eps", "nan"], "--eps must be > 0"),
    (["--window", "0"], "argument --window: expected a positive integer"),
    (["--batch-size", "0"], "argument --batch-size: expected a positive integer"),
    (["--k1", "2"], "--k1/--b set BM25: give --bm25"),
    (["--rerank-top", "3"], "--rerank-top/--rerank-weight/--rerank-max-length go with --rerank MODEL"),
])
def test_evaluate_option_values_out_of_range_are_refused_by_name(extra, words, capsys):
    from aspire.cli.evaluate_options import eval_options, stage_options

    scorer = "maxpassage" if "--window" in extra else "ot"
    message = None
    try:
        args = _args(["csfcube", "--data", "x", "--model", "m", "--scorer", scorer, "--out", "o", *extra])
        eval_options(args)
        stage_options(args.command_parser, args)
    except ValueError as err:
        message = str(err)
    except SystemExit:
        message = capsys.readouterr().err
    assert message is not None and words in message


# ---- checked: the demo's table is made of the runs it ran ---------------------------------------------------------

def test_the_demos_table_holds_the_figures_of_the_runs_it_ran(monkeypatch, tmp_path, capsys, shared_data):
    """Each row the figures `run_csfcube` returned for that row's model, scorer and options (a fake runner whose
    figures depend on them), in RUNS order; a second demo with another model shows that model's figures."""
    import aspire.evaluate.csfcube as csfcube
    from aspire import demo

    calls = []

    def fake_run(root, model, scorer, out, options=None):
        calls.append((model, scorer, out, options))
        base = 10.0 * len(calls) + (0.5 if model == "other" else 0.0)
        return {"test": {g: {"MAP": base + i, "NDCG%20": base + i + 0.25} for i, g in enumerate(demo.SPECTER)},
                "timings_s": {"load_model": 0.0, "encode": 0.0, "score": 0.0}}

    monkeypatch.setattr(csfcube, "run_csfcube", fake_run)
    monkeypatch.setattr(demo, "check_model", lambda name: None)
    for model in ("first", "other"):
        calls.clear()
        out = tmp_path / model
        assert demo.main(["--model", model, "--data", str(shared_data / "csfcube"), "--out", str(out), "--cache-dir",
                          str(tmp_path / "cache"), "--aspect-model", "none", "--backend", "torch",
                          "--batch-size", "7"]) == 0
        table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
        assert len(table) == 2 + len(demo.RUNS) and len(calls) == len(demo.RUNS)
        for n, (row, (label, scorer, options, encoding), (m, s, o, opts)) in enumerate(zip(table[2:], demo.RUNS, calls)):
            base = 10.0 * (n + 1) + (0.5 if model == "other" else 0.0)
            assert (m, s, o) == (model, scorer, out / scorer)
            assert (opts.encoding, opts.scorer_options, opts.batch_size, opts.cache_dir) == (
                encoding, options, 7, str(tmp_path / "cache"))
            assert row == f"| {model} {label} | " + " | ".join(
                f"{base + i:.2f} / {base + i + 0.25:.2f}" for i in range(len(demo.SPECTER))) + " |"


def test_the_demos_docstring_settings_are_the_ones_it_runs():
    """The module notes: min-L2, OT at tau = 5000 with eps = 0.05 (the OT scorer's default), the whole-abstract vector
    and the hybrid, each from the contextual pass; SPECTER's row is the data README's known answer."""
    from aspire import demo
    from aspire.scoring import SCORERS

    assert [(s, o) for _, s, o, _ in demo.RUNS] == [("minl2", {}), ("ot", {"tau": 5000.0}), ("abstract", {}),
                                                   ("hybrid", {})]
    assert inspect.signature(SCORERS["ot"]).parameters["eps"].default == 0.05
    assert "τ = 5000, ε = 0.05" in demo.__doc__
    assert demo.SPECTER == {"background": (43.95, 66.70), "method": (22.44, 37.41), "result": (36.79, 56.67),
                            "all": (34.23, 53.28)}


def test_eval_options_reads_no_torch():
    """`eval_options` says its refusals come before torch is imported: checked in a fresh interpreter."""
    import subprocess
    import sys

    code = ("import sys; from aspire.cli.evaluate import build_parser; from aspire.cli.evaluate_options import "
            "eval_options; a = build_parser().parse_args(['csfcube', '--data', 'x', '--model', 'm', '--scorer', "
            "'ot', '--tau', '3', '--out', 'o']); eval_options(a); print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"

