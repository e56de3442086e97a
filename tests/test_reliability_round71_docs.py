"""The docs teach `--search-pipeline` in the form it takes without a note: every override written after it in the
README and docs/*.md is `search.key=value` (docs/architecture.md once wrote a bare `KEY=VALUE`, which the command reads
with a deprecation note)."""

import re
from pathlib import Path

from aspire.cliutil import normalize_overrides

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def search_pipeline_overrides() -> list[tuple[str, str]]:
    """(file name, override) for each `KEY=VALUE` word that follows `--search-pipeline` in the README and docs/*.md,
    up to the next option, `...` or the end of the inline code."""
    found = []
    for path in DOCS:
        for match in re.finditer(r"--search-pipeline((?:[ \t]+[^\s`]+)*)", path.read_text(encoding="utf-8")):
            for word in match.group(1).split():
                if word.startswith("-") or not re.fullmatch(r"[^=\s]+=\S+", word):
                    break
                found.append((path.name, word))
    return found


def test_the_docs_write_search_pipeline_overrides_as_the_command_takes_them(capsys):
    found = search_pipeline_overrides()
    assert {name for name, _ in found} >= {"README.md", "architecture.md"}, found
    for name, word in found:
        assert word.startswith("search."), f"{name}: --search-pipeline {word}"
        normalize_overrides([word], section="search")
        assert capsys.readouterr().err == "", f"{name}: --search-pipeline {word} is read with a note"
