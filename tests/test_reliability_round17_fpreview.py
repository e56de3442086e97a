"""Round 17, fingerprint version 2 reviewed end to end: the fingerprint tells apart ModernBERT models whose config
(activation, attention layers, rotary bases: no weights) gives other vectors, as transformers 5 stores them; a sharded
encoding finished before version 2 is resumed by its own model rather than refused as another model's."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from aspire.encoders import ContextualSentenceEncoder
from aspire.index import IndexBuildConfig, SentenceIndex
from aspire.index.shards import run_encode_shard
from aspire.index.stream import merge_streaming
from aspire.search import Searcher

PAPERS = [{"paper_id": "a", "title": "Model text",
           "abstract": "A model of text and the data of a paper with a new method. It reads words in the text of "
                       "the paper and shows results."},
          {"paper_id": "b", "title": "Graphs", "abstract": "Graphs have nodes. The text is short."}]


@pytest.fixture(scope="module")
def tiny_modernbert(tiny_model_dir, tmp_path_factory) -> Path:
    """A random 3-layer ModernBERT (layers 0 global, 1 and 2 local, a 4-piece window) with the tiny BERT's
    tokenizer, in Hugging Face format."""
    from transformers import ModernBertConfig, ModernBertModel

    path = tmp_path_factory.mktemp("tiny-modernbert")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_model_dir / name).is_file():
            shutil.copy(tiny_model_dir / name, path / name)
    n_vocab = len((tiny_model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    config = ModernBertConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=128, pad_token_id=0, cls_token_id=2,
                              sep_token_id=3, bos_token_id=2, eos_token_id=3, local_attention=4,
                              global_attn_every_n_layers=2)
    torch.manual_seed(0)
    ModernBertModel(config).eval().save_pretrained(path)
    return path


def _activation(config: dict) -> None:
    config["hidden_activation"] = "relu"


def _rotary(config: dict) -> None:
    config["rope_parameters"]["full_attention"]["rope_theta"] = 10.0
    config.pop("global_rope_theta", None)


def _layers(config: dict) -> None:
    config["layer_types"] = ["full_attention"] * 3


@pytest.mark.parametrize("change", [_activation, _rotary, _layers], ids=["activation", "rotary", "layers"])
def test_a_modernbert_config_that_changes_the_vectors_changes_the_fingerprint(change, tiny_modernbert, tmp_path):
    """transformers 5 keeps ModernBERT's activation in `hidden_activation`, its layers' kinds in `layer_types` and
    its rotary bases in `rope_parameters`; the version-2 list had none of them: a ReLU model, a base of 10 for the
    global layers and every layer global each gave the fingerprint of the model they were copied from (vectors
    3e-4, 1e-5 and 2e-3 apart)."""
    base = ContextualSentenceEncoder.from_pretrained(tiny_modernbert)
    other = shutil.copytree(tiny_modernbert, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    change(config)
    (other / "config.json").write_text(json.dumps(config))
    changed = ContextualSentenceEncoder.from_pretrained(other)
    assert float((base.encode(PAPERS).emb - changed.encode(PAPERS).emb).abs().max()) > 1e-6  # other vectors
    assert changed.fingerprint() != base.fingerprint()
    copy = ContextualSentenceEncoder.from_pretrained(shutil.copytree(tiny_modernbert, tmp_path / "copy"))
    assert copy.fingerprints() == base.fingerprints()  # a copy, loaded again: the same fingerprint


def _corpus(tmp_path: Path) -> Path:
    papers = [{"paper_id": c, "title": "Model text", "abstract": f"A model of text {c}. It reads words."}
              for c in "abcd"]
    (tmp_path / "papers.jsonl").write_text("".join(json.dumps(p) + "\n" for p in papers))
    return tmp_path / "papers.jsonl"


def _as_version_1(shard: Path, fingerprint: str) -> None:
    """What encode-shard wrote before version 2: the same shard.json but the model's version-1 fingerprint."""
    meta = json.loads((shard / "shard.json").read_text())
    (shard / "shard.json").write_text(json.dumps({**meta, "model_fingerprint": fingerprint}, indent=1))


def test_a_sharded_encoding_finished_before_version_2_is_resumed_by_its_model(tiny_model_dir, tmp_path):
    """An encoding into 2 shards, one finished before version 2: the re-run refused it ("encoded with model M
    (fingerprint a928...), this run with model M (fingerprint v2-92d1...): ... remove the stale shards"), so every
    finished shard had to be encoded again; now it is kept with a warning, the missing one records the same
    version-1 fingerprint, and the merged index is searched by the model with the version-1 warning."""
    corpus, shards, model = _corpus(tmp_path), tmp_path / "shards", str(tiny_model_dir)
    paths = [path for path, _ in run_encode_shard(model, corpus, shards, IndexBuildConfig(), num_shards=2,
                                                  progress=False)]
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    fingerprint, legacy = encoder.fingerprints()
    assert [json.loads((p / "shard.json").read_text())["model_fingerprint"] for p in paths] == [fingerprint] * 2
    _as_version_1(paths[0], legacy)
    shutil.rmtree(paths[1])  # not finished before the upgrade
    with pytest.warns(UserWarning, match="version-1 fingerprint .*shard-00000-of-00002|shard-00000-of-00002.*version-1"):
        resumed = run_encode_shard(model, corpus, shards, IndexBuildConfig(), num_shards=2, progress=False)
    assert [reused for _, reused in resumed] == [True, False]
    assert [json.loads((p / "shard.json").read_text())["model_fingerprint"] for p in paths] == [legacy] * 2
    merge_streaming(shards, tmp_path / "index", IndexBuildConfig())
    index = SentenceIndex.load(tmp_path / "index")
    assert index.model_fingerprint == legacy and index.n_papers == 4
    with pytest.warns(UserWarning, match="version-1 fingerprint"):
        Searcher(index, encoder=encoder)


def test_a_version_1_shard_of_another_model_is_still_refused(tiny_model_dir, tmp_path):
    corpus, shards, model = _corpus(tmp_path), tmp_path / "shards", str(tiny_model_dir)
    paths = [path for path, _ in run_encode_shard(model, corpus, shards, IndexBuildConfig(), num_shards=2,
                                                  progress=False)]
    _as_version_1(paths[0], "0123456789abcdef")  # another model's version-1 fingerprint
    shutil.rmtree(paths[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="shard-00000-of-00002 was encoded with model .*0123456789abcdef"):
            run_encode_shard(model, corpus, shards, IndexBuildConfig(), num_shards=2, progress=False)
    assert not [w for w in caught if "version-1" in str(w.message)]  # no "kept" warning either
    assert not paths[1].exists()
