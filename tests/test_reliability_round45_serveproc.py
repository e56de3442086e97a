"""Round 45: the page server's process side: `aspire serve` options refused before the index loads, the port
released on stop, `--help` without torch, and reloads to a broken generation keeping the old one served."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from serve_support import PAPERS, build_index, join_all, request, running

from aspire.serve import ServiceHolder
from aspire.serve.server import bind


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    from aspire.encoders import load_encoder

    return load_encoder(tiny_model_dir)


@pytest.fixture(scope="module")
def index(encoder, tmp_path_factory):
    return build_index(encoder, PAPERS[:3], tmp_path_factory.mktemp("r45") / "index", "tiny")


def _no_load(monkeypatch):
    import aspire.serve.reload as reload_mod

    def refuse(*a, **k):
        raise AssertionError("the index was loaded before the options were checked")

    monkeypatch.setattr(reload_mod, "open_service", refuse)


@pytest.mark.parametrize("extra, named", [
    (["--port", "-1"], "--port"), (["--port", "65536"], "--port"), (["--port", "x"], "--port"),
    (["--check-every", "nan"], "--check-every"), (["--check-every", "-1"], "--check-every"),
    (["--check-every", "inf"], "--check-every"), (["--check-every", "1", "--no-auto-reload"], "--no-auto-reload"),
])
def test_bad_server_options_exit_2_naming_the_option_before_the_index_loads(index, monkeypatch, capsys, extra, named):
    from aspire.serve.__main__ import main

    _no_load(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        main(["--index", str(index), *extra])
    assert exc.value.code == 2 and named in capsys.readouterr().err


def test_a_host_that_does_not_resolve_or_a_port_in_use_exit_2_naming_the_address(index, monkeypatch, capsys):
    from aspire.serve.__main__ import main

    _no_load(monkeypatch)
    assert main(["--index", str(index), "--host", "no.such.host.invalid", "--port", "0"]) == 2
    assert "no.such.host.invalid" in capsys.readouterr().err
    with bind("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        assert main(["--index", str(index), "--port", str(port)]) == 2
        assert str(port) in capsys.readouterr().err


@pytest.mark.parametrize("port", [-1, 65536, 1.5, True, "80"])
def test_bind_refuses_a_port_out_of_range_with_a_value_error_naming_it(port):
    """Once an OverflowError ('bind(): port must be 0-65535.') or a TypeError, not the ValueError/OSError a caller
    reports as a user's mistake."""
    with pytest.raises(ValueError, match="port"):
        bind("127.0.0.1", port)


def test_stopping_the_server_releases_its_port(index):
    holder = ServiceHolder(index, check_every=None)
    with running(holder) as srv:
        host, port = srv.server_address
        assert request(srv, "GET", "/api/info")[0] == 200
    with bind(host, port) as again:  # the same port, bound again at once
        assert again.getsockname()[1] == port
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=2).close()


def test_serve_help_does_not_import_torch():
    code = ("import sys\nfrom aspire.serve.__main__ import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n"
            "    assert e.code == 0\nprint(sorted(m for m in ('torch', 'faiss', 'transformers', 'uvicorn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--check-every" in out.stdout and out.stdout.strip().splitlines()[-1] == "[]"


def test_a_half_written_generation_is_refused_and_the_old_one_keeps_serving(encoder, tmp_path):
    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    holder = ServiceHolder(index, check_every=None)
    build_index(encoder, PAPERS, index, "tiny")
    live = (index / "CURRENT").read_text().strip()
    files = sorted(p for p in (index / live).iterdir() if p.is_file() and p.name != "manifest.json")
    victim = max(files, key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # half written
    out = holder.reload()
    assert out["reloaded"] is False and out["generation"] == "gen-000001" and out["error"]
    assert holder.service.index.n_papers == 3 and holder.reload_error == out["error"]
    with running(holder) as srv:
        status, _, raw, headers = request(srv, "POST", "/api/search", {"paper_id": "q", "sentences": [0]},
                                          with_headers=True)
        assert status == 200 and headers["x-aspire-generation"] == json.loads(raw)["generation"] == "gen-000001"


def test_a_reload_while_a_search_runs_answers_that_search_whole_from_the_generation_it_started_with(encoder, tmp_path):
    import threading

    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    holder = ServiceHolder(index, check_every=None)
    old = holder.service
    entered, release = threading.Event(), threading.Event()
    search = old.search

    def slow_search(body):
        entered.set()
        assert release.wait(20)
        return search(body)

    old.search = slow_search  # this instance only: the next generation searches at once
    body = {"paper_id": "q", "sentences": [0, 1], "k": 10}
    with running(holder) as srv:
        answer: list = []
        t = threading.Thread(target=lambda: answer.append(request(srv, "POST", "/api/search", body,
                                                                  with_headers=True)))
        t.start()
        assert entered.wait(20)
        build_index(encoder, PAPERS, index, "tiny")
        status, _, raw = request(srv, "POST", "/api/reload")
        assert status == 200 and json.loads(raw)["reloaded"] is True
        release.set()
        join_all([t])  # the search held across the reload: answered, not still waiting
        status, _, raw, headers = answer[0]
        out = json.loads(raw)
        assert status == 200 and headers["x-aspire-generation"] == out["generation"] == "gen-000001"
        assert len(out["hits"]) == 2  # the 3-paper generation's hits, not the 5-paper one's
        status, _, raw, headers = request(srv, "POST", "/api/search", body, with_headers=True)
        out = json.loads(raw)
        assert headers["x-aspire-generation"] == out["generation"] == "gen-000002" and len(out["hits"]) == 4


@pytest.mark.parametrize("option, value", [("check_every", float("nan")), ("check_every", -1.0),
                                           ("check_every", float("inf")), ("retry_after", float("nan")),
                                           ("retry_after", -5), ("retry_after", None), ("check_every", "1")])
def test_holder_refuses_a_check_or_retry_interval_that_is_not_a_finite_number_of_seconds(index, option, value):
    """Once taken: check_every NaN set the next check to NaN, so `get()` never looked at CURRENT again."""
    with pytest.raises(ValueError, match=option):
        ServiceHolder(index, **{option: value})


def test_holder_takes_valid_check_and_retry_intervals(index):
    assert ServiceHolder(index, check_every=None, retry_after=0).check_every is None
    assert ServiceHolder(index, check_every=0, retry_after=2.5).retry_after == 2.5
