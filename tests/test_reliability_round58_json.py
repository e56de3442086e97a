"""Round 58, non-finite numbers in the other JSON files aspire wrote with plain `json.dumps` and read with plain
`json.loads`: a document model's document_model.json (`DocumentModel.save_pretrained`, read by `read_model_file` and
`aspire.train.export.read_meta`), the interpolation record (`aspire.train.interpolate`), the low-rank export's report,
an index's manifest.json (`aspire.index.store`) and the run pointer `aspire.paths.run_model` follows. `json.dumps`
wrote a NaN as a bare `NaN`, which is not JSON, and `json.loads` read one back as a float unsaid. The settings and
records are now written with `aspire.io.finite_dumps` (a NaN refused, naming the file and the key, before anything
is written; the format otherwise as before) and read with the `finite` readers (naming the file and the constant);
the low-rank report, a measurement, writes a NaN as null with its reason (`aspire.jsonsafe.dumps`). Every committed
file under experiments/ and the shipped model still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from aspire.encoders import ContextualSentenceEncoder
from aspire.index import IndexBuildConfig, IndexConfig, IndexFormatError, SentenceIndex
from aspire.index.store import manifest_fields, write_manifest
from aspire.io import finite_dumps, loads_unique
from aspire.paths import BEST, LATEST, run_model
from aspire.train import interpolate as interp
from aspire.train.config import AdapterConfig, ModelConfig
from aspire.train.document_model import MODEL_FILE, DocumentModel, read_model_file
from aspire.train.export import LOW_RANK_REPORT, _records, export_low_rank, read_meta
from tests.test_index import random_corpus
from tests.test_interpolate import tuned_model
from tests.test_reliability_round54_iofinite import CONSTANTS

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "aspire" / "models" / "aspire-minilm"


def _add_key(file: Path, key: str, constant: str) -> None:
    """`file`'s JSON object with `"key": constant` added as its last key (a bare constant: what json.dumps wrote)."""
    text = file.read_text().rstrip()
    file.write_text(text[:text.rindex("}")] + f', "{key}": {constant}}}')


# ---- the helper -----------------------------------------------------------------------------------------------------
def test_finite_dumps_names_what_and_each_dotted_key_and_else_writes_json_dumps_text():
    with pytest.raises(ValueError, match=r"^cannot write x\.json: records model\.att_tau inf, tasks\.1 nan, which JSON "
                                         r"has no number for"):
        finite_dumps({"model": {"att_tau": float("inf")}, "tasks": [1.0, float("nan")]}, "cannot write x.json:")
    with pytest.raises(ValueError, match=r"^cannot write x\.json: \$: keys 1 and '1' are both written as JSON name"):
        finite_dumps({1: 0, "1": 1}, "cannot write x.json:")
    record = {"alpha": 0.5, "big": 1e308, "none": None, "name": "r\u00e9sum\u00e9 \u00a7", "nested": {"x": [1, 2.5]}}
    assert finite_dumps(record, "x", indent=2) == json.dumps(record, indent=2)  # the format as before


# ---- document_model.json --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings, key", [
    ({"kind": "att", "att_tau": float("inf")}, "model.att_tau inf"),
    ({"kind": "ts", "adapter": AdapterConfig(kind="lora", alpha=float("nan"))}, "model.adapter.alpha nan"),
])
def test_save_pretrained_refuses_a_non_finite_setting_naming_file_and_key_before_writing(tiny_model_dir, tmp_path,
                                                                                        settings, key):
    """A config made in code is not range-checked (loading one is): `json.dumps` wrote `"att_tau": Infinity`, which
    is not JSON, beside a whole saved encoder."""
    model = DocumentModel(ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir)), ModelConfig(**settings))
    with pytest.raises(ValueError, match=rf"cannot save {tmp_path}/out/{MODEL_FILE}: records {key}, which JSON has no "
                                         "number for"):
        model.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()  # the encoder was saved first, then the bad file


