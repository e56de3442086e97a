"""Round 52, the sentence store: `SentenceIndex.load` of an index whose config.yaml failed its schema (a value of the
wrong type, an unknown key or section, a value out of range or not among the valid ones, a section that is no
mapping) raised the schema's ConfigError naming the key but not the file, and not the documented IndexFormatError;
now every such error is an IndexFormatError naming `.../config.yaml` and the key (a YAML syntax error, which named
the file already, names it once)."""

from __future__ import annotations

import re

import pytest

from aspire.index import SentenceIndex
from aspire.index.disk import IndexFormatError
from tests.test_reliability_round18_store import resum, saved

DAMAGE = {  # name: (edit of the saved config.yaml's text, what the error must say besides the file)
    "wrong type": (lambda t: t.replace("hnsw_m: 32", "hnsw_m: lots"), "index.hnsw_m: expected int, got 'lots'"),
    "unknown key": (lambda t: t.replace("hnsw_m: 32", "hnsw_m: 32\n  bogus: 1"), "['index.bogus']"),
    "unknown section": (lambda t: t + "extra:\n  a: 1\n", "['extra']"),
    "out of range": (lambda t: t.replace("hnsw_m: 32", "hnsw_m: 1"), "index.hnsw_m: must be >= 2, got 1"),
    "not a valid kind": (lambda t: t.replace("kind: flat", "kind: tree"), "index.kind: 'tree' is not one of"),
    "section not a mapping": (lambda t: re.sub(r"encode:\n(  .*\n)+", "encode: [1]\n", t),
                              "encode: expected a mapping for EncodeConfig"),
    "wrong boolean": (lambda t: t.replace("store_bm25: true", "store_bm25: maybe"),
                      "index.store_bm25: expected true/false, got 'maybe'"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_load_names_config_yaml_and_the_key_when_the_config_fails_its_schema(tmp_path, damage):
    _, root, gen = saved(tmp_path)
    edit, said = DAMAGE[damage]
    path = gen / "config.yaml"
    text = path.read_text()
    assert edit(text) != text
    path.write_text(edit(text))
    resum(gen, "config.yaml")  # past the checksum: only the schema can refuse it
    with pytest.raises(IndexFormatError) as caught:
        SentenceIndex.load(root)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and said in message, message


def test_load_names_config_yaml_once_for_a_yaml_syntax_error(tmp_path):
    _, root, gen = saved(tmp_path)
    path = gen / "config.yaml"
    path.write_text(path.read_text() + "  : : [\n")
    resum(gen, "config.yaml")
    with pytest.raises(IndexFormatError) as caught:
        SentenceIndex.load(root)
    assert str(caught.value).count(str(path)) == 1 and str(caught.value).startswith(f"{path}:"), str(caught.value)


def test_an_undamaged_index_still_loads_with_its_config(tmp_path):
    built, root, _ = saved(tmp_path)
    loaded = SentenceIndex.load(root)
    assert loaded.config == built.config and loaded.paper_ids == built.paper_ids
