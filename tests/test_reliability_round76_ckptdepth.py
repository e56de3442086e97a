"""Round 76: the checkpoint a result record names is the one the encoder loaded. A writer given a training run's folder
read the run's pointer for the record (`checkpoint_record`) and `load_encoder` read it again for the weights, so a run
training on that moved `best` between the two reads left the record naming weights that were not loaded. The pointer is
now read once, at the load (`aspire.encoders.pretrained.resolve_checkpoint`), the encoder carries what it loaded
(`loaded_checkpoint`), and the writers record that. Tiny random models, no network."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_benchmarks import make_reviewer_set, tiny_context2doc
from test_reliability_round74_provenance import _loaded, _run_folder

from aspire import paths
from aspire.encoders import load_encoder, pretrained
from aspire.encoders.contextual import ContextualSentenceEncoder
from aspire.train import checkpoint as ckpt


@pytest.fixture
def moving(tmp_path, tiny_model_dir, monkeypatch):
    """(a training run's folder whose `best` moves to its other checkpoint right after each read of it, as a resumed
    run training on beside the reader may move it; the model folders loaded, in order)."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    run = _run_folder(tmp_path, tiny_model_dir)
    read = paths.run_pointer

    def read_then_move(run_dir):
        found = read(run_dir)
        if found is not None and found[0] == ckpt.BEST:
            other = 3 - found[1]["step"]  # 1 <-> 2
            ckpt.write_pointer(run, ckpt.BEST, {"checkpoint": ckpt.checkpoint_name(other), "step": other,
                                                "dev_loss": 0.1})
        return found

    monkeypatch.setattr(paths, "run_pointer", read_then_move)  # `run_model`'s
    monkeypatch.setattr(pretrained, "run_pointer", read_then_move)
    loads = []
    from_folder = ContextualSentenceEncoder.from_folder.__func__

    def spy(cls, path, *args, **kwargs):
        loads.append(Path(path).absolute())
        return from_folder(cls, path, *args, **kwargs)

    monkeypatch.setattr(ContextualSentenceEncoder, "from_folder", classmethod(spy))
    return run, loads


def _the_load(run: Path, loads: list[Path], since: int) -> dict:
    """The record of the one model folder loaded since `loads[since]`: `{"checkpoint": ...}`."""
    assert len(loads) == since + 1, loads[since:]
    step = int(loads[-1].parent.name.rpartition("-")[2])
    assert loads[-1] == Path(_loaded(run, step)["path"])
    return {"checkpoint": _loaded(run, step)}


def test_load_encoder_carries_the_checkpoint_it_loaded_through_to(moving, tiny_model_dir):
    run, loads = moving
    encoder = load_encoder(run)
    assert encoder.loaded_checkpoint == _the_load(run, loads, 0) == {"checkpoint": _loaded(run, 1)}
    assert encoder.to("cpu").loaded_checkpoint == {"checkpoint": _loaded(run, 1)}
    # the pointer moved after that read: the next load takes checkpoint 2 and says so
    assert load_encoder(str(run)).loaded_checkpoint == _the_load(run, loads, 1) == {"checkpoint": _loaded(run, 2)}
    built = ContextualSentenceEncoder.from_pretrained(run)
    assert built.loaded_checkpoint == _the_load(run, loads, 2) == {"checkpoint": _loaded(run, 1)}
    # a model folder names its weights itself
    assert load_encoder(tiny_model_dir).loaded_checkpoint == {}


def test_an_encoder_from_a_load_record_carries_the_checkpoint(tmp_path, tiny_model_dir, monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    run = _run_folder(tmp_path, tiny_model_dir)
    first = load_encoder(run, backend="onnx")
    second = load_encoder(run, backend="onnx")  # from the record the first load wrote: no torch model
    assert first.model.exact is not None and second.model.exact is None
    assert first.loaded_checkpoint == second.loaded_checkpoint == {"checkpoint": _loaded(run, 1)}


def _write(name: str, model: str, tmp_path: Path, request) -> dict:
    """The record the writer `name` returns for `model`."""
    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.evaluate.context2doc_run import run_context2doc
    from aspire.evaluate.csfcube import run_csfcube
    from aspire.evaluate.probes import Features
    from aspire.evaluate.reviewer_run import run_reviewers
    from aspire.evaluate.search_run import run_reviewers_search

    if name == "csfcube":  # `rank_pool_set`
        return run_csfcube(request.getfixturevalue("small_csfcube"), model, "abstract", tmp_path / "cf", "cf")
    if name == "probe features":
        return Features(model, {}).loaded
    if name == "context2doc":
        return run_context2doc(tiny_context2doc(tmp_path / "c2d"), tmp_path / "c", "c", model, "abstract")
    rset = load_reviewer_set(make_reviewer_set(tmp_path / "rm"))
    if name == "reviewers":
        return run_reviewers(rset, model, ["abstract"], tmp_path / "r", "r", "max")
    return run_reviewers_search(rset, tmp_path / "rs", "rs", model, ["rerank=minl2"], "max")


@pytest.mark.parametrize("name", ["csfcube", "reviewers", "reviewers search", "context2doc", "probe features"])
def test_a_writer_records_the_checkpoint_it_loaded_though_best_moved(moving, tmp_path, request, name):
    run, loads = moving
    recorded = _write(name, str(run), tmp_path, request)
    assert {"checkpoint": recorded["checkpoint"]} == _the_load(run, loads, 0)
