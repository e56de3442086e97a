"""The notebooks: stored without outputs, plot only through aspire.viz, and run top to bottom (nbclient)
with the default minilm model on the shared CSFCube data, each producing its figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
MIN_FIGURES = {"alignment_visualisation.ipynb": 2, "aspect_conditional_retrieval.ipynb": 5}
DRAWING_CALLS = ("imshow(", ".plot(", ".bar(", ".scatter(", "pcolormesh(", "heatmap(")


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(MIN_FIGURES)


@pytest.mark.parametrize("name", sorted(MIN_FIGURES))
def test_notebook_is_saved_clean_and_plots_through_viz(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code), "saved with outputs"
    source = "\n".join(c.source for c in code)
    assert "from aspire.viz import" in source
    assert not [call for call in DRAWING_CALLS if call in source], "plots belong in aspire.viz"


def _kernel(tmp_path: Path, monkeypatch) -> str:
    """A kernel spec that runs this interpreter (the project venv), found through JUPYTER_PATH."""
    spec = tmp_path / "kernels" / "aspire-venv"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "aspire venv", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    return "aspire-venv"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MIN_FIGURES))
def test_notebook_runs_and_draws_its_figures(name, shared_data, tmp_path, monkeypatch):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("ASPIRE_DATA", str(shared_data))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(nb, kernel_name=_kernel(tmp_path, monkeypatch), timeout=600,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    try:
        client.execute()
    except CellExecutionError as err:
        pytest.fail(f"{name}: a cell failed:\n{str(err)[:3000]}")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= MIN_FIGURES[name], f"{name}: {len(images)} figures, expected {MIN_FIGURES[name]}"
    assert all(c.execution_count is not None for c in nb.cells if c.cell_type == "code")
