"""Round 45: `aspire.cliutil`, the helpers every command shares: path refusals as one `error:` line with exit
status 2 naming the option, config overrides with an empty key, strict JSON output, import without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aspire import cliutil
from tests.conftest import REPO


def _refusal(capsys, check) -> tuple[int, list[str]]:
    """`run_command` of `check`: (status, the lines it wrote on stderr)."""
    status = cliutil.run_command(lambda: check() or 0)
    return status, capsys.readouterr().err.splitlines()


# ---- normalize_overrides: an empty key ---------------------------------------------------------------------------

@pytest.mark.parametrize("item, section", [("=5", None), (" =5", None), ("--=5", None), ("search.=5", "search"),
                                           ("=5", "search")])
def test_override_with_an_empty_key_is_refused_naming_it(item, section, capsys):
    # `=5` once passed as the override {"": "5"}; `search.=5` under the search section as well
    with pytest.raises(ValueError, match="empty key") as err:
        cliutil.normalize_overrides([item], section)
    assert repr(item) in str(err.value)


def test_override_forms_that_were_right_are_kept(capsys):
    assert cliutil.normalize_overrides(["train.lr=1e-5", "a.b=x=y"]) == ["train.lr=1e-5", "a.b=x=y"]
    assert cliutil.normalize_overrides(["search.rerank=ot", "k="], "search") == ["rerank=ot", "k="]
    with pytest.raises(ValueError, match="'train.lr' must look like section.key=value"):
        cliutil.normalize_overrides(["train.lr"])


def test_override_with_an_empty_key_is_one_error_line(capsys):
    status, err = _refusal(capsys, lambda: cliutil.normalize_overrides(["=5"]))
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and "'=5'" in err[0]


# ---- check_folders / input_file: an empty path -------------------------------------------------------------------

def test_check_folders_refuses_an_empty_path(capsys):
    # Path("") is ".": an empty --out once passed, and os.makedirs("") failed after the work
    with pytest.raises(OSError):
        os.makedirs("", exist_ok=True)
    status, err = _refusal(capsys, lambda: cliutil.check_folders(out_dir=""))
    assert status == 2 and err == ["error: --out-dir: expected a folder path, got an empty string"]


def test_input_file_refuses_an_empty_path_as_missing_not_a_folder(capsys):
    status, err = _refusal(capsys, lambda: cliutil.input_file("", "--queries"))
    assert status == 2 and err == ["error: --queries: expected a file path, got an empty string"]


# ---- the other refusals: exit 2, one line naming the option ------------------------------------------------------

def test_path_refusals_are_one_line_naming_the_option(tmp_path, capsys):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x")
    cases = [
        (lambda: cliutil.check_paths(query_file=str(tmp_path / "gone.jsonl")), "--query-file"),
        (lambda: cliutil.check_paths(query_file=""), "--query-file"),
        (lambda: cliutil.check_folders(out_dir=str(blocker / "run")), "--out-dir"),
        (lambda: cliutil.check_folders(out_dir=str(blocker)), "--out-dir"),
        (lambda: cliutil.input_file(tmp_path, "--corpus"), "--corpus"),
        (lambda: cliutil.input_file(tmp_path / "gone", "--corpus"), "--corpus"),
    ]
    for check, option in cases:
        status, err = _refusal(capsys, check)
        assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and option in err[0], (option, err)
    cliutil.check_paths(query_file=None, corpus="-", out=str(blocker))  # given paths that exist pass
    cliutil.check_folders(out_dir=str(tmp_path / "new" / "deeper"))
    assert cliutil.input_file(str(blocker), "--corpus") == blocker


# ---- print_json: strict JSON -------------------------------------------------------------------------------------

def test_print_json_writes_non_finite_as_null_and_names_it(capsys):
    cliutil.print_json({"loss": float("nan"), "hits": [{"score": float("-inf")}]}, sort_keys=True)
    out = capsys.readouterr().out
    parsed = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))
    assert parsed == {"loss": None, "hits": [{"score": None}], "non_finite": {"loss": "nan", "hits.0.score": "-inf"}}


# ---- Parser: the nearest choice ----------------------------------------------------------------------------------

def test_parser_names_the_nearest_choice_and_exits_2(capsys):
    parser = cliutil.command_parser("aspire", "doc", "aspire search")
    parser.add_argument("command", choices=["search", "index"])
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["serach"])
    assert done.value.code == 2
    assert "did you mean 'search'?" in capsys.readouterr().err


# ---- import without torch ----------------------------------------------------------------------------------------

def test_cliutil_imports_and_checks_paths_without_torch(tmp_path):
    code = ("import sys\nfrom aspire import cliutil\ncliutil.check_paths(x=None)\ncliutil.check_folders(out='o')\n"
            "cliutil.normalize_overrides(['a.b=1'])\ncliutil.device_name('cpu')\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
