"""Round 80, encoding: a left-padding tokenizer, a settings file's bad values, and `aspire encode --long-report` on a
paper the tokenizer cannot see."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from aspire.encoders import load_encoder
from aspire.encoders.pretrained import SETTINGS_FILE

PAPERS = [
    {"paper_id": "short", "title": "A model", "abstract": ["We propose a model.", "It improves results."]},
    {"paper_id": "mid", "title": "Text similarity", "abstract": [f"The method {i} of text and data." for i in range(6)]},
    {"paper_id": "long", "title": "Scientific documents", "abstract": [f"We show results {i} on data." for i in range(30)]},
]


def _copy(tiny_model_dir, tmp_path, name: str):
    folder = tmp_path / name
    shutil.copytree(tiny_model_dir, folder)
    return folder


def test_a_left_padding_tokenizer_gives_a_paper_the_same_vectors_in_any_batch(tiny_model_dir, tmp_path):
    """A model folder whose tokenizer_config.json says padding_side "left": BERT's positions were shifted by the
    padding, so a paper's sentence vectors depended on the papers batched with it (0.83 apart between batch sizes 1
    and 32 on tiny BERT), silently. It now encodes as the right-padding model does."""
    folder = _copy(tiny_model_dir, tmp_path, "left")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    left, plain = load_encoder(folder), load_encoder(tiny_model_dir)
    together, alone = left.encode(PAPERS, batch_size=32), left.encode(PAPERS, batch_size=1)
    reference = plain.encode(PAPERS, batch_size=32)
    assert torch.equal(together.mask, alone.mask) and torch.equal(together.mask, reference.mask)
    for got in (together, alone):
        assert torch.allclose(got.emb, reference.emb, atol=1e-5)
        assert torch.allclose(got.whole, reference.whole, atol=1e-5)
    texts = ["a model", "the method of text and data " * 3]
    assert torch.allclose(left.embed_texts(texts, batch_size=2), plain.embed_texts(texts), atol=1e-5)


@pytest.mark.parametrize("settings, said", [
    ({"max_length": "64"}, "max_length must be"),
    ({"include_title": "yes"}, "include_title must be true or false"),
    ({"codes": None}, "codes must be a list of non-empty strings, got None"),  # was a TypeError naming nothing
    ({"codes": "[DOC]"}, r"codes must be a list of non-empty strings, got '\[DOC\]'"),  # was read as its letters
])
def test_a_settings_file_value_the_encoder_refuses_names_the_file(settings, said, tiny_model_dir, tmp_path):
    folder = _copy(tiny_model_dir, tmp_path, "odd")
    (folder / SETTINGS_FILE).write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=rf"{SETTINGS_FILE}: .*{said}"):
        load_encoder(folder)
    with pytest.raises(ValueError, match=rf"load_encoder's keywords: .*{said}"):  # a keyword's value: named so
        load_encoder(tiny_model_dir, **settings)


def test_aspire_encode_names_the_settings_file_of_a_null_codes_entry(tiny_model_dir, tmp_path, capsys):
    from aspire.cli import main

    folder = _copy(tiny_model_dir, tmp_path, "nullcodes")
    (folder / SETTINGS_FILE).write_text(json.dumps({"codes": None}))
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PAPERS))
    assert main(["encode", "--model", str(folder), "--corpus", str(corpus), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"error: {folder / SETTINGS_FILE}: " in err and "codes must be a list" in err


def test_long_report_names_a_paper_the_tokenizer_cannot_see_and_reports_the_others(tiny_model_dir, tmp_path, capsys):
    """With include_title, a title of a zero-width space is a sentence of no word piece: `aspire encode` rejects that
    paper and encodes the others, but --long-report stopped on it (exit 2), reporting no paper at all."""
    from aspire.cli import main

    folder = _copy(tiny_model_dir, tmp_path, "titled")
    (folder / SETTINGS_FILE).write_text(json.dumps({"include_title": True}))
    long = {"paper_id": "long", "title": "Data", "abstract": [f"We show results {i} of the model on data." for i in range(25)]}
    records = [PAPERS[0], {"paper_id": "blank", "title": "\u200b", "abstract": ["A model."]}, long]
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    args = ["encode", "--model", str(folder), "--corpus", str(corpus)]
    assert main([*args, "--long-report"]) == 0
    out, err = capsys.readouterr()
    assert [line.split("\t")[0] for line in out.splitlines()] == ["long"]
    assert "1 paper(s) of" in err and "line 2 paper 'blank': sentence(s) [0] give the tokenizer no word piece" in err
    assert "1 of 2 papers longer than 128 word pieces" in err
    assert main([*args, "--out", str(tmp_path / "out")]) == 0  # encode rejects the very paper
    rejected = [json.loads(line) for line in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert [(r["line"], r["paper_id"]) for r in rejected] == [(2, "blank")]
