"""Round 10 correctness checks of the shared utilities: config typing of override and file values, strict JSONL,
the mode of an atomically written folder, `~` in a model folder, and the atomic writer, lock and checksum
against their references (an exception mid-write, a second process, hashlib)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aspire.checksum import file_sha256
from aspire.config import ConfigError, load_config, ranged, save_config
from aspire.io import atomic_folder, atomic_write, read_jsonl, write_jsonl, write_text
from aspire.jsonsafe import strict_loads
from aspire.paths import model_folder


@dataclass
class _Section:
    lr: float = ranged(0.1, gt=0)
    n: int = ranged(1, ge=0)
    name: str = "x"
    maybe_name: str | None = None
    maybe_n: int | None = None
    names: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)


@dataclass
class _Config:
    s: _Section = field(default_factory=_Section)


def _load(*overrides: str) -> _Section:
    return load_config(_Config, None, list(overrides)).s


# ---- config: a string field keeps the text as written ------------------------------------------------
@pytest.mark.parametrize("text", ["0123", "007", "1.10", "12:30", "0x1F", "1_000", ".inf", "2024-1-2T3:04:05"])
def test_string_field_keeps_a_number_as_written(text, tmp_path):
    """YAML 1.1 reads these as numbers (or a date): a string field once got that value's text, `0123` -> "83"."""
    assert _load(f"s.name={text}").name == text
    assert _load(f"s.maybe_name={text}").maybe_name == text
    assert _load(f"s.names=[{text}, b]").names == [text, "b"]
    path = tmp_path / "c.yaml"
    path.write_text(f"s:\n  name: {text}\n", encoding="utf-8")
    assert load_config(_Config, path).s.name == text


# ---- config: numbers YAML 1.1 and 1.2 read differently are refused ------------------------------------
@pytest.mark.parametrize("text", ["010", "0_10", "1:30"])
def test_number_read_differently_by_yaml_1_1_and_1_2_is_refused(text):
    """`s.n=010` was silently 8 (YAML 1.1 octal) while `s.n=09` was 9."""
    for key in ("n", "maybe_n", "lr"):
        with pytest.raises(ConfigError, match=rf"s\.{key}: {text} "):
            _load(f"s.{key}={text}")
    with pytest.raises(ConfigError, match=rf"s\.options\.a: {text} "):
        _load(f"s.options={{a: {text}}}")


def test_leading_zero_numbers_that_agree_are_taken():
    assert [_load(f"s.n={t}").n for t in ("01", "07", "08", "09", "00", "0")] == [1, 7, 8, 9, 0, 0]
    assert _load("s.lr=0.5").lr == 0.5 and _load("s.n=0x10").n == 16 and _load("s.n=1_000").n == 1000


# ---- config: exponent numbers without a dot are numbers ---------------------------------------------
def test_exponent_without_a_dot_is_a_number_everywhere():
    """PyYAML reads `1e-3` as text: a typed float field converted it, but an untyped option (an ensemble member's
    `scorer_options: {tau: 1e3}`) stayed the string '1e3' and was refused as not a number."""
    assert _load("s.lr=1e-3").lr == 0.001 and _load("s.lr=1.5E3").lr == 1500.0
    assert _load("s.n=1e3").n == 1000
    assert _load("s.options={tau: 1e3, eps: 5e-2, n: 3, s: '1e3'}").options == {"tau": 1000.0, "eps": 0.05, "n": 3,
                                                                               "s": "1e3"}
    with pytest.raises(ConfigError, match=r"s\.n: expected an integer, got 0\.15"):
        _load("s.n=1.5e-1")


def test_ensemble_scorer_options_take_exponent_numbers(tmp_path):
    from aspire.evaluate.ensemble import load_ensemble

    path = tmp_path / "ens.yaml"
    path.write_text(textwrap.dedent("""\
        members:
          - {name: a, model: minilm, scorer: ot, scorer_options: {tau: 1e3, eps: 5e-2}}
          - {name: b, model: bm25}
        """), encoding="utf-8")
    assert load_ensemble(path).members[0].scorer_options == {"tau": 1000.0, "eps": 0.05}


def test_a_date_is_its_text():
    """A YAML timestamp in an untyped option was a datetime.date, which the saved config (JSON first) cannot hold."""
    assert _load("s.options={day: 2024-01-02}").options == {"day": "2024-01-02"}


def test_saved_config_loads_back_unchanged(tmp_path):
    cfg = load_config(_Config, None, ["s.name='1e-3'", "s.maybe_name='0123'", "s.names=['1e5', '010', '2024-01-02']",
                                      "s.options={a: '1e5', b: 1e5, c: '1:30', d: [1, '2']}", "s.lr=1e-7"])
    assert cfg.s.name == "1e-3" and cfg.s.options["a"] == "1e5" and cfg.s.options["b"] == 1e5
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(_Config, tmp_path / "c.yaml") == cfg


