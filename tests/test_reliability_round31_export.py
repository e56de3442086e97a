"""Round 31, model export and loading: the merged export's output folder, the adapter export's check of the base's
tokenizer call settings, the split zip's errors, and the recorded tokenizer against transformers on varied text, on
a tiny random BERT and temporary folders (nothing is downloaded)."""

from __future__ import annotations

import io
import json
import shutil
import zipfile

import pytest
import torch
from transformers import AutoTokenizer

from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.pretrained import assemble_split_zip, resolve_model
from aspire.encoders.recorded_tokenizer import rebuild, record_spec
from aspire.train.export import encoding_differences, export_adapter, export_merged
from tests.test_hybrid import trained_adapter

PAPERS = [{"paper_id": "p1", "title": "a title of the paper",
           "abstract": ["the model of text " * 5 + ".", "we propose a new method " * 4 + "."]},
          {"paper_id": "p2", "title": "", "abstract": ["results show the approach improves performance."]}]


# ---- export_merged: the folder it replaces ---------------------------------------------------------------------
def test_merged_export_refuses_a_folder_that_is_no_export_and_replaces_an_earlier_one(tiny_model_dir, tmp_path):
    """`export_merged` replaced any `--out` whole: called from Python on a folder of other files it deleted them
    (the command checked first, the function did not; `export_adapter` and `export_low_rank` refuse)."""
    encoder = trained_adapter(tiny_model_dir, tmp_path / "trained")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="no aspire_encoder.json in it"):
        export_merged(tmp_path / "trained", mine)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    out = export_merged(tmp_path / "trained", tmp_path / "merged")
    again = export_merged(tmp_path / "trained", out)  # an earlier export: replaced
    merged = ContextualSentenceEncoder.from_pretrained(again)
    assert merged.settings() == encoder.settings()
    torch.testing.assert_close(merged.encode(PAPERS).emb, encoder.encode(PAPERS).emb, rtol=0, atol=1e-6)


# ---- export_adapter: a base whose tokenizer is called otherwise ---------------------------------------------------
@pytest.mark.parametrize("key, value", [("truncation_side", "left"), ("model_input_names", ["input_ids",
                                                                                           "attention_mask"])])
def test_adapter_export_refuses_a_base_whose_tokenizer_cuts_or_feeds_otherwise(key, value, tiny_model_dir,
                                                                                tmp_path):
    """A base with the very weights, config and Rust tokenizer but `truncation_side: left` in its tokenizer_config
    (windows and cut texts keep other pieces: paper vectors 0.14 off at max_length 16) or without token_type_ids
    was accepted: `encoding_differences` compared the Rust pipeline only, and the fingerprint does not see these."""
    trained_adapter(tiny_model_dir, tmp_path / "trained")
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    config = json.loads((base / "tokenizer_config.json").read_text())
    (base / "tokenizer_config.json").write_text(json.dumps({**config, key: value}))
    plain, other = (ContextualSentenceEncoder.from_pretrained(m, max_length=16) for m in (tiny_model_dir, base))
    assert not torch.equal(plain.encode(PAPERS).emb, other.encode(PAPERS).emb)  # it changes the vectors
    assert encoding_differences(plain, other) == [f"tokenizer {key}"]
    assert encoding_differences(plain, ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=16)) == []
    with pytest.raises(ValueError, match=f"is not the base .* its tokenizer {key} differs"):
        export_adapter(tmp_path / "trained", tmp_path / "out", str(base))
    assert not (tmp_path / "out").exists()
    out, _ = export_adapter(tmp_path / "trained", tmp_path / "out", str(tiny_model_dir))  # its own base: written
    assert (out / "adapter" / "adapter_model.safetensors").is_file()


# ---- assemble_split_zip: pieces that do not make the archive -----------------------------------------------------
def _pieces(tmp_path, data: bytes, name: str) -> list:
    third = len(data) // 3
    out = []
    for i, chunk in enumerate([data[:third], data[third:2 * third], data[2 * third:]], 1):
        (tmp_path / f"{name}.zip.00{i}").write_bytes(chunk)
        out.append(tmp_path / f"{name}.zip.00{i}")
    return out


def _archive() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("m/config.json", json.dumps({"a": 1}) * 40)
        archive.writestr("m/model.safetensors", b"W" * 4000)
        archive.writestr("m/desktop.ini", "x")
        archive.writestr("other/x.txt", "y")
    return buf.getvalue()


