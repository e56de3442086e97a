"""Round 43: the index configs (`aspire.index.config`) and `aspire index` (`aspire.index.__main__`): keys refused
when unknown or out of range, overrides typed, a saved config read back equal, user errors (status 2) before a model
loads, `add` refusing another encoding, `--help` without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aspire.config import ConfigError, load_config, save_config
from aspire.index.__main__ import main as index_main
from aspire.index.__main__ import refuse_recorded_encoding
from aspire.index.config import (
    IndexBuildConfig,
    SearchArgumentError,
    SearchConfig,
    check_selection,
    checked_search_config,
    exhaustion_reason,
    unused_settings,
)

REPO = Path(__file__).resolve().parents[1]


def write_corpus(path: Path, n: int, start: int = 0) -> Path:
    lines = [json.dumps({"paper_id": f"p{i}", "title": "a model of text",
                         "abstract": ["we propose a new method.", f"results {i} improve."]}) for i in range(start, n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the user error was reported")

    monkeypatch.setattr("aspire.index.__main__.load_encoder", refuse)


# ---- fixes -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override", ["encode={max_sentences: 5}", "encode={backend: onnx, quantize: int8}"])
def test_merge_refuses_recorded_encoding_keys_given_as_a_section_mapping(override):
    """`encode.max_sentences=5` was refused, but `encode={max_sentences: 5}` (the same override as a mapping) was
    taken and then silently replaced by the shards' record."""
    with pytest.raises(ValueError, match=r"encode\.(max_sentences|backend): a merge takes it"):
        refuse_recorded_encoding([override])
    refuse_recorded_encoding(["encode={batch_size: 8}", "index.kind=flat"])  # read by the merge: taken


def test_merge_cli_refuses_a_mapping_override_of_the_recorded_encoding(tmp_path, capsys):
    shards = tmp_path / "shards"
    shards.mkdir()
    status = index_main(["merge", "--shards", str(shards), "--out", str(tmp_path / "out"),
                         "encode={max_sentences: 5}", "--quiet"])
    assert status == 2
    assert "encode.max_sentences: a merge takes it" in capsys.readouterr().err


def test_exhaustion_reason_names_the_key_of_the_index_kind():
    """Was "raise index.ivf_nprobe or index.hnsw_ef_search" for either kind: a key the index does not read."""
    ivf, hnsw = exhaustion_reason("ivf", 14), exhaustion_reason("hnsw", 14)
    assert "the ivf index reached no more of its 14 paper(s)" in ivf
    assert "index.ivf_nprobe" in ivf and "hnsw_ef_search" not in ivf
    assert "index.hnsw_ef_search" in hnsw and "ivf_nprobe" not in hnsw
    assert exhaustion_reason("flat", 3) == "the index holds 3 paper(s) besides the excluded ones"


# ---- checks that hold (regression guards) ----------------------------------------------------------------------

@pytest.mark.parametrize("override, key", [("index.kindd=flat", "index.kindd"), ("encode.batchsize=4", "encode.batchsize"),
                                           ("search.topk=4", "search.topk"), ("serch.k=4", "serch")])
def test_unknown_keys_are_refused_listing_the_valid_ones(override, key):
    with pytest.raises(ConfigError) as err:
        load_config(IndexBuildConfig, None, [override])
    assert key in str(err.value) and "valid keys" in str(err.value)


@pytest.mark.parametrize("override, key", [
    ("index.hnsw_m=1", "index.hnsw_m"), ("index.pq_nbits=25", "index.pq_nbits"), ("index.seed=-1", "index.seed"),
    ("index.seed=2147483648", "index.seed"), ("encode.batch_size=0", "encode.batch_size"),
    ("encode.max_sentences=-1", "encode.max_sentences"), ("search.k=0", "search.k"),
    ("search.bm25_b=1.5", "search.bm25_b"), ("search.ot_eps=0", "search.ot_eps"), ("search.ot_tau=.nan", "search.ot_tau"),
    ("search.cross_weight=-0.1", "search.cross_weight"), ("index.kind=lsh", "index.kind"),
    ("search.rerank=bogus", "search.rerank"), ("index.vector_dtype=float64", "index.vector_dtype")])
def test_out_of_range_values_are_refused_naming_key_and_value(override, key):
    with pytest.raises(ConfigError) as err:
        load_config(IndexBuildConfig, None, [override])
    assert str(err.value).startswith(key) and override.split("=", 1)[1].lstrip(".") in str(err.value).lower()


