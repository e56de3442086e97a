"""The encoder fingerprint, version 2 (`aspire.encoders.identity`): it tells apart models whose weights and settings
agree but whose vectors do not (a config's activation, a swapped vocabulary, an adapter's scale), where version 1
gave one fingerprint for both; it stays put across a save and a reload and across flags set at run time; an index
built under version 1 is still searched by its model (with a warning) and refused to any other."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
from test_reliability_round14_backends import adapted_dir, set_alpha  # noqa: F401 (a fixture)

from aspire.encoders import ContextualSentenceEncoder, load_encoder
from aspire.encoders.identity import fingerprint_version, versioned
from aspire.index import EncodeConfig, EncodedCorpus, IndexBuildConfig, ModelMismatchError, SentenceIndex, encode_corpus
from aspire.index.build import add_to_index
from aspire.index.corpus import read_corpus
from aspire.search import Searcher

PAPERS = [{"paper_id": "a", "title": "Model text", "abstract": "A model of text. It reads words."},
          {"paper_id": "b", "title": "Graphs", "abstract": "Graphs have nodes. The text is short."}]


def encodings_differ(a: ContextualSentenceEncoder, b: ContextualSentenceEncoder) -> float:
    return float((a.encode(PAPERS).emb - b.encode(PAPERS).emb).abs().max())


def test_a_fingerprint_is_versioned_and_its_version_1_form_is_the_old_hash(tiny_model_dir):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    fingerprint, legacy = encoder.fingerprints()
    assert re.fullmatch(r"v2-[0-9a-f]{16}", fingerprint) and re.fullmatch(r"[0-9a-f]{16}", legacy)
    assert encoder.fingerprint() == fingerprint
    assert (fingerprint_version(fingerprint), fingerprint_version(legacy)) == (2, 1)
    assert fingerprint_version("v-abc") == fingerprint_version("vx-1") == 1 and versioned("ab" * 20) == "v2-" + "ab" * 8


def changed_copy(model: Path, to: Path, change: str) -> Path:
    """A copy of `model` with the same weights that encodes otherwise: GELU swapped for ReLU (`config`), or the ids of
    two words swapped (`vocabulary`)."""
    other = shutil.copytree(model, to)
    if change == "config":
        config = json.loads((other / "config.json").read_text())
        (other / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    else:
        vocab = (other / "vocab.txt").read_text().splitlines()
        i, j = vocab.index("model"), vocab.index("text")
        vocab[i], vocab[j] = vocab[j], vocab[i]
        (other / "vocab.txt").write_text("\n".join(vocab) + "\n")
        (other / "tokenizer.json").unlink()  # rebuilt from vocab.txt
    return other


@pytest.mark.parametrize("change", ["config", "vocabulary"])
def test_version_2_tells_apart_a_model_with_the_same_weights_but_another_config_or_vocabulary(change, tiny_model_dir,
                                                                                               tmp_path):
    """Version 1 hashed the weights and the vocabulary's size: GELU swapped for ReLU, or two words' ids swapped, gave
    the same fingerprint for other vectors (measured 0.02 and 0.7 apart on the tiny BERT)."""
    base = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    changed = ContextualSentenceEncoder.from_pretrained(changed_copy(tiny_model_dir, tmp_path / "other", change))
    assert encodings_differ(base, changed) > 1e-3  # other vectors: the fingerprints must differ
    assert changed.fingerprints()[1] == base.fingerprints()[1]  # what version 1 missed
    assert changed.fingerprint() != base.fingerprint()


def test_version_2_tells_apart_an_adapter_scale(adapted_dir, tmp_path):  # noqa: F811 (the fixture imported)
    before = ContextualSentenceEncoder.from_pretrained(adapted_dir)
    set_alpha(adapted_dir, 32.0)
    after = ContextualSentenceEncoder.from_pretrained(adapted_dir)
    assert encodings_differ(before, after) > 1e-3
    assert after.fingerprints()[1] == before.fingerprints()[1] and after.fingerprint() != before.fingerprint()
    copy = shutil.copytree(adapted_dir, tmp_path / "copy")  # peft records where it was read from: no matter
    assert ContextualSentenceEncoder.from_pretrained(copy).fingerprint() == after.fingerprint()


def test_the_fingerprint_stays_put_across_a_save_and_flags_set_at_run_time(tiny_model_dir, tmp_path):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    before = encoder.fingerprints()
    encoder.model.config.output_hidden_states = True  # a flag a caller may set: no other vectors
    encoder.model.config.return_dict = False
    assert encoder.fingerprints() == before
    encoder.save_pretrained(tmp_path / "saved")
    assert ContextualSentenceEncoder.from_pretrained(tmp_path / "saved").fingerprints() == before
    encoder.model.config.layer_norm_eps = 1e-3  # one that changes the vectors
    assert encoder.fingerprint() != before[0] and encoder.fingerprints()[1] == before[1]


def _corpus(encoder, tmp_path) -> EncodedCorpus:
    (tmp_path / "papers.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAPERS))
    papers, unreadable = read_corpus(tmp_path / "papers.jsonl")
    assert not unreadable
    return encode_corpus(encoder, papers, EncodeConfig(), progress=False)


def _index(encoder, fingerprint: str, tmp_path) -> SentenceIndex:
    return SentenceIndex.build(_corpus(encoder, tmp_path), IndexBuildConfig(), fingerprint, "tiny", False)


def test_an_index_built_under_version_1_is_searched_by_its_model_with_a_warning(tiny_model_dir, tmp_path):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    fingerprint, legacy = encoder.fingerprints()
    index = _index(encoder, legacy, tmp_path)
    with pytest.warns(UserWarning, match="version-1 fingerprint .* rebuild it to have them checked"):
        Searcher(index, encoder=encoder)
    other = _index(encoder, "0123456789abcdef", tmp_path)  # another model's version-1 fingerprint
    with pytest.raises(ModelMismatchError):
        Searcher(other, encoder=encoder)
    current = _index(encoder, "v2-0123456789abcdef", tmp_path)
    with pytest.raises(ModelMismatchError):  # a version-2 index is matched by the version-2 fingerprint alone
        current.check_model("v2-fedcba9876543210", "v2-0123456789abcdef")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _index(encoder, fingerprint, tmp_path).check_model(fingerprint, legacy)  # the same version: no warning


def test_papers_added_to_a_version_1_index_keep_its_fingerprint(tiny_model_dir, tmp_path):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    _, legacy = encoder.fingerprints()
    root = tmp_path / "index"
    _index(encoder, legacy, tmp_path).save(root)
    (tmp_path / "more.jsonl").write_text(json.dumps({"paper_id": "c", "title": "Trees",
                                                     "abstract": "Trees grow. They have leaves."}) + "\n")
    with pytest.warns(UserWarning, match="version-1 fingerprint"):
        index, *_ = add_to_index(root, tmp_path / "more.jsonl", model=str(tiny_model_dir),
                                 load_encoder=lambda name: ContextualSentenceEncoder.from_pretrained(name))
    assert index.n_papers == 3 and SentenceIndex.load(root).model_fingerprint == legacy


def test_a_fast_encoder_from_its_load_record_keeps_both_fingerprints(tiny_model_dir, cache):
    first = load_encoder(tiny_model_dir, backend="onnx")
    assert first.model.exact is not None  # built from the torch model, the record written
    again = load_encoder(tiny_model_dir, backend="onnx")
    assert again.model.exact is None  # from the record: nothing to hash
    assert again.fingerprints() == first.fingerprints()
    assert fingerprint_version(again.fingerprint()) == 2 and fingerprint_version(again.fingerprints()[1]) == 1


def test_loading_a_version_1_index_takes_the_version_1_fingerprint_and_a_mismatch_names_it(tiny_model_dir, tmp_path):
    """`SentenceIndex.load(model_fingerprint=...)` compared strictly (a version-1 index refused its own model), and a
    mismatch on a version-1 index named the encoder's version-2 fingerprint, which can never equal it (found by the
    round-17 review)."""
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    fingerprint, legacy = encoder.fingerprints()
    _index(encoder, legacy, tmp_path).save(tmp_path / "idx")
    with pytest.warns(UserWarning, match="version-1 fingerprint"):
        SentenceIndex.load(tmp_path / "idx", model_fingerprint=fingerprint, legacy=legacy)
    with pytest.raises(ModelMismatchError, match=r"has fingerprint '1111111111111111 \(version 1; v2-0{16} now\)'"):
        SentenceIndex.load(tmp_path / "idx").check_model("v2-" + "0" * 16, "1" * 16)


def test_a_fast_encoder_whose_settings_change_has_one_fingerprint_however_it_was_loaded(tiny_model_dir, cache):
    """Built from the torch model, a fast encoder hashed its weights and new settings; loaded from its load record,
    the recorded fingerprint and the new settings: one encoder, two fingerprints once `max_length` changed."""
    first = load_encoder(tiny_model_dir, backend="onnx", max_length=96)
    again = load_encoder(tiny_model_dir, backend="onnx", max_length=96)
    assert first.model.exact is not None and again.model.exact is None
    assert first.fingerprints() == again.fingerprints()
    first.max_length = again.max_length = 64
    assert first.fingerprints() == again.fingerprints() and first.fingerprint() != load_encoder(
        tiny_model_dir, backend="onnx", max_length=96).fingerprint()