def test_split_zip_extracts_its_root_and_names_the_pieces_of_a_broken_archive(tmp_path):
    """A piece cut short gave zipfile's bare BadZipFile ("File is not a zip file"), naming no piece; a root the
    archive lacks a FileNotFoundError renaming a temporary folder. Both are ValueErrors naming the pieces, and
    nothing is left behind."""
    data = _archive()
    good = _pieces(tmp_path, data, "good")
    out = assemble_split_zip(good, tmp_path / "cache" / "m", "m")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == b"W" * 4000
    with pytest.raises(ValueError, match=r"short\.zip\.001, short\.zip\.002, short\.zip\.003: joined, not a zip"):
        assemble_split_zip(_pieces(tmp_path, data[:-30], "short"), tmp_path / "c2" / "m", "m")
    with pytest.raises(ValueError, match=r"good\.zip\.001….*nothing under nope/"):
        assemble_split_zip(good, tmp_path / "c3" / "nope", "nope")
    broken = bytearray(data)
    broken[broken.find(b"W" * 100) + 10] = ord("X")
    with pytest.raises(ValueError, match="CRC mismatch in member m/model.safetensors"):
        assemble_split_zip(_pieces(tmp_path, bytes(broken), "crc"), tmp_path / "c4" / "m", "m")
    assert [p.name for p in (tmp_path / "c2").iterdir()] == [] and [p.name for p in (tmp_path / "c3").iterdir()] == []


def test_unknown_model_name_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown model 'minilmm': use one of \['aspire-minilm', 'minilm', 'mpnet'\]"):
        resolve_model("minilmm")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="unknown model"):
        resolve_model(tmp_path / "empty")


# ---- the recorded tokenizer against transformers ---------------------------------------------------------------
TITLES = ["", "T", "a title of the paper", "newword [BG] here", "[MASK]", "e.g. fig 2", "β", "the"]
TEXTS = ["", "Café naïve résumé → α", "the " * 300, "Ünïcödé 日本語 🙂 text", "  spaced   out  ", "[SEP] inside [CLS]",
         "a", "x" * 500]


def _plain(encoding) -> dict:
    return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in encoding.items()}


def _same(reference, recorded, **call) -> None:
    want, got = reference(**call), recorded(**call)
    assert _plain(got) == _plain(want), call
    assert [got.sequence_ids(r) for r in range(len(got["input_ids"]))] == [
        want.sequence_ids(r) for r in range(len(want["input_ids"]))]


@pytest.mark.parametrize("change", ["plain", "added tokens", "left sides"])
def test_recorded_tokenizer_gives_transformers_ids_offsets_and_windows(change, tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    if change == "added tokens":
        tokenizer.add_tokens(["newword"])
        tokenizer.add_special_tokens({"additional_special_tokens": ["[BG]"]})
    if change == "left sides":
        tokenizer.padding_side = tokenizer.truncation_side = "left"
    spec = record_spec(tokenizer)
    assert spec is not None
    recorded = rebuild(json.loads(json.dumps(spec)))  # as a load record stores it
    assert len(recorded) == len(tokenizer)
    for stride in (0, 4):
        _same(tokenizer, recorded, text=TITLES, text_pair=TEXTS, truncation="only_second", max_length=32,
              stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True, padding=True)
    _same(tokenizer, recorded, text=TITLES, add_special_tokens=False, return_offsets_mapping=True)
    _same(tokenizer, recorded, text=TEXTS, truncation=True, max_length=32, padding=True)
    _same(tokenizer, recorded, text=TEXTS, truncation=True, padding=True)  # the tokenizer's own limit (128)
    _same(tokenizer, recorded, text=TITLES, text_pair=TEXTS, truncation="longest_first", max_length=32,
          padding=True, return_tensors="pt")
    _same(tokenizer, recorded, text=TEXTS)


def test_recorded_tokenizer_without_a_length_limit_cuts_nothing_as_transformers(tiny_model_dir):
    """A tokenizer saved without a model_max_length has transformers' int(1e30): `truncation=True` with no max_length
    cuts nothing there, and the recorded tokenizer raised OverflowError ("int too big to convert")."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.model_max_length = int(1e30)
    recorded = rebuild(record_spec(tokenizer))
    _same(tokenizer, recorded, text=["the " * 200, "a"], truncation=True, padding=True)
    assert len(recorded(["the " * 200], truncation=True)["input_ids"][0]) == 202
