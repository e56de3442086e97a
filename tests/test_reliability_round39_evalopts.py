"""Correctness sweep, round 39: `aspire evaluate`'s option readers (`aspire.cli.evaluate_options`) and the vector
cache (`aspire.evaluate.cache`): options reach the runner as a parse by hand gives them, options no runner reads are
refused naming them, and the cache serves an entry only for the same papers, texts, options and fingerprint; a
damaged or truncated entry is rebuilt, a failed write leaves no entry."""

from __future__ import annotations

import argparse

import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.papers import Paper

PAPERS = [Paper("a", "t", ["x", "y"]), Paper("b", "u", ["z"])]


def _encode(ps):
    return DocBatch.from_list([torch.randn(len(p.sentences), 4) for p in ps], [p.paper_id for p in ps],
                              [p.sentences for p in ps], torch.randn(len(ps), 4))


def _parser():
    from aspire.cli.evaluate_options import code_arg, model_args

    p = argparse.ArgumentParser()
    model_args(p, None, out_required=False)
    code_arg(p)
    return p


def test_eval_options_reach_the_runner_as_parsed_by_hand():
    from aspire.cli.evaluate_options import eval_options

    p = _parser()
    args = p.parse_args(["--scorer", "ot", "--tau", "0.5", "--eps", "0.1", "--batch-size", "7", "--no-cache",
                         "--encoding", "independent", "--max-length", "9", "--normalize", "--code", "none"])
    o = eval_options(args)
    assert o.scorer_options == {"tau": 0.5, "eps": 0.1}
    assert o.encoding == "independent" and o.batch_size == 7 and o.cache_dir is None
    assert o.encode_options == {"max_length": 9, "normalize": True}
    assert o.encoder_options == {"code": None}


@pytest.mark.parametrize("argv, flag", [(["--scorer", "minl2", "--tau", "5"], "--tau"),
                                        (["--scorer", "abstract", "--eps", "1"], "--eps"),
                                        (["--scorer", "ot", "--window", "2"], "--window"),
                                        (["--scorer", "ot", "--max-length", "5"], "--max-length")])
def test_unread_options_refused_naming_them(argv, flag):
    from aspire.cli.evaluate_options import eval_options

    with pytest.raises(ValueError, match=flag.split("-")[-1]):
        eval_options(_parser().parse_args(argv))


def test_cache_one_character_of_one_text_is_a_miss_and_same_is_a_hit(tmp_path):
    from aspire.evaluate.cache import cached_encode

    b1, hit = cached_encode(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path)
    assert not hit
    b2, hit = cached_encode(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path)
    assert hit and torch.equal(b1.emb, b2.emb) and torch.equal(b1.whole, b2.whole)
    changed = [PAPERS[0], Paper("b", "u", ["Z"])]
    _, hit = cached_encode(_encode, changed, "v2-0", "contextual", {}, tmp_path)
    assert not hit


def test_cache_truncated_entry_is_rebuilt_not_read(tmp_path):
    from aspire.evaluate.cache import cache_path, cached_encode

    cached_encode(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path)
    path = cache_path(tmp_path, "v2-0", "contextual", {}, PAPERS)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _, hit = cached_encode(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path)
    assert not hit
    _, hit = cached_encode(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path)
    assert hit


