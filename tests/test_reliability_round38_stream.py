"""Round 38 sweep of `aspire.index.stream` (the streamed merge of shards): the rejected records' order as
`plan_shards` documents it, and the merge against an in-RAM build of the same papers, a missing shard and a failure
midway."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from aspire.index import SentenceIndex
from aspire.index.shards import load_shards
from aspire.index.stream import merge_streaming, plan_shards
from tests.test_index_stream import cfg, corpus, live


def _shards(root: Path, sizes=(20, 15, 25, 10), whole: bool = False, missing=(), rejected=None) -> Path:
    """Shards of one sharding; each shard after the first repeats the paper before it (a duplicate where that paper
    is in a shard present); `rejected[s]`: shard s's rejected records."""
    shards, start = root / "shards", 0
    for s, n in enumerate(sizes):
        part = corpus(n, start, seed=s)
        if s:
            part.paper_ids[0] = f"p{start - 1}"
        if whole:
            part.whole = np.random.default_rng(10 + s).standard_normal((n, 16)).astype(np.float32)
        part.rejected = list((rejected or {}).get(s, []))
        meta = {"shard": s, "num_shards": len(sizes), "model_name": "tiny", "model_fingerprint": "fp"}
        if s not in missing:
            part.save_shard(shards / f"shard-{s:05d}-of-{len(sizes):05d}", meta)
        start += n
    return shards


def test_plan_shards_returns_the_rejections_in_line_order_as_documented(tmp_path):
    # shard 0 holds the reader's rejections of every line (here line 90, in shard 1's slice); shard 1 its encoding's
    rejected = {0: [{"line": 90, "paper_id": "x90", "reason": "unreadable"}],
                1: [{"line": 60, "paper_id": "x60", "reason": "no abstract sentences"}]}
    shards = _shards(tmp_path, sizes=(20, 15), rejected=rejected)
    _, _, got = plan_shards(shards)
    assert [r["paper_id"] for r in got] == ["x60", "x90", "p19"]  # by line, then the duplicate (no line)
    assert [r["paper_id"] for r in load_shards(shards)[0].rejected] == ["x60", "x90", "p19"]
    doc = " ".join(plan_shards.__doc__.split())
    assert "in shard order" not in doc and "input-line order" in doc  # it said "the shards' own, in shard order"


@pytest.mark.parametrize("name,kw,index", [
    ("ivf-float16-missing", dict(missing=(1,), whole=True),
     dict(kind="ivf", ivf_nlist=4, ivf_nprobe=2, ivf_train_size=50, seed=2, vector_dtype="float16")),
    ("ivfpq-whole", dict(whole=True), dict(kind="ivf", ivf_nlist=4, ivf_nprobe=3, pq_m=4, pq_nbits=4, ivf_train_size=80)),
])
def test_streamed_merge_equals_the_in_ram_build_bit_for_bit_and_in_search(tmp_path, monkeypatch, caplog, name, kw, index):
    shards = _shards(tmp_path, **kw)
    config, allow = cfg(**index), bool(kw.get("missing"))
    whole, meta = load_shards(shards, allow_missing=allow)
    SentenceIndex.build(whole, config, meta["model_fingerprint"], meta["model_name"], meta.get("include_title")).save(tmp_path / "ram")
    monkeypatch.setattr("aspire.index.stream.ADD_BATCH", 7)
    with caplog.at_level(logging.WARNING, logger="aspire.index.stream"):
        gen = merge_streaming(shards, tmp_path / "streamed", config, allow_missing=allow)
    ram = live(tmp_path / "ram")
    assert sorted(p.name for p in gen.iterdir()) == sorted(p.name for p in ram.iterdir())
    for file in ram.iterdir():
        if file.name != "manifest.json":
            assert file.read_bytes() == (gen / file.name).read_bytes(), file.name
    a, b = SentenceIndex.load(tmp_path / "ram"), SentenceIndex.load(tmp_path / "streamed")
    assert a.paper_ids == b.paper_ids and len(set(b.paper_ids)) == len(b.paper_ids)
    # each id once: the repeated paper in a present shard is rejected, the first one kept
    expected, start = [], 0
    for shard, n in enumerate((20, 15, 25, 10)):
        ids = [f"p{start - 1}" if shard and i == 0 else f"p{start + i}" for i in range(n)]
        if shard not in kw.get("missing", ()):
            expected += [pid for pid in ids if pid not in expected]
        start += n
    assert b.paper_ids == expected
    q = np.random.default_rng(5).standard_normal((6, 16)).astype(np.float32)
    for x, y in zip(a.search_sentences(q, 8), b.search_sentences(q, 8)):
        assert np.array_equal(x, y)
    if allow:  # merged without shard 1, which is named
        assert "missing [1]" in caplog.text
        with pytest.raises(ValueError, match=r"shards \[1\] \(of 4\) are missing"):
            merge_streaming(shards, tmp_path / "refused", config)


def test_a_failure_before_publishing_leaves_the_old_index_live_and_no_generation_behind(tmp_path, monkeypatch):
    shards = _shards(tmp_path)
    out = tmp_path / "idx"
    old = merge_streaming(shards, out, cfg(kind="flat"))
    before = sorted(p.name for p in out.iterdir())

    def broken(*args, **kwargs):
        raise RuntimeError("disk pulled")

    monkeypatch.setattr("aspire.index.stream.write_manifest", broken)
    with pytest.raises(RuntimeError, match="disk pulled"):
        merge_streaming(shards, out, cfg(kind="ivf", ivf_nlist=4, ivf_nprobe=4))
    assert live(out) == old and sorted(p.name for p in out.iterdir()) == before
    assert SentenceIndex.load(out, verify=True).n_papers == 67
