"""Round 66: the README's shell commands, run as a new user runs them.

The README's context2doc commands of the whole-abstract vector fused with BM25 (the first stage of the best
context2doc row, "the fusion alone 0.362 / 0.300") must encode as the committed run they stand for: without
`--max-length 256` the same line encodes at the model's 512-piece limit and gives 0.359 / 0.299.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_readme import readme_commands

FUSED = Path(__file__).resolve().parents[1] / "experiments/results/suite/minilm-abstract-bm25-context2doc.json"


def encode_options_of(argv: list[str]) -> dict:
    """The encode options (as `results.json` records them) that an `aspire evaluate` argv sets."""
    options = {}
    for i, arg in enumerate(argv):
        if arg == "--max-length":
            options["max_length"] = int(argv[i + 1])
        elif arg == "--joiner":
            options["joiner"] = argv[i + 1]
        elif arg == "--normalize":
            options["normalize"] = True
    return options


def test_readme_fused_context2doc_lines_encode_as_the_committed_fusion():
    committed = json.loads(FUSED.read_text(encoding="utf-8"))
    lines = [(line, argv) for line, argv in readme_commands()
             if argv[:2] == ["evaluate", "context2doc"] and "--bm25-alpha" in argv
             and argv[argv.index("--scorer") + 1] == "abstract"]
    assert len(lines) >= 2, "the README's fused context2doc lines (runs/c2d/fused, runs/c2d/ce) were not found"
    for line, argv in lines:
        assert argv[argv.index("--model") + 1] == committed["model"], line
        assert encode_options_of(argv) == committed["encode_options"], (
            f"README line {line!r} encodes with {encode_options_of(argv)}, not as {FUSED.name} "
            f"({committed['encode_options']}, made by: {committed['command']})")
