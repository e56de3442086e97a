"""Execute the notebooks top to bottom and store them with their outputs (run from the repository root).

    OMP_NUM_THREADS=1 .venv/bin/python notebooks/execute.py            # every notebook, in place
    .venv/bin/python notebooks/execute.py alignment_visualisation.ipynb

The kernel is this interpreter (the project venv, with the repository root on PYTHONPATH so the
notebooks import this checkout's `aspire`); figures are inline PNGs, stored with a 256-colour
palette (a third of the size; the plots use few colours). What changes on every run and says
nothing about the results (cell timings, widget state, how a cell's printed lines were split into outputs) is not
stored. tests/test_notebooks.py uses the same functions to check that the stored notebooks still run top to
bottom and reproduce their text outputs (with every decimal number masked) and their number of figures; it compares no figure's pixels.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent
KERNEL = "aspire-venv"


def kernel_spec(folder: Path) -> str:
    """Write a kernel spec running this interpreter under `folder/kernels`; put `folder` on JUPYTER_PATH."""
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "aspire venv", "language": "python"}))
    os.environ["JUPYTER_PATH"] = str(folder)
    return KERNEL


def strip_volatile(nb) -> None:
    """Drop what differs from run to run without changing a result: timings, widget state, kernel names."""
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (aspire venv)", "language": "python", "name": "python3"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("execution", None)


def merge_streams(nb) -> None:
    """Join each run of consecutive stream outputs of one name (stdout, stderr) into one output, as Jupyter shows them.

    The kernel sends what a cell printed in pieces, one each time it flushes, so two lines with a slow step between
    them come as two outputs on a busy machine and as one on an idle one; joined, a fresh run compares equal to the
    stored notebook however busy the machine was. Outputs of other kinds (figures, values) keep their places.
    """
    for cell in nb.cells:
        if "outputs" not in cell:
            continue
        merged = []
        for out in cell.outputs:
            last = merged[-1] if merged else None
            if last is not None and out.output_type == last.output_type == "stream" and out.name == last.name:
                last.text += out.text
            else:
                merged.append(out)
        cell.outputs = merged


def shrink_figures(nb) -> None:
    """Re-encode every PNG output with a 256-colour palette on white (octree: small areas such as the
    red single-match outline keep their colour)."""
    from PIL import Image

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" not in data:
                continue
            image = Image.open(io.BytesIO(base64.b64decode(data["image/png"]))).convert("RGBA")
            flat = Image.new("RGB", image.size, "white")
            flat.paste(image, mask=image.getchannel("A"))
            buf = io.BytesIO()
            flat.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(buf, "png", optimize=True)
            data["image/png"] = base64.b64encode(buf.getvalue()).decode("ascii")


def execute(nb, kernel_name: str, timeout: int = 600):
    """Run every cell of `nb` (in place) with the notebooks folder as working directory; returns `nb`, its
    consecutive prints joined (`merge_streams`) and its timings dropped (`strip_volatile`).

    Raises nbclient's CellExecutionError naming the failing cell.
    """
    from nbclient import NotebookClient

    env = dict(os.environ, MPLBACKEND="module://matplotlib_inline.backend_inline")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(NOTEBOOKS.parent), env.get("PYTHONPATH")) if p)
    NotebookClient(nb, kernel_name=kernel_name, timeout=timeout, record_timing=False,
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute(env=env)
    merge_streams(nb)
    strip_volatile(nb)
    return nb


def notebook_paths(names: list[str]) -> list[Path]:
    """The notebooks `names` (a notebook of this folder by name, or a path to one), or every one here; SystemExit
    naming those that are not a notebook file, before any runs (else the ones before it ran for minutes first)."""
    if not names:
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    paths = [Path(n) if Path(n).is_file() else NOTEBOOKS / n for n in names]
    missing = [n for n, path in zip(names, paths) if not path.is_file() or path.suffix != ".ipynb"]
    if missing:
        known = ", ".join(path.name for path in sorted(NOTEBOOKS.glob("*.ipynb")))
        raise SystemExit(f"not a notebook: {', '.join(missing)} (the notebooks of {NOTEBOOKS}: {known})")
    return paths


def main(names: list[str]) -> None:
    paths = notebook_paths(names)
    with tempfile.TemporaryDirectory() as tmp:
        kernel = kernel_spec(Path(tmp))
        for path in paths:
            nb = execute(nbformat.read(path, as_version=4), kernel)
            shrink_figures(nb)
            nbformat.write(nb, path)
            print(f"{path.name}: executed and stored")


if __name__ == "__main__":
    main(sys.argv[1:])
