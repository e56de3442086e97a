"""Round 62, one check of JSON values before writing: `aspire.io.finite_dumps` names the dotted key (and `what`) of a
value or key `json.dumps` cannot write (a numpy float32: `json.dumps`' bare TypeError named neither), and the checkpoint
pointers are written through it (`_check_json_values` looked at the top keys only, naming a nested value's top key, and
let keys 1 and "1" through into a pointer `read_pointer` refuses). The three readers of aspire's own JSON that read with
`finite` (`read_pointer`, `run_model`, `read_model_file`) refuse JSON nested too deeply naming the file, as
`aspire.io.read_json` does: a RecursionError naming nothing escaped them."""

import json

import numpy as np
import pytest

from aspire.io import finite_dumps
from aspire.paths import run_model
from aspire.train import checkpoint as ckpt
from aspire.train.document_model import MODEL_FILE, read_model_file
from tests.test_reliability_round55_ckpt import _listing, _record, _write

DEEP = "[" * 100_000  # deeper than Python's json reads


# ---- finite_dumps ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("obj, found", [
    ({"model": {"tau": np.float32(0.5)}}, r"model\.tau, a value of type float32"),
    ({"tasks": [1, {"w": {1, 2}}]}, r"tasks\.1\.w, a value of type set"),
    ({"m": {(1, 2): "a"}}, r"the key \(1, 2\) of m, of type tuple"),
    (np.int64(3), r"\$, a value of type int64"),
])
def test_finite_dumps_names_what_and_the_dotted_key_of_a_value_json_cannot_write(obj, found):
    with pytest.raises(ValueError, match=rf"^cannot write x\.json: records {found}, which JSON cannot write"):
        finite_dumps(obj, "cannot write x.json:")  # was json's TypeError "Object of type float32 is not JSON ..."


def test_finite_dumps_still_writes_json_dumps_text_for_json_values():
    """Checked, correct: numpy float64 (a float) and bool keys are JSON, written as `json.dumps` writes them."""
    record = {"loss": np.float64(0.25), True: [1, 2.5, None], "s": "\u00e9"}
    assert finite_dumps(record, "x", indent=1) == json.dumps(record, indent=1)


# ---- the checkpoint pointers ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, said", [
    (np.float32(0.5), r"by_task\.cocite, a value of type float32, which JSON cannot write"),
    (float("nan"), r"by_task\.cocite nan, which JSON has no number"),
])
def test_write_pointer_names_a_nested_value_by_its_dotted_key_before_writing(tmp_path, value, said):
    ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1}, best=_record(1))
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=rf"/best: the `best` pointer records {said}"):
        ckpt.write_pointer(tmp_path, ckpt.BEST, _record(1, by_task={"cocite": value}))  # named 'by_task' only
    assert _listing(tmp_path) == before


def test_write_pointer_refuses_keys_written_as_one_name_before_writing(tmp_path):
    ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1})
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=r"/latest: the `latest` pointer \$: keys 1 and '1' are both written"):
        ckpt.write_pointer(tmp_path, ckpt.LATEST, {**_record(1), 1: "a", "1": "b"})  # was written, then unreadable
    assert _listing(tmp_path) == before
    assert ckpt.read_pointer(tmp_path)["step"] == 1


def test_a_best_record_with_a_nested_numpy_value_is_refused_before_the_checkpoint_is_written(tmp_path):
    ckpt.save_checkpoint(tmp_path, 0, _write, {"step": 0}, best=_record(0))
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=r"the `best` pointer to checkpoint-000001 records by_task\.cocite, a value of "
                                         "type float32"):
        ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1}, best=_record(1, by_task={"cocite": np.float32(0.5)}))
    assert _listing(tmp_path) == before


def test_a_pointer_keeps_its_format(tmp_path):
    """Checked, correct: a pointer is `json.dumps(record)` and a newline, as before."""
    ckpt.save_checkpoint(tmp_path, 2, _write, {"step": 2}, best=_record(2, **{"dev_loss/a": np.float64(0.125)}))
    assert (tmp_path / ckpt.BEST).read_text() == json.dumps(_record(2, **{"dev_loss/a": 0.125})) + "\n"
    assert (tmp_path / ckpt.LATEST).read_text() == '{"checkpoint": "checkpoint-000002", "step": 2}\n'


# ---- the readers ----------------------------------------------------------------------------------------------------
def test_read_pointer_refuses_json_nested_too_deeply_naming_the_pointer(tmp_path):
    ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1})
    (tmp_path / ckpt.LATEST).write_text(DEEP)
    with pytest.raises(ValueError, match=r"/latest: damaged `latest` pointer, not JSON \(maximum recursion depth"):
        ckpt.read_pointer(tmp_path)  # was a RecursionError naming no file


def test_run_model_refuses_json_nested_too_deeply_naming_the_pointer(tmp_path):
    (tmp_path / ckpt.BEST).write_text(DEEP)
    with pytest.raises(ValueError, match=r"/best: not a training run's pointer"):
        run_model(tmp_path)  # was a RecursionError naming no file


def test_read_model_file_refuses_json_nested_too_deeply_naming_the_file(tmp_path):
    (tmp_path / MODEL_FILE).write_text(DEEP)
    with pytest.raises(ValueError, match=rf"/{MODEL_FILE}: damaged, not JSON \(maximum recursion depth"):
        read_model_file(tmp_path / MODEL_FILE)  # was a RecursionError naming no file