@pytest.mark.parametrize("constant", CONSTANTS)
def test_read_model_file_refuses_a_bare_constant_naming_file_and_constant(tiny_model_dir, tmp_path, constant):
    model = DocumentModel(ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir)), ModelConfig(kind="max"))
    model.save_pretrained(tmp_path / "m")
    _add_key(tmp_path / "m" / MODEL_FILE, "dev_loss", constant)  # a key no section holds: it was read unsaid
    with pytest.raises(ValueError, match=rf"m/{MODEL_FILE}: damaged, a bare {constant}, which is not JSON"):
        read_model_file(tmp_path / "m" / MODEL_FILE)
    with pytest.raises(ValueError, match=rf"m/{MODEL_FILE}: the {MODEL_FILE} holds a bare {constant}"):
        read_meta(tmp_path / "m")  # what export and interpolation copy into their outputs


def test_a_saved_document_model_json_keeps_its_format(tiny_model_dir, tmp_path):
    """Checked, correct: the file is `json.dumps(meta, indent=2)` as before, and loads back."""
    model = DocumentModel(ContextualSentenceEncoder.from_pretrained(str(tiny_model_dir)),
                          ModelConfig(kind="ot", ot_eps=0.1, ot_max_iter=50))
    model.save_pretrained(tmp_path / "m")
    text = (tmp_path / "m" / MODEL_FILE).read_text()
    assert text == json.dumps(json.loads(text), indent=2) and json.loads(text)["model"]["ot_eps"] == 0.1
    assert read_model_file(tmp_path / "m" / MODEL_FILE)[0].ot_eps == 0.1


# ---- interpolation: the record, and the document_model.json it copies -----------------------------------------------
def test_interpolate_refuses_a_model_whose_document_model_json_holds_a_bare_nan(tiny_model_dir, examples_dir,
                                                                                tmp_path):
    """`read_meta` read the NaN and `write_plain_meta` wrote it again into the interpolated model."""
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    _add_key(tuned / MODEL_FILE, "dev_loss", "NaN")
    with pytest.raises(ValueError, match=rf"tuned/{MODEL_FILE}: the {MODEL_FILE} holds a bare NaN"):
        interp.interpolate(tuned, 0.5, tmp_path / "wise", base=str(tiny_model_dir))
    assert not (tmp_path / "wise").exists()


def test_soup_refuses_a_member_whose_interpolation_record_holds_a_bare_nan(tiny_model_dir, examples_dir, tmp_path):
    """A soup's record holds each member's own record: a member's bare NaN was written again into the soup's."""
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    wise = interp.interpolate(tuned, 0.5, tmp_path / "wise", base=str(tiny_model_dir))
    record = json.loads((wise / interp.RECORD_FILE).read_text())
    assert record["alpha"] == 0.5 and (wise / interp.RECORD_FILE).read_text() == json.dumps(record, indent=2)
    (wise / interp.RECORD_FILE).write_text(json.dumps(record, indent=2).replace("\"alpha\": 0.5", "\"alpha\": NaN"))
    with pytest.raises(ValueError, match=rf"wise/{interp.RECORD_FILE}: the interpolation record holds a bare NaN"):
        interp.soup([wise, tuned], tmp_path / "soup")
    with pytest.raises(ValueError, match=rf"wise/{interp.RECORD_FILE}: the {interp.RECORD_FILE} holds a bare NaN"):
        _records(wise)  # the export's walk through a model's records
    assert not (tmp_path / "soup").exists()


# ---- the low-rank report --------------------------------------------------------------------------------------------
def test_low_rank_report_writes_a_nan_norm_as_null_with_its_reason(tiny_model_dir, examples_dir, tmp_path):
    """A NaN in a weight the adapter does not carry (a LayerNorm) made its norm NaN: written as a bare `NaN`."""
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path)
    weights = load_file(tuned / "model.safetensors")
    name = next(n for n in weights if n.endswith("LayerNorm.weight"))
    weights[name][0] = float("nan")
    save_file(weights, tuned / "model.safetensors", metadata={"format": "pt"})
    out, _, report = export_low_rank(tuned, tmp_path / "r2", str(tiny_model_dir), rank=2)
    written = loads_unique((out / LOW_RANK_REPORT).read_text(), finite=True)  # was a bare NaN: not JSON
    assert torch.tensor(report["relative_norms"]["layer_norm"]["difference"]).isnan()
    assert written["relative_norms"]["layer_norm"]["difference"] is None
    assert written["non_finite"]["relative_norms.layer_norm.difference"] == "nan"
    assert written["relative_norms"]["linear"] == report["relative_norms"]["linear"]