@pytest.mark.parametrize("name", ["ts_aspire.yaml", "hybrid_ts_distill_t256.yaml", "index.yaml"])
def test_committed_configs_round_trip(name, tmp_path):
    from aspire.index.config import IndexBuildConfig
    from aspire.train.config import Config

    cls = IndexBuildConfig if name.startswith("index") else Config
    cfg = load_config(cls, Path(__file__).resolve().parents[1] / "configs" / name)
    save_config(cfg, tmp_path / "saved.yaml")
    assert load_config(cls, tmp_path / "saved.yaml") == cfg


def test_override_typing_and_refusals():
    assert _load("s.maybe_n=null").maybe_n is None and _load("s.maybe_name=").maybe_name == ""
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['s\.bogus'\]"):
        _load("s.bogus=1")
    with pytest.raises(ConfigError, match=r"s\.lr: must be > 0, got -1\.0"):
        _load("s.lr=-1")
    with pytest.raises(ConfigError, match=r"s\.lr: must be a finite number"):
        _load("s.lr=.nan")
    with pytest.raises(ConfigError, match=r"s\.name: expected a string, got the boolean true"):
        _load("s.name=yes")


# ---- io: strict JSONL, the folder's mode -----------------------------------------------------------
def test_jsonl_lines_are_strict_json(tmp_path):
    """`write_jsonl` / `AtomicJsonl` wrote bare NaN and Infinity, which other JSON readers refuse."""
    path = tmp_path / "r.jsonl"
    records = [{"id": "a", "score": float("nan"), "hits": [1.0, float("-inf")]}, {"id": "b", "score": 0.5, "t": "é"}]
    assert write_jsonl(path, records) == 2
    lines = path.read_text(encoding="utf-8").splitlines()
    parsed = [strict_loads(line) for line in lines]
    assert parsed[0] == {"id": "a", "score": None, "hits": [1.0, None],
                         "non_finite": {"score": "nan", "hits.1": "-inf"}}
    assert parsed[1] == {"id": "b", "score": 0.5, "t": "é"} and lines[1] == '{"id": "b", "score": 0.5, "t": "é"}'
    assert math.isnan(records[0]["score"])  # the caller's record is left as it was


def test_atomic_folder_has_the_mode_of_any_new_folder(tmp_path):
    """mkdtemp's owner-only 0o700 stayed on the exported / interpolated / teacher folder once renamed into place."""
    old = os.umask(0o022)
    try:
        with atomic_folder(tmp_path / "out") as staged:
            (staged / "f.txt").write_text("x", encoding="utf-8")
        (tmp_path / "plain").mkdir()
    finally:
        os.umask(old)
    assert (tmp_path / "out" / "f.txt").read_text(encoding="utf-8") == "x"
    assert (tmp_path / "out").stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "plain"]  # nothing staged left beside it


def test_atomic_folder_interrupted_leaves_the_old_folder(tmp_path):
    out = tmp_path / "out"
    with atomic_folder(out) as staged:
        (staged / "a").write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError), atomic_folder(out) as staged:
        (staged / "a").write_text("new", encoding="utf-8")
        raise RuntimeError("killed mid-write")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (out / "a").read_text(encoding="utf-8") == "old"


def test_atomic_write_interrupted_leaves_the_old_file_whole(tmp_path):
    path = tmp_path / "f.json"
    write_text(path, "old contents\n")
    with pytest.raises(KeyboardInterrupt), atomic_write(path) as handle:
        handle.write("new ")
        handle.flush()
        raise KeyboardInterrupt
    assert path.read_text(encoding="utf-8") == "old contents\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]
    write_jsonl(path, [{"i": 1}])
    assert read_jsonl(path) == [{"i": 1}]


# ---- paths: `~` in a model folder, as resolve_model reads it ------------------------------------------
def test_model_folder_expands_home(tmp_path, monkeypatch):
    """`model_folder("~/run")` was `~/run` unexpanded: export read no document_model.json (its metadata silently
    dropped) while the encoder, through resolve_model, loaded the run's checkpoint."""
    monkeypatch.setenv("HOME", str(tmp_path))
    model = tmp_path / "run" / "checkpoint-000002" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "run" / "latest").write_text(json.dumps({"checkpoint": "checkpoint-000002"}), encoding="utf-8")
    assert model_folder("~/run") == model
    (tmp_path / "plain").mkdir()
    assert model_folder("~/plain") == tmp_path / "plain"
    assert model_folder(model) == model


# ---- storage and checksum against their references ------------------------------------------------
def test_file_sha256_matches_hashlib_and_sha256sum(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(os.urandom((1 << 20) + 12345))
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert file_sha256(path) == expected
    try:
        out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout
    except FileNotFoundError:
        pytest.skip("no sha256sum here")
    assert out.split()[0] == expected


def test_folder_lock_excludes_a_second_process(tmp_path):
    folder = tmp_path / "f"
    code = textwrap.dedent(f"""\
        import sys
        from aspire.storage import folder_lock
        try:
            with folder_lock({str(folder)!r}, RuntimeError, "wait"):
                print("GOT")
        except RuntimeError as err:
            print("REFUSED", err)
        """)
    from aspire.storage import folder_lock

    with folder_lock(folder, RuntimeError, "wait"):
        held = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    free = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert held.startswith("REFUSED") and f"pid {os.getpid()}" in held
    assert free.strip() == "GOT"
