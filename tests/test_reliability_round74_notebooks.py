"""Round 74, the notebooks as a user runs them: what a cell prints is stored as one output per run of prints, however
the kernel happened to flush it (a fresh run of aspect_conditional_retrieval.ipynb on a busy machine split the two
lines of its cell 8 into two outputs, the stored notebook holds them as one, and the re-run test called it stale)."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests.test_notebooks import MIN_FIGURES, NOTEBOOKS, _code, _execute_module


def _kinds(cell) -> list[tuple[str, str | None]]:
    return [(o.output_type, o.get("name")) for o in cell.outputs]


def test_merge_streams_joins_consecutive_prints_of_one_stream_only():
    execute = _execute_module()
    cell = new_code_cell("", outputs=[
        new_output("stream", name="stdout", text="a\n"), new_output("stream", name="stdout", text="b\n"),
        new_output("stream", name="stderr", text="warn\n"), new_output("stream", name="stderr", text="more\n"),
        new_output("stream", name="stdout", text="c\n"),
        new_output("display_data", data={"text/plain": "<Figure>"}),
        new_output("stream", name="stdout", text="d\n")])
    nb = new_notebook(cells=[new_markdown_cell("text"), cell])
    execute.merge_streams(nb)
    assert _kinds(nb.cells[1]) == [("stream", "stdout"), ("stream", "stderr"), ("stream", "stdout"),
                                   ("display_data", None), ("stream", "stdout")]
    assert [o.get("text") for o in nb.cells[1].outputs] == ["a\nb\n", "warn\nmore\n", "c\n", None, "d\n"]
    nbformat.validate(nb)


def test_execute_stores_prints_flushed_apart_as_one_output(tmp_path, monkeypatch):
    """A real kernel: two prints flushed apart (as a slow step between them does) came back as two outputs."""
    execute = _execute_module()
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))  # kernel_spec points it here; restored after the test
    source = ("import sys\nfrom IPython.display import display\n"
              "print('a'); sys.stdout.flush()\nprint('b'); sys.stdout.flush()\ndisplay('x')\nprint('c')")
    nb = execute.execute(new_notebook(cells=[new_code_cell(source)]), execute.kernel_spec(tmp_path), timeout=120)
    cell = nb.cells[0]
    assert _kinds(cell) == [("stream", "stdout"), ("display_data", None), ("stream", "stdout")], cell.outputs
    assert cell.outputs[0].text == "a\nb\n" and cell.outputs[2].text == "c\n"


def test_stored_notebooks_hold_no_split_prints():
    """What execute.py stores: a fresh run is compared with these output by output."""
    for name in sorted(MIN_FIGURES):
        for i, cell in enumerate(_code(nbformat.read(NOTEBOOKS / name, as_version=4))):
            kinds = _kinds(cell)
            split = [k for k, (a, b) in enumerate(zip(kinds, kinds[1:])) if a == b and a[0] == "stream"]
            assert not split, f"{name}: code cell {i} stores consecutive {kinds[split[0]][1]} outputs: re-run " \
                              "notebooks/execute.py"