def test_overrides_are_typed_and_a_saved_config_reads_back_equal(tmp_path):
    config = load_config(IndexBuildConfig, None, [
        "index.kind=hnsw", "index.store_bm25=false", "index.vector_dtype=float16", "encode.batch_size=64",
        "encode.backend=onnx", "encode.quantize=int8", "search.ot_eps=1e-3", "search.fuse=rrf:60",
        "search.cross_encoder=true", "search.sentence_k_factor=2"])
    assert config.index.kind == "hnsw" and config.index.store_bm25 is False
    assert config.encode.batch_size == 64 and type(config.encode.batch_size) is int
    assert config.search.ot_eps == 1e-3 and type(config.search.ot_eps) is float
    assert type(config.search.sentence_k_factor) is float and config.search.cross_encoder is True
    assert config.search.fuse == "rrf:60" and config.encode.encoder_options() == {"backend": "onnx", "quantize": "int8"}
    save_config(config, tmp_path / "config.yaml")
    assert load_config(IndexBuildConfig, tmp_path / "config.yaml") == config
    with pytest.raises(ConfigError, match="encode.batch_size: expected an integer"):
        load_config(IndexBuildConfig, None, ["encode.batch_size=2.5"])


def test_checked_search_config_refuses_bad_arguments_naming_them():
    base = SearchConfig()
    for changes, pattern in [({"k": 0}, "k: must be >= 1"), ({"k": 2.0}, "k: must be an integer"),
                             ({"exclude_query": "no"}, "exclude_query: must be True or False"),
                             ({"fuse": 0.5}, "fuse: must be a string"), ({"fuse": "zz:1"}, "fuse: "),
                             ({"stages": "dense"}, "stages: unknown stages"), ({"rerank": "x"}, "rerank: unknown"),
                             ({"topk": 3}, r"unknown search argument\(s\) \['topk'\]")]:
        with pytest.raises(SearchArgumentError, match=pattern):
            checked_search_config(base, **changes)
    assert checked_search_config(base, k=None, rerank="ot").rerank == "ot"
    assert unused_settings(SearchConfig(), ["ot_eps", "k", "fuse"])[0].startswith("ot_eps (read only by rerank ot")
    assert len(unused_settings(SearchConfig(), ["ot_eps", "k", "fuse"])) == 2
    assert check_selection([2, 0, 2], 3) == [0, 2]
    with pytest.raises(SearchArgumentError, match=r"positions \[3\] out of range 0..2 for p7"):
        check_selection([3], 3, "p7")


@pytest.mark.parametrize("argv, message", [
    (["index.kindd=flat"], "index.kindd"), (["index.hnsw_m=1"], "index.hnsw_m: must be >= 2, got 1"),
    (["--batch-size", "0"], "--batch-size"), (["encode.backend=onnx", "--backend", "torch"], "disagree"),
    (["encode.quantize=int8"], "encode.quantize: 'int8' does not go with encode.backend torch"),
    (["--backend", "torch", "--quantize", "int8"], "--quantize int8 goes with --backend onnx")])
def test_build_user_errors_exit_2_before_a_model_loads(tmp_path, tiny_model_dir, no_model_load, capsys, argv, message):
    corpus = write_corpus(tmp_path / "papers.jsonl", 3)
    try:
        status = index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus),
                             "--out", str(tmp_path / "out"), "--quiet", *argv])
    except SystemExit as exit_:  # argparse's own refusal
        status = exit_.code
    assert status == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_add_refuses_another_model_or_encoding_naming_both(tmp_path, tiny_model_dir, capsys):
    corpus = write_corpus(tmp_path / "papers.jsonl", 4)
    index = tmp_path / "index"
    assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(index),
                       "--backend", "torch", "index.kind=flat", "--quiet"]) == 0
    capsys.readouterr()
    more = write_corpus(tmp_path / "more.jsonl", 6, start=4)
    status = index_main(["add", "--index", str(index), "--corpus", str(more), "--quantize", "bf16", "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and "bf16" in err and str(tiny_model_dir.name) in err
    assert index_main(["add", "--index", str(index), "--corpus", str(more), "--quiet"]) == 0
    assert "6 papers" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["build", "add", "encode-shard", "merge", "info", None])
def test_help_loads_no_torch(command):
    argv = ["--help"] if command is None else [command, "--help"]
    code = (f"import sys\nfrom aspire.index.__main__ import main\ntry:\n    main({argv!r})\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\nprint(sorted(m for m in ('torch', 'transformers', 'faiss') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