def test_cache_failed_write_leaves_no_entry(tmp_path, monkeypatch):
    from aspire.evaluate import cache

    def boom(*a, **k):
        raise RuntimeError("write failed")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(RuntimeError):
        cache.cached_encode(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_cache_round_trip_keeps_mask_dtype_and_whole(tmp_path):
    from aspire.evaluate.cache import cached_encode

    def enc(ps):
        b = DocBatch.from_list([torch.randn(len(p.sentences), 4, dtype=torch.float16) for p in ps],
                               [p.paper_id for p in ps], [p.sentences for p in ps],
                               torch.randn(len(ps), 4, dtype=torch.float16))
        mask = b.mask.clone()
        mask[0, 1] = False  # a sentence with no word piece left (truncated): kept unselected
        return b.with_mask(mask)

    b1, _ = cached_encode(enc, PAPERS, "v2-0", "contextual", {}, tmp_path)
    b2, hit = cached_encode(enc, PAPERS, "v2-0", "contextual", {}, tmp_path)
    assert hit
    assert b2.emb.dtype == torch.float16 and torch.equal(b1.emb, b2.emb)
    assert torch.equal(b1.mask, b2.mask) and b2.mask.tolist() == [[True, False], [True, False]]
    assert b2.sentences == [["x", "y"], ["z"]] and b2.paper_ids == ["a", "b"]
    assert torch.equal(b1.whole, b2.whole)


def test_cache_entry_without_whole_rebuilt_when_whole_needed(tmp_path):
    from aspire.evaluate.cache import cached_encode_entry

    def nowhole(ps):
        return DocBatch.from_list([torch.randn(len(p.sentences), 4) for p in ps], [p.paper_id for p in ps],
                                  [p.sentences for p in ps])

    cached_encode_entry(nowhole, PAPERS, "v2-0", "contextual", {}, tmp_path)
    b, hit, path = cached_encode_entry(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path, needs_whole=True)
    assert not hit and b.whole is not None and path is not None
    b, hit, _ = cached_encode_entry(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path, needs_whole=True)
    assert hit and b.whole is not None


@pytest.mark.parametrize("key", [("v2-1", "contextual", {}), ("v2-0", "independent", {}),
                                 ("v2-0", "contextual", {"max_length": 5})])
def test_cache_other_fingerprint_mode_or_options_is_a_miss(tmp_path, key):
    from aspire.evaluate.cache import cached_encode

    cached_encode(_encode, PAPERS, "v2-0", "contextual", {}, tmp_path)
    _, hit = cached_encode(_encode, PAPERS, *key, tmp_path)
    assert not hit


def test_stage_and_fusion_options_as_parsed_by_hand(capsys):
    from aspire.cli.evaluate_options import add_stage_args, fusion_option, stage_options

    p = argparse.ArgumentParser()
    p.add_argument("--model")
    add_stage_args(p)
    s = stage_options(p, p.parse_args(["--model", "m", "--bm25-alpha", "0.3", "--k1", "2", "--b", "0.5"]))
    assert (s.bm25, s.alpha, s.k1, s.b, s.rerank) == (True, 0.3, 2.0, 0.5, None)
    s = stage_options(p, p.parse_args(["--rerank", "ce", "--rerank-top", "7", "--rerank-weight", "0.5",
                                       "--rerank-max-length", "64"]))
    assert (s.rerank.top_n, s.rerank.weight) == (7, 0.5) and not s.bm25
    for argv in (["--k1", "2"], ["--rerank-top", "7"], ["--bm25-alpha", "0.5"]):
        with pytest.raises(SystemExit):
            stage_options(p, p.parse_args(argv))
        assert argv[0] in capsys.readouterr().err
    assert fusion_option(None, None, p) == "z"
    with pytest.raises(SystemExit):
        fusion_option("z", "zmuv", p)


def test_facet_and_backend_options_reach_the_runner_as_parsed_by_hand():
    from aspire.cli.evaluate_options import eval_options, facet_args, model_args

    p = argparse.ArgumentParser()
    model_args(p, encodings=("contextual", "independent", "pass"), out_required=False)
    facet_args(p)
    o = eval_options(p.parse_args(["--scorer", "ot", "--cand-sentences", "facet", "--facet-code", "method",
                                   "--doc-code", "[X]", "--backend", "onnx", "--quantize", "int8"]))
    assert (o.cand_sentences, o.facet_code, o.query_text) == ("facet", "method", "abstract")
    assert o.encoder_options == {"backend": "onnx", "quantize": "int8", "code": "[X]"}
    o = eval_options(p.parse_args(["--scorer", "abstract", "--query-text", "title+facet", "--joiner", " ",
                                   "--max-length", "3"]))
    assert o.encode_options == {"max_length": 3, "joiner": " "} and o.query_text == "title+facet"
    with pytest.raises(ValueError, match="--quantize int8 goes with --backend onnx"):
        eval_options(p.parse_args(["--scorer", "ot", "--backend", "openvino", "--quantize", "int8"]))
    with pytest.raises(ValueError, match="normalize"):
        eval_options(p.parse_args(["--scorer", "abstract", "--encoding", "pass", "--normalize"]))