# ---- manifest.json --------------------------------------------------------------------------------------------------
FLAT = IndexBuildConfig(index=IndexConfig(kind="flat"))


@pytest.mark.parametrize("constant", CONSTANTS)
def test_index_load_refuses_a_bare_constant_in_the_manifest_naming_it(tmp_path, constant):
    gen = SentenceIndex.build(random_corpus(6), FLAT, "fp", "m").save(tmp_path / "idx")
    text = (gen / "manifest.json").read_text()
    assert text == json.dumps(json.loads(text), indent=1) + "\n"  # the format as before
    (gen / "manifest.json").write_text(text.replace('"k1": 1.25', f'"k1": {constant}'))
    with pytest.raises(IndexFormatError, match=rf"gen-\d+/manifest.json is corrupted: a bare {constant}, which is not"):
        SentenceIndex.load(tmp_path / "idx")  # was loaded, the manifest holding k1 nan


def test_write_manifest_refuses_a_non_finite_setting_naming_the_key(tmp_path):
    index = SentenceIndex.build(random_corpus(6), FLAT, "fp", "m")
    gen = index.save(tmp_path / "idx")
    before = (gen / "manifest.json").read_text()
    index.bm25.k1 = float("nan")  # BM25Index refuses one when built: written as a bare NaN had one got there
    fields = manifest_fields(index.faiss_index, index.kind, "m", "fp", index.dim, index.n_papers, index.n_sentences,
                             0, "float32")
    with pytest.raises(ValueError, match=rf"cannot write {gen}/manifest.json: records bm25.k1 nan"):
        write_manifest(gen, index.config, fields, index.bm25)
    assert (gen / "manifest.json").read_text() == before


# ---- run pointers ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("constant", CONSTANTS)
def test_run_model_refuses_a_pointer_holding_a_bare_constant(tmp_path, constant):
    """`read_pointer` refused it at --resume; `run_model` (every command given a run folder) followed it."""
    (tmp_path / "checkpoint-000002" / "model").mkdir(parents=True)
    (tmp_path / "checkpoint-000002" / "model" / "config.json").write_text("{}")
    (tmp_path / BEST).write_text('{"checkpoint": "checkpoint-000002", "step": 2, "dev_loss": ' + constant + "}")
    with pytest.raises(ValueError, match=rf"/best: not a training run's pointer: a bare {constant}, which is not JSON"):
        run_model(tmp_path)
    (tmp_path / BEST).unlink()
    (tmp_path / LATEST).write_text('{"checkpoint": "checkpoint-000002", "step": 2}')
    assert run_model(tmp_path) == tmp_path / "checkpoint-000002" / "model"


# ---- the committed files --------------------------------------------------------------------------------------------
def test_the_shipped_model_and_the_committed_records_read_with_the_strict_readers():
    """Checked, correct: the shipped model's document_model.json and low_rank.json, and every interpolation record
    and run pointer under experiments/, are strict JSON."""
    assert read_model_file(SHIPPED / MODEL_FILE)[0].adapter.kind == "lora"
    assert read_meta(SHIPPED)["model"]["adapter"]["kind"] == "lora"
    loads_unique((SHIPPED / LOW_RANK_REPORT).read_text(), finite=True)
    records = [p.parent for p in (REPO / "experiments").rglob(interp.RECORD_FILE)]
    assert records, "no committed interpolation record found"
    for folder in records:
        assert interp._record(folder) is not None
    pointers = [p for p in (REPO / "experiments").rglob("*") if p.name in (BEST, LATEST) and p.is_file()]
    assert pointers, "no committed pointer found"
    for pointer in pointers:
        assert "checkpoint" in loads_unique(pointer.read_text(encoding="utf-8"), finite=True)  # run_model's reader
