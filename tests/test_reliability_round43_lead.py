"""Round 43, the lead's mends: what the round's helpers found outside their files."""

import logging
from dataclasses import replace

from aspire.index.config import IndexBuildConfig
from aspire.index.stream import encoded_config

META = {"backend": "onnx", "quantize": "int8", "encode": {"max_sentences": 1000, "max_sentence_chars": 20000,
                                                          "max_line_bytes": 1 << 20}}


def test_merge_warns_of_a_config_encoding_value_the_shards_record_replaces(caplog):
    given = IndexBuildConfig()
    given = replace(given, encode=replace(given.encode, max_sentences=5, backend="openvino"))
    with caplog.at_level(logging.WARNING, logger="aspire.index.stream"):
        merged = encoded_config(given, META)
    assert (merged.encode.max_sentences, merged.encode.backend, merged.encode.quantize) == (1000, "onnx", "int8")
    said = [r.getMessage() for r in caplog.records]
    assert "encode.max_sentences: the config gives 5, the shards were encoded with 1000; the index records 1000" in said
    assert "encode.backend: the config gives 'openvino', the shards were encoded with 'onnx'; the index records 'onnx'" in said
    assert len(said) == 2  # quantize and the other limits were left at their defaults: nothing to say of them


def test_merge_says_nothing_of_defaults_or_of_values_equal_to_the_record(caplog):
    given = IndexBuildConfig()
    with caplog.at_level(logging.WARNING, logger="aspire.index.stream"):
        encoded_config(given, META)
        encoded_config(replace(given, encode=replace(given.encode, backend="onnx", quantize="int8")), META)
    assert caplog.records == []


def test_svd_and_kmeans_refuse_a_negative_seed():
    import numpy as np
    import pytest
    import scipy.sparse as sp

    from aspire.data.negatives.graph import svd_vectors
    from aspire.data.negatives.sampled import kmeans_clusters

    with pytest.raises(ValueError, match="seed must be a whole number >= 0, got -1"):
        svd_vectors(sp.csr_matrix(np.eye(4, dtype=np.float32)), 2, -1)  # was taken as 2**32 - 1
    with pytest.raises(ValueError, match="seed must be a whole number >= 0, got -1"):
        kmeans_clusters(np.eye(4, dtype=np.float32), 2, -1)


def test_read_groups_says_the_files_are_there_but_empty(tmp_path):
    import pytest

    from aspire.data.negatives.graph import read_groups

    (tmp_path / "groups.train.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no groups.train.jsonl or groups.dev.jsonl holds a co-cited set "
                                         r"\(groups.train.jsonl: empty\)"):
        read_groups(tmp_path)


def test_a_selection_of_numpy_integers_is_taken_as_plain_positions():
    import numpy as np
    import pytest

    from aspire.index.config import SearchArgumentError, check_selection

    chosen = check_selection(list(np.flatnonzero([True, False, True])) + [0], 3)  # refused once: "must be integers"
    assert chosen == [0, 2] and all(type(j) is int for j in chosen)
    with pytest.raises(SearchArgumentError, match="positions must be integers"):
        check_selection([np.bool_(True)], 3)
