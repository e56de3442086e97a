"""Which inference backend encodes when the user names none (`--backend auto`): the demo, `aspire index build` and
`aspire index encode-shard` (whose index records it, so `aspire search` encodes its queries the same way).
`aspire evaluate` keeps the exact torch model: its known answers stay exact.

`choose_backend` picks OpenVINO at bf16 (`aspire.encoders.backends`; the fastest backend measured, CSFCube within
0.04 MAP of the exact model) where it runs natively: on the CPU, on a CPU with AMX or AVX512-BF16 (read from
`/proc/cpuinfo`), with `openvino` and `onnx` (its export) installed, for a model without a query adapter (the fast
backends compile one encoding). Anywhere else it keeps the exact torch model. Either way its `note` says which and why,
in one line (a fallback is never silent); choosing OpenVINO, it also names the flag for the exact model (`--backend
torch`), and falling back because `openvino` or `onnx` is missing, the install that would enable it.

Where the exact model runs: a bulk encoding command given no `--device` (`aspire index build`, `index add`, `aspire
encode`) puts it on the GPU where CUDA is available (`encoding_device`), as encode-shard puts it on the rank's GPU; auto
then chooses it there. `aspire search`, `aspire evaluate` and the demo keep the CPU: a query is too small to pay for
CUDA's start-up, and the known answers of evaluate and the demo are the CPU's.

Importing this module imports no torch: the choice is made, and said, before the model loads; only `gpu_device` (called
by auto and `encoding_device`, once a command's arguments are checked) imports it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from aspire.cliutil import install_hint, missing_packages, on_cpu

AUTO = "auto"
BACKEND_ENV = "ASPIRE_BACKEND"  # the backend a command uses when none is given (default: auto)
BACKENDS = ("torch", "onnx", "openvino")  # `aspire.encoders.backends.BACKENDS`, without importing torch
BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of a CPU computing bf16 matrix products natively


@dataclass(frozen=True)
class BackendChoice:
    """The backend and precision chosen (`load_encoder`'s keywords), and the one line saying why."""

    backend: str
    quantize: str | None
    note: str

    def options(self) -> dict:
        """`load_encoder` keywords: {} for the exact torch model."""
        return {} if self.backend == "torch" and self.quantize is None else {"backend": self.backend, "quantize": self.quantize}


def native_bf16_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> list[str] | None:
    """The flags of `BF16_FLAGS` this CPU has ([] none), or None where `cpuinfo` cannot be read (not Linux)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [flag for flag in BF16_FLAGS if flag in flags]


def _query_adapter(model: str | None) -> bool:
    """Whether `model`'s saved settings hold an adapter of scope query (False when the model is not found: its
    load then says why, as it does for an `adapter` entry that is not an object)."""
    if model is None:
        return False
    from aspire.encoders.pretrained import saved_settings

    try:
        adapter = saved_settings(model).get("adapter")
    except (ValueError, FileNotFoundError, OSError):
        return False
    return isinstance(adapter, dict) and adapter.get("scope") == "query"


def choose_backend(model: str | None = None, device: str | None = None, cpuinfo: str | Path = "/proc/cpuinfo",
                   openvino_installed: bool | None = None) -> BackendChoice:
    """The backend `--backend auto` encodes `model` with on `device` (see the module's doc). `openvino_installed`:
    whether what the openvino backend needs is installed (None: looked up, `aspire.cliutil.missing_packages`)."""
    exact = "exact torch model"
    if not on_cpu(device):
        return BackendChoice("torch", None, f"encoding with the {exact} on {device} (the fast backends run on the CPU)")
    if _query_adapter(model):
        return BackendChoice("torch", None, f"encoding with the {exact}: {model} has a query adapter, which the "
                                            "fast backends do not run")
    flags = native_bf16_flags(cpuinfo)
    if not flags:
        why = "the CPU's flags cannot be read" if flags is None else "this CPU has no AMX or AVX512-BF16"
        return BackendChoice("torch", None, f"encoding with the {exact}: {why}, so OpenVINO bf16 would not be faster")
    missing = missing_packages("openvino") if openvino_installed is None else [] if openvino_installed else ["openvino"]
    if missing:  # `onnx` too: with openvino alone, as this note once advised, the export failed with a traceback
        what = "OpenVINO is not installed" if "openvino" in missing else "OpenVINO's export needs onnx, not installed"
        return BackendChoice("torch", None, f"encoding with the {exact}: {what} "
                                            f"({install_hint('openvino', missing)} for the fast backend on this CPU)")
    return BackendChoice("openvino", "bf16", f"encoding with OpenVINO bf16 (this CPU has {', '.join(flags)}); "
                                             "--backend torch for the exact model")


def gpu_device() -> str | None:
    """`cuda:0` where CUDA is available, else None (the CPU). Imports torch."""
    import torch

    return "cuda:0" if torch.cuda.is_available() else None


def encoding_device(device: str | None, backend: str) -> str | None:
    """Where a bulk encoding command loads its encoder of `backend`: the user's `device` (--device) when given, else
    the exact torch model's default, the GPU where CUDA is available (`gpu_device`), else None: the CPU, where the fast
    backends run in any case."""
    return device if device is not None or backend != "torch" else gpu_device()


def resolve_backend(backend: str | None, quantize: str | None, model: str | None = None, device: str | None = None,
                    torch_device: str | Callable[[], str | None] | None = None) -> tuple[str, str | None, str | None]:
    """A command's `--backend/--quantize` -> (backend, quantize, the note to show or None). No backend and no
    precision: `$ASPIRE_BACKEND` when set (e.g. `torch`; the test suite sets it), else `auto`, which is
    `choose_backend`'s choice; a `--quantize` alone keeps torch, as before. A backend not in `BACKENDS` (nor `auto`) is a
    ValueError listing the valid ones. `device`: the user's --device (a fast backend named by `$ASPIRE_BACKEND` is
    refused with a GPU one); `torch_device`: where a command without --device puts the exact model itself
    (encode-shard: the rank's GPU; build: `gpu_device`, a function called only when `auto` chooses, so that no argument
    error waits on torch's import), which `auto` chooses for, and which a fast backend, on the CPU, does not
    contradict."""
    if backend is None and quantize is None:
        backend = os.environ.get(BACKEND_ENV) or AUTO
        if backend not in (AUTO, *BACKENDS):
            raise ValueError(f"${BACKEND_ENV}={backend!r} is not a backend; valid: {[AUTO, *BACKENDS]}")
        if backend not in (AUTO, "torch") and not on_cpu(device):  # said as the user set it, not as a flag
            raise ValueError(f"${BACKEND_ENV}={backend} encodes on the CPU; got --device {device}: give --backend "
                             f"torch, or unset ${BACKEND_ENV}")
    if backend is not None and backend not in (AUTO, *BACKENDS):  # was returned as given, for the load to trip on
        raise ValueError(f"--backend {backend!r} is not a backend; valid: {[AUTO, *BACKENDS]}")
    if backend == AUTO and quantize is not None:
        raise ValueError("--quantize goes with a named --backend (torch, onnx or openvino), not auto")
    if backend == AUTO:
        if device is None and callable(torch_device):
            torch_device = torch_device()
        choice = choose_backend(model, device if device is not None else torch_device)
        return choice.backend, choice.quantize, choice.note
    return backend or "torch", quantize, None


def add_auto_backend_option(parser: argparse.ArgumentParser) -> None:
    """Make a command's `--backend` (`aspire.cliutil.add_backend_options`) take `auto`, its default: not given,
    the backend is `resolve_backend`'s."""
    parser.set_defaults(backend=None)  # None: $ASPIRE_BACKEND or auto, unless --quantize alone names torch's bf16
    for action in parser._actions:
        if action.dest == "backend":
            action.choices = (AUTO, *action.choices)
            action.help = ("encoder inference: auto (default: OpenVINO bf16 on a CPU with AMX or AVX512-BF16 and "
                           "openvino installed, else the exact model; one line says which), torch (the exact "
                           f"model), onnx (ONNX Runtime) or openvino; ${BACKEND_ENV} sets the default")


def prepare(model: str = "minilm") -> str:
    """Load `model` once on the backend `auto` picks here, so that what a first load makes is made now and cached
    (`make install`): the ONNX export, OpenVINO's compiled model and the load record (`aspire.encoders.backends`).
    Returns one line saying what was prepared."""
    import time

    from aspire.encoders.backends import load_encoder

    backend, quantize, note = resolve_backend(None, None, model)
    if backend == "torch" and quantize is None:
        return f"{model}: the exact torch model, nothing to export ({note or f'${BACKEND_ENV}=torch'})"
    start = time.perf_counter()
    load_encoder(model, backend=backend, quantize=quantize)
    said = note.split(";")[0] if note else f"backend {backend} {quantize or 'fp32'}"
    return f"{model}: {said}; exported and recorded in {time.perf_counter() - start:.0f} s"
