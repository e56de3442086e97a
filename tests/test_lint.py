"""The linter is part of the test run: `ruff check aspire tests` with the rules in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def ruff_command() -> list[str]:
    """ruff from this environment (a dev dependency, pinned in requirements.txt), else from PATH."""
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError:
        found = shutil.which("ruff")
        if found is None:
            pytest.fail("ruff is not installed: pip install -r requirements.txt (or the dev extra)")
        return [found]
    return [find_ruff_bin()]


def test_ruff_check_is_clean():
    result = subprocess.run([*ruff_command(), "check", "--no-cache", "aspire", "tests"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_reads_the_project_config():
    result = subprocess.run([*ruff_command(), "check", "--show-settings", "aspire/cli/__init__.py"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert f'Settings path: "{REPO / "pyproject.toml"}"' in result.stdout
    assert "linter.line_length = 120" in result.stdout
