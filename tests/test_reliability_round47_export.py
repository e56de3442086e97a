"""Round 47, weight soups (`aspire.train.interpolate.soup`): the soup's weights against the element-wise mean of
its members' by hand, and members whose encoder settings differ refused naming the setting; on a tiny random
BERT in temporary folders (nothing is downloaded)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import BertModel

from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.pretrained import SETTINGS_FILE
from aspire.train.interpolate import soup


def _member(tiny_model_dir, path, seed: int, **settings):
    """The tiny model with every float weight moved by seeded noise, at `path`; `settings` written to its encoder
    settings file."""
    shutil.copytree(tiny_model_dir, path)
    model = BertModel.from_pretrained(tiny_model_dir)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path)
    if settings:
        saved = path / SETTINGS_FILE
        old = json.loads(saved.read_text()) if saved.is_file() else {}
        saved.write_text(json.dumps({**old, **settings}))
    return path


def test_a_soup_is_the_element_wise_mean_of_its_members(tiny_model_dir, tmp_path):
    """Three members: a few tensors of the soup against (a + b + c) / 3 by hand, and the record's leaf weights 1/3."""
    paths = [_member(tiny_model_dir, tmp_path / f"m{i}", i) for i in range(3)]
    out = soup(paths, tmp_path / "soup")
    weights = [BertModel.from_pretrained(p).state_dict() for p in paths]
    got = BertModel.from_pretrained(out).state_dict()
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.1.attention.self.query.weight",
                 "encoder.layer.0.output.LayerNorm.bias"):
        torch.testing.assert_close(got[name], sum(w[name] for w in weights) / 3, rtol=0, atol=1e-6)
    if "embeddings.position_ids" in got:  # an id buffer is kept, not averaged
        assert torch.equal(got["embeddings.position_ids"], weights[0]["embeddings.position_ids"])
    record = json.loads((out / "interpolation.json").read_text())
    assert record["weights"] == pytest.approx({str(p): 1 / 3 for p in paths})


def test_a_soup_of_members_with_other_encoder_settings_is_refused_naming_the_setting(tiny_model_dir, tmp_path):
    """Plain members (no document_model.json) whose encoder settings differ (max_length 64 and 32) made a soup
    that encoded with the first's settings alone, the second's silently dropped."""
    first = _member(tiny_model_dir, tmp_path / "a", 1, max_length=64)
    second = _member(tiny_model_dir, tmp_path / "b", 2, max_length=32)
    assert ContextualSentenceEncoder.from_pretrained(second).max_length == 32
    with pytest.raises(ValueError, match=rf"{second}: encoder setting max_length is 32, 64 in {first}"):
        soup([first, second], tmp_path / "soup")
    assert not (tmp_path / "soup").exists()
