"""Round 63: BM25 normalises texts and queries with NFKC, not NFC, so a ligature written by PDF extraction ("ﬁ" in
"ﬁelds", U+FB01) matches the plain letters "fi". A stored index records its normalisation in the manifest; one saved
before (no field) is NFC's and its queries are normalised as NFC, as they were; an unknown value is refused naming
the manifest."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_index_bm25 import FLAT, _query

from aspire.index import IndexFormatError, SentenceIndex
from aspire.index.corpus import EncodedCorpus
from aspire.scoring.lexical import BM25Index
from aspire.search import Searcher

LIGATURE = "several \ufb01elds of study"  # "several ﬁelds of study", as the cocite-acl query L2348 writes it


def _corpus() -> EncodedCorpus:
    sentences = [[LIGATURE], ["plain words only"], ["another topic entirely"]]
    offsets = np.arange(len(sentences) + 1, dtype=np.int64)
    vectors = np.random.default_rng(0).standard_normal((len(sentences), 16)).astype(np.float32)
    return EncodedCorpus(vectors, offsets, ["lig", "plain", "other"], ["", "", ""], sentences)


def _manifest(gen):
    return json.loads((gen / "manifest.json").read_text())


def _old_style_index(root):
    """An index as a save before NFKC wrote it: BM25 files over NFC texts, a manifest naming no normalisation."""
    index = SentenceIndex.build(_corpus(), FLAT, "fp", "m")
    index.bm25 = BM25Index([" ".join(s) for s in index.sentences], ["0", "1", "2"], normalization="nfc")
    gen = index.save(root)
    manifest = _manifest(gen)
    assert manifest["bm25"].pop("normalization") == "nfc"
    (gen / "manifest.json").write_text(json.dumps(manifest))
    return gen


def test_bm25_matches_a_ligature_to_its_plain_letters_both_ways():
    bm25 = BM25Index([LIGATURE, "plain words", "the fields of study"], ["lig", "plain", "fields"])
    scores = bm25.scores(["fields", "\ufb01elds"])
    assert scores[0, 0] > 0 and scores[1, 2] > 0  # a plain query finds the ligature, a ligature query the plain word
    np.testing.assert_array_equal(scores[0], scores[1])
    assert bm25.settings()["normalization"] == "nfkc"


def test_new_stored_index_records_nfkc_and_matches_fi_to_the_ligature(tmp_path):
    gen = SentenceIndex.build(_corpus(), FLAT, "fp", "m").save(tmp_path / "idx")
    assert _manifest(gen)["bm25"]["normalization"] == "nfkc"
    loaded = SentenceIndex.load(tmp_path / "idx", verify=True)
    assert loaded.bm25.normalization == "nfkc"
    hits = Searcher(loaded).search(_query("fields"), k=1, stages="bm25")
    assert hits[0].paper_id == "lig" and hits[0].score > 0


def test_old_style_manifest_is_nfc_and_still_matches_the_ligature_to_itself(tmp_path):
    _old_style_index(tmp_path / "idx")
    old = SentenceIndex.load(tmp_path / "idx", verify=True)
    assert old.bm25.normalization == "nfc"
    scores = old.bm25.scores(["\ufb01elds", "fields"])[:, 0]
    assert scores[0] > 0 == scores[1]  # an NFKC query ("fields") would miss the NFC-stored word "ﬁelds"
    hits = Searcher(old).search(_query("several \ufb01elds"), k=1, stages="bm25")
    assert hits[0].paper_id == "lig" and hits[0].score > 0
    gen = old.save(tmp_path / "idx")  # re-saved with the same k1, b: its NFC files kept, and said to be NFC's
    assert _manifest(gen)["bm25"]["normalization"] == "nfc"
    assert SentenceIndex.load(tmp_path / "idx").bm25.scores(["\ufb01elds"])[0, 0] == pytest.approx(scores[0])


@pytest.mark.parametrize("value", ["nfkd", "NFKC", ["nfc"], None])
def test_unknown_normalization_in_the_manifest_is_refused_naming_it(tmp_path, value):
    gen = SentenceIndex.build(_corpus(), FLAT, "fp", "m").save(tmp_path / "idx")
    manifest = _manifest(gen)
    manifest["bm25"]["normalization"] = value
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match=rf"{gen}/manifest\.json: unknown BM25 normalization .*valid: nfkc, nfc"):
        SentenceIndex.load(tmp_path / "idx")


def test_unknown_normalization_is_refused_when_built_or_loaded(tmp_path):
    with pytest.raises(ValueError, match="unknown BM25 normalization 'NFKC'; valid: nfkc, nfc"):
        BM25Index(["a text"], ["a"], normalization="NFKC")
    BM25Index(["a text"], ["a"]).save(tmp_path)
    with pytest.raises(ValueError, match=f"{tmp_path}: unknown BM25 normalization 'nfd'"):
        BM25Index.load(tmp_path, ["a"], normalization="nfd")
