"""The notebooks: stored executed (outputs visible where they are published), figures that fit a screen, plots
only through aspire.viz, and still running top to bottom (nbclient) with the default minilm model on the
shared CSFCube data, producing the outputs that are stored. Re-store them with `python notebooks/execute.py`."""

from __future__ import annotations

import ast
import base64
import importlib.util
import re
import struct
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
MIN_FIGURES = {"alignment_visualisation.ipynb": 2, "aspect_conditional_retrieval.ipynb": 5}
DRAWING_CALLS = ("imshow(", ".plot(", ".bar(", ".scatter(", "pcolormesh(", "heatmap(")
MAX_PIXELS = (1050, 1200)  # a stored figure fits a screen: about 10 x 12 inches at 100 dpi
MAX_BYTES = 600_000  # a stored notebook stays small enough to read on GitHub


def _execute_module():
    spec = importlib.util.spec_from_file_location("notebooks_execute", NOTEBOOKS / "execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def _should_output(source: str) -> bool:
    """A cell that prints, shows a figure, or ends in an expression (its value is displayed)."""
    tree = ast.parse(source)
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return bool(calls & {"print", "plt.show"}) or bool(tree.body and isinstance(tree.body[-1], ast.Expr))


def _figures(nb) -> list[bytes]:
    return [base64.b64decode(o["data"]["image/png"]) for c in _code(nb) for o in c.outputs
            if "image/png" in o.get("data", {})]


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", png[16:24])


DECIMAL = re.compile(r"\d+\.\d+")


def _texts(nb) -> list[str]:
    """Every text output (streams, displayed values), decimal numbers masked: the part that must not change
    between runs (the numbers are compared apart, with a tolerance: `_numbers`)."""
    out = []
    for cell in _code(nb):
        for o in cell.outputs:
            text = o.get("text") if o.output_type == "stream" else o.get("data", {}).get("text/plain")
            if text:
                out.append(DECIMAL.sub("#", text))
    return out


def _numbers(nb) -> list[tuple[float, int]]:
    """Every decimal number of the text outputs, in order, with its printed decimals."""
    return [(float(m), len(m.split(".")[1])) for text in _texts_raw(nb) for m in DECIMAL.findall(text)]


def _texts_raw(nb) -> list[str]:
    return [text for cell in _code(nb) for o in cell.outputs
            if (text := o.get("text") if o.output_type == "stream" else o.get("data", {}).get("text/plain"))]


def _stale_numbers(fresh: list[tuple[float, int]], stored: list[tuple[float, int]]) -> list[str]:
    """The numbers a fresh run prints that are not the stored ones, to two units of the last printed decimal or
    0.2 % (another machine's float rounding may move a last digit; a stale output moves more)."""
    return [f"#{i}: stored {b:.{d}f}, now {a:.{d}f}" for i, ((a, _), (b, d)) in enumerate(zip(fresh, stored))
            if abs(a - b) > max(2 * 10.0 ** -d, 2e-3 * abs(b))]


def test_stale_numbers_are_those_off_by_more_than_rounding():
    stored = [(1.624, 3), (40.06, 2), (0.5, 1)]
    assert _stale_numbers([(1.625, 3), (40.06, 2), (0.5, 1)], stored) == []  # a last digit moved by rounding
    assert _stale_numbers([(1.631, 3), (40.06, 2), (0.8, 1)], stored) == ["#0: stored 1.624, now 1.631",
                                                                            "#2: stored 0.5, now 0.8"]


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(MIN_FIGURES)


def test_should_output_reads_the_cell():
    assert _should_output("x = 1\nprint(x)") and _should_output("fig = f()\nplt.show()") and _should_output("df")
    assert not _should_output("import os\nx = os.sep") and not _should_output("def f():\n    return 1")


@pytest.mark.parametrize("name", sorted(MIN_FIGURES))
def test_notebook_is_stored_executed_and_plots_through_viz(name):
    path = NOTEBOOKS / name
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = _code(nb)
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "not stored from one top-to-bottom run"
    silent = [i for i, c in enumerate(code) if _should_output(c.source) and not c.outputs]
    assert not silent, f"{name}: code cells {silent} should show an output but are stored without one"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{name}: stored with an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    figures = _figures(nb)
    assert len(figures) >= MIN_FIGURES[name], f"{name}: {len(figures)} stored figures, expected {MIN_FIGURES[name]}"
    too_big = [_png_size(f) for f in figures if not all(s <= m for s, m in zip(_png_size(f), MAX_PIXELS))]
    assert not too_big, f"{name}: figures larger than {MAX_PIXELS} pixels: {too_big}"
    assert path.stat().st_size <= MAX_BYTES, f"{name}: {path.stat().st_size} bytes stored"
    volatile = [c.metadata for c in nb.cells if "execution" in c.metadata]
    assert not volatile and "widgets" not in nb.metadata, "timings or widget state stored"
    source = "\n".join(c.source for c in code)
    assert "from aspire.viz import" in source
    assert not [call for call in DRAWING_CALLS if call in source], "plots belong in aspire.viz"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MIN_FIGURES))
def test_notebook_runs_and_reproduces_its_stored_outputs(name, shared_data, tmp_path, monkeypatch):
    from nbclient.exceptions import CellExecutionError

    execute = _execute_module()
    monkeypatch.setenv("ASPIRE_DATA", str(shared_data))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))  # kernel_spec points it here; restored after the test
    stored = nbformat.read(NOTEBOOKS / name, as_version=4)
    fresh = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in _code(fresh):
        cell.outputs, cell.execution_count = [], None
    try:
        execute.execute(fresh, execute.kernel_spec(tmp_path))
    except CellExecutionError as err:
        pytest.fail(f"{name}: a cell failed:\n{str(err)[:3000]}")
    assert [c.execution_count for c in _code(fresh)] == [c.execution_count for c in _code(stored)]
    assert not [o for c in _code(fresh) for o in c.outputs if o.output_type == "error"]
    assert len(_figures(fresh)) == len(_figures(stored)) >= MIN_FIGURES[name]
    assert all(all(s <= m for s, m in zip(_png_size(f), MAX_PIXELS)) for f in _figures(fresh))
    assert _texts(fresh) == _texts(stored), f"{name}: the stored outputs are stale: run notebooks/execute.py"
    stale = _stale_numbers(_numbers(fresh), _numbers(stored))  # the masked texts equal: the numbers pair up
    assert not stale, f"{name}: the stored numbers are stale ({stale[:5]}): run notebooks/execute.py"
