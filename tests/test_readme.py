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

from aspire.encoders.models import MODELS

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
