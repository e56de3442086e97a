"""The README's Python examples run as written.

Each ```python block of README.md is executed in a fresh namespace, in a folder holding what the
examples name: `papers.jsonl` (two papers of five sentences, with facet labels) and `runs/index`
(an index of it). The model names `minilm` and `mpnet` resolve to the tiny test model, so the
examples run in seconds without the real weights.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aspire.encoders.pretrained import MODELS

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.M | re.S)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 1


@pytest.fixture
def example_folder(tmp_path, tiny_model_dir, monkeypatch):
    from aspire.index.__main__ import main as index_main

    for name in ("minilm", "mpnet"):
        monkeypatch.setitem(MODELS, name, lambda: tiny_model_dir)
    labels = ["background_label", "background_label", "method_label", "method_label", "result_label"]
    (tmp_path / "papers.jsonl").write_text("".join(json.dumps({
        "paper_id": pid, "title": "a model of text",
        "abstract": ["we study the task.", "data is scientific.", "we propose a new method.",
                     f"the model uses {word}.", "results improve."],
        "pred_labels": labels}) + "\n" for pid, word in (("p0", "sentences"), ("p1", "citation"))))
    monkeypatch.chdir(tmp_path)
    assert index_main(["build", "--model", "minilm", "--corpus", "papers.jsonl", "--out", "runs/index", "-q"]) == 0
    return tmp_path


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_readme_python_example_runs(number, example_folder):
    code = compile(BLOCKS[number], f"README.md python block {number + 1}", "exec")
    exec(code, {"__name__": "readme_example"})


COMMAND = re.compile(r"^(?:[A-Z_]+=\S+ )*(?:python -m aspire(?:\.(\w+))?|aspire) (.*)$")


def readme_commands() -> list[tuple[str, list[str]]]:
    """(line, argv for `aspire`) of every README shell line that runs an `aspire` command; optional
    `[...]` parts and `# comments` are left out."""
    import shlex

    from aspire.cli import COMMANDS

    modules = {name: name for name in COMMANDS} | {"encoders": "encode"}  # python -m aspire.X -> aspire command
    found = []
    for block in re.findall(r"^```(?:bash|sh|console)\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.M | re.S):
        for line in block.splitlines():
            match = COMMAND.match(re.sub(r"\s+#.*$", "", line.strip()))
            if match is None:
                continue
            module, rest = match.groups()
            if module is not None and module not in modules:
                continue  # another module's command line (e.g. aspire.encoders.cosentbert)
            argv = shlex.split(re.sub(r"\[[^\]]*\]", "", rest))
            found.append((line, ([modules[module]] if module else []) + argv))
    return found


class Parsed(Exception):
    """Raised once a command's own parser has read its arguments without error."""


def unparsed(monkeypatch, commands: list[tuple[str, list[str]]], is_override) -> list[str]:
    """The lines of `commands` ((README line, `aspire` argv) pairs) that their own command's parser refuses; an
    argument left over that `is_override` accepts is a config override, not an error."""
    import argparse

    from aspire.cli import main as aspire_main

    original = argparse.ArgumentParser.parse_known_args

    def parse_then_stop(self, args=None, namespace=None):
        result = original(self, args, namespace)
        if self.prog.startswith("aspire "):
            unknown = [x for x in result[1] if not is_override(x)]
            if unknown:
                self.error(f"unrecognized arguments: {' '.join(unknown)}")
            raise Parsed
        return result

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse_then_stop)
    failed = []
    for line, argv in commands:
        try:
            aspire_main(argv)
        except Parsed:
            continue
        except SystemExit:
            pass
        failed.append(line)
    return failed


def test_readme_commands_parse(monkeypatch):
    commands = readme_commands()
    assert len(commands) >= 5
    assert unparsed(monkeypatch, commands, lambda x: x.startswith("--") and "=" in x) == []  # old override form too
