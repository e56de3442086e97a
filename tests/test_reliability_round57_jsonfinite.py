"""Round 57, non-finite numbers in the two JSON files aspire writes with plain `json.dumps`: a shard's shard.json
(`EncodedCorpus.save_shard`, a caller's meta beside the counts) and a run's checkpoint pointers (`best` records the
dev losses). `json.dumps` wrote a NaN as a bare `NaN`, which is not JSON, and `json.loads` read one back as a float
unsaid. The writers now refuse a non-finite value naming the key, before anything is written; the readers
(`read_shard_meta`, `read_pointer`) read with `aspire.io`'s `finite` option, naming the file and the constant. The
files keep their format: every pointer under experiments/results/ reads as before."""

import json
from pathlib import Path

import pytest

from aspire.index.corpus import EncodedCorpus
from aspire.io import loads_unique
from aspire.train import checkpoint as ckpt
from tests.test_reliability_round54_iofinite import CONSTANTS, _shard
from tests.test_reliability_round55_ckpt import _listing, _record, _write

REPO = Path(__file__).resolve().parents[1]


# ---- shard.json -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, key", [
    ({"loss": float("nan")}, "loss nan"),
    ({"encode": {"max_sentences": 3, "scale": float("-inf")}}, "encode.scale -inf"),  # nested: its dotted key
])
def test_save_shard_refuses_a_non_finite_meta_value_naming_the_key_before_writing(tmp_path, extra, key):
    _shard(tmp_path)  # an earlier shard there: left as it was
    before = _listing(tmp_path)
    corpus, meta = EncodedCorpus.load_shard(tmp_path / "shard")
    with pytest.raises(ValueError, match=rf"cannot save shard .*shard: meta records {key}, which JSON has no number"):
        corpus.save_shard(tmp_path / "shard", {**meta, **extra})  # was written as a bare NaN / -Infinity
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("constant", CONSTANTS)
def test_load_shard_refuses_a_bare_constant_in_shard_json_naming_file_and_constant(tmp_path, constant):
    path = _shard(tmp_path)
    text = (path / "shard.json").read_text()
    (path / "shard.json").write_text(text[:text.rindex("}")] + f', "loss": {constant}}}')
    with pytest.raises(ValueError, match=rf"shard/shard\.json: the shard shard's record holds a bare {constant}, "
                                         "which is not JSON"):
        EncodedCorpus.load_shard(path)  # was read as {"loss": nan} unsaid


def test_a_shard_json_keeps_its_format_and_finite_floats_read_back(tmp_path):
    """Checked, correct: the file is `json.dumps(info, indent=1)` as before, finite floats and None round-trip."""
    path = _shard(tmp_path)
    corpus, meta = EncodedCorpus.load_shard(path)
    meta = {**meta, "temperature": 0.05, "big": 1e308, "none": None}
    corpus.save_shard(path, meta)
    assert (path / "shard.json").read_text() == json.dumps(meta, indent=1)
    assert EncodedCorpus.load_shard(path)[1] == meta


# ---- checkpoint pointers --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("constant", CONSTANTS)
def test_read_pointer_refuses_a_bare_constant_naming_the_pointer_and_constant(tmp_path, constant):
    ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1}, best=_record(1))
    (tmp_path / ckpt.BEST).write_text('{"checkpoint": "checkpoint-000001", "step": 1, "dev_loss": ' + constant + "}")
    with pytest.raises(ValueError, match=rf"/best: damaged `best` pointer, a bare {constant}, which is not JSON"):
        ckpt.read_pointer(tmp_path, ckpt.BEST)  # was {"dev_loss": nan}, read as a good pointer
    assert ckpt.read_pointer(tmp_path)["step"] == 1  # `latest` stays readable


def test_read_pointer_refuses_a_key_twice(tmp_path):
    ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1})
    (tmp_path / ckpt.LATEST).write_text('{"checkpoint": "checkpoint-000001", "step": 0, "step": 1}')
    with pytest.raises(ValueError, match=r"damaged `latest` pointer, not JSON \(the key 'step' twice"):
        ckpt.read_pointer(tmp_path)  # json.loads kept the last step and dropped the other unseen


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_write_pointer_refuses_a_non_finite_value_naming_pointer_and_key(tmp_path, value):
    ckpt.save_checkpoint(tmp_path, 1, _write, {"step": 1}, best=_record(1))
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=rf"/best: the `best` pointer records dev_loss/a {value!r}, which JSON has no"):
        ckpt.write_pointer(tmp_path, ckpt.BEST, _record(1, **{"dev_loss/a": value}))  # was written as a bare NaN
    assert _listing(tmp_path) == before


def test_the_committed_pointers_read_as_before():
    """Checked, correct: every pointer and shard.json under experiments/ is strict JSON (the strict readers take it)."""
    files = [p for p in (REPO / "experiments").rglob("*") if p.name in (ckpt.BEST, ckpt.LATEST, "shard.json")
             and p.is_file()]
    assert files, "no committed pointer found"
    for file in files:
        loads_unique(file.read_text(encoding="utf-8"), finite=True)
