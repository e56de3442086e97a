"""Round 45: lazy exports, the automatic backend choice and the pretrained model names, checked against direct
imports, faked CPU flags and hand-made model / training-run folders (no model loads, nothing downloads)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from aspire.encoders import choice
from aspire.encoders.choice import AUTO, BACKENDS, choose_backend, native_bf16_flags, resolve_backend
from aspire.encoders.pretrained import MODELS, check_model, pinned_model, resolve_model

REPO = Path(__file__).resolve().parents[1]


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nvmx flags\t: amx_bf16_fake\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\n")
    return path


def _model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def _run(tmp_path: Path, latest: str | None, best: str | None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for step in ("checkpoint-000001", "checkpoint-000002"):
        _model(run / step / "model")
    for pointer, checkpoint in (("latest", latest), ("best", best)):
        if checkpoint:
            (run / pointer).write_text(json.dumps({"checkpoint": checkpoint}))
    return run


# --- aspire.lazy -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("package, name, source", [
    ("aspire.encoders", "MODELS", "aspire.encoders.pretrained"),
    ("aspire.encoders", "resolve_model", "aspire.encoders.pretrained"),
    ("aspire.scoring", "sinkhorn", "aspire.scoring.sinkhorn"),
])
def test_lazy_export_is_the_defining_modules_object(package, name, source):
    pkg = importlib.import_module(package)
    assert getattr(pkg, name) is getattr(importlib.import_module(source), name)
    assert name in dir(pkg)


def test_lazy_export_wins_over_a_submodule_of_the_same_name():
    import aspire.scoring as scoring
    import aspire.scoring.sinkhorn  # noqa: F401 (binds the submodule on the package)

    assert callable(scoring.sinkhorn) and scoring.sinkhorn is sys.modules["aspire.scoring.sinkhorn"].sinkhorn


def test_lazy_unknown_attribute_names_it():
    import aspire.encoders as encoders

    with pytest.raises(AttributeError, match="'aspire.encoders' has no attribute 'no_such_export'"):
        encoders.no_such_export  # noqa: B018
    assert not hasattr(encoders, "no_such_export")


def test_import_aspire_and_light_modules_load_no_torch():
    code = ("import sys, aspire, aspire.encoders, aspire.encoders.choice, aspire.encoders.pretrained, aspire.scoring; "
            "print(sorted(m for m in ('torch', 'transformers', 'faiss', 'openvino') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- aspire.encoders.choice --------------------------------------------------------------------------------------

def test_native_bf16_flags_reads_the_flags_line_only(tmp_path):
    assert native_bf16_flags(_cpuinfo(tmp_path, "avx512f avx512_bf16 amx_bf16")) == ["amx_bf16", "avx512_bf16"]
    assert native_bf16_flags(_cpuinfo(tmp_path, "avx512f")) == []  # `amx_bf16_fake` on `vmx flags` is not a flag
    assert native_bf16_flags(tmp_path / "absent") is None


@pytest.mark.parametrize("flags, installed, device, backend", [
    (["amx_bf16"], True, None, "openvino"),
    (["avx512_bf16"], True, "cpu:0", "openvino"),
    (["amx_bf16"], False, None, "torch"),
    ([], True, None, "torch"),
    (None, True, None, "torch"),
    (["amx_bf16"], True, "cuda", "torch"),
])
def test_resolve_backend_auto_chooses_as_documented_in_one_line(monkeypatch, flags, installed, device, backend):
    monkeypatch.delenv(choice.BACKEND_ENV, raising=False)
    monkeypatch.setattr(choice, "native_bf16_flags", lambda cpuinfo="/proc/cpuinfo": flags)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if installed else None)
    got, quantize, note = resolve_backend(None, None, None, device)
    assert (got, quantize) == ((backend, "bf16") if backend == "openvino" else ("torch", None))
    assert note and "\n" not in note
    if backend == "openvino":
        assert "--backend torch" in note and all(f in note for f in flags)
    elif device == "cuda":
        assert "cuda" in note
    elif not installed:
        assert "pip install openvino" in note
    else:
        assert ("cannot be read" if flags is None else "no AMX or AVX512-BF16") in note
    assert resolve_backend(AUTO, None, None, device)[:2] == (got, quantize)


def test_resolve_backend_env_and_named_backends(monkeypatch):
    monkeypatch.setenv(choice.BACKEND_ENV, "torch")
    assert resolve_backend(None, None) == ("torch", None, None)
    assert resolve_backend(None, "bf16") == ("torch", "bf16", None)  # --quantize alone keeps torch
    assert resolve_backend("onnx", "int8") == ("onnx", "int8", None)
    with pytest.raises(ValueError, match="auto"):
        resolve_backend(AUTO, "bf16")
    monkeypatch.setenv(choice.BACKEND_ENV, "tensorrt")
    with pytest.raises(ValueError, match="tensorrt.*'torch', 'onnx', 'openvino'"):
        resolve_backend(None, None)


@pytest.mark.parametrize("backend", ["tensorrt", "Torch", ""])
def test_resolve_backend_refuses_an_unknown_backend_listing_the_valid_ones(monkeypatch, backend):
    # was returned as given: ("tensorrt", None, None), with no word until the load tripped on it
    monkeypatch.setenv(choice.BACKEND_ENV, "torch")
    with pytest.raises(ValueError) as err:
        resolve_backend(backend, None)
    assert repr(backend) in str(err.value) and all(repr(b) in str(err.value) for b in (AUTO, *BACKENDS))


def test_choose_backend_keeps_torch_for_a_query_adapter(tmp_path, monkeypatch):
    model = _model(tmp_path / "adapted")
    (model / "aspire_encoder.json").write_text(json.dumps({"adapter": {"scope": "query"}}))
    got = choose_backend(str(model), None, _cpuinfo(tmp_path, "amx_bf16"), openvino_installed=True)
    assert got.backend == "torch" and "query adapter" in got.note and got.options() == {}
    (model / "aspire_encoder.json").unlink()
    plain = choose_backend(str(model), "cpu", _cpuinfo(tmp_path, "amx_bf16"), openvino_installed=True)
    assert plain.options() == {"backend": "openvino", "quantize": "bf16"}


# --- aspire.encoders.pretrained ----------------------------------------------------------------------------------

def test_check_model_refuses_unknown_names_and_non_models_before_torch(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for bad in ("minlm", str(tmp_path / "empty"), str(tmp_path / "file.txt"), str(tmp_path / "absent")):
        with pytest.raises(ValueError, match=f"unknown model '{bad}'"):
            check_model(bad)
    for name in MODELS:
        check_model(name)
    code = (f"import sys; from aspire.encoders.pretrained import check_model\n"
            f"try:\n    check_model({str(tmp_path / 'empty')!r})\nexcept ValueError:\n    pass\n"
            f"print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pinned_model_of_a_run_is_its_best_else_latest_checkpoint(tmp_path):
    run = _run(tmp_path, latest="checkpoint-000002", best="checkpoint-000001")
    assert pinned_model(str(run)) == str((run / "checkpoint-000001" / "model").absolute()) == str(resolve_model(run))
    (run / "best").unlink()
    assert pinned_model(str(run)) == str((run / "checkpoint-000002" / "model").absolute())
    assert pinned_model("minilm") == "minilm"


def test_pinned_model_refuses_a_folder_that_is_no_model_nor_run(tmp_path):
    # was the folder's absolute path, recorded in an index or shard as if it were a model
    run = _run(tmp_path, latest=None, best=None)
    with pytest.raises(ValueError, match=f"unknown model '{run}'"):
        pinned_model(str(run))


def test_pinned_model_names_the_folder_resolve_model_loads(tmp_path):
    # a model folder that also holds a run's pointer: resolve_model loads the folder itself; the record named the
    # pointer's checkpoint instead, so the index named a model other than the one that encoded it
    run = _run(tmp_path, latest="checkpoint-000002", best=None)
    (run / "config.json").write_text("{}")
    assert resolve_model(str(run)) == run
    assert pinned_model(str(run)) == str(run.absolute())
