"""Round 8, items an earlier sweep saw and left: the ACL reader's in-memory cache and a file rewritten in place."""

import json
import os

from aspire.data.acl import read_acl


def _write(path, rows, mtime_ns=None):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def test_acl_reader_reads_a_file_rewritten_in_place_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acl.jsonl"
    _write(path, [{"paper_id": "P0", "title": "T 0", "abstract": "One here. Two there."}], mtime_ns=10**18)
    assert [p.paper_id for p in read_acl(path, frozenset(), 0)[0]] == ["P0"]
    _write(path, [{"paper_id": f"P{i}", "title": f"T {i}", "abstract": "One here. Two there."} for i in range(3)],
           mtime_ns=2 * 10**18)
    papers, stats = read_acl(path, frozenset(), 0)  # was the first file's one paper, from memory
    assert [p.paper_id for p in papers] == ["P0", "P1", "P2"] and stats["read"] == 3


def test_acl_reader_gives_each_caller_its_own_list_and_stats(tmp_path, monkeypatch):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acl.jsonl"
    _write(path, [{"paper_id": f"P{i}", "title": f"T {i}", "abstract": "One here. Two there."} for i in range(3)]
           + [{"paper_id": "bad", "title": "T", "abstract": 5}])
    papers, stats = read_acl(path, frozenset(), 0)
    papers.reverse()
    stats["rejected"].clear()
    stats["used"] = 0
    again, stats2 = read_acl(path, frozenset(), 0)
    assert [p.paper_id for p in again] == ["P0", "P1", "P2"]
    assert stats2["used"] == 3 and len(stats2["rejected"]) == 1


def test_bootstrap_draws_only_units_that_count_in_the_figure():
    import numpy as np

    from aspire.benchmarks.stats import UnitScores, paired_test

    rng = np.random.default_rng(3)
    num, den = rng.random((2, 12)), np.ones((2, 12))
    alone = UnitScores([f"r{i:02d}" for i in range(12)], num, den)
    # eight more reviewers that no prediction names: nothing in any draw
    padded = UnitScores([f"r{i:02d}" for i in range(20)], np.hstack([num, np.zeros((2, 8))]),
                        np.hstack([den, np.zeros((2, 8))]))
    assert padded.value() == alone.value()
    assert padded.bootstrap(500, seed=1) == alone.bootstrap(500, seed=1)  # was wider: resamples of fewer real units
    other = UnitScores(padded.units, padded.num * 0.9, padded.den)
    assert paired_test(padded, other, n_perm=200, n_boot=300)["ci95"] == paired_test(
        alone, UnitScores(alone.units, alone.num * 0.9, alone.den), n_perm=200, n_boot=300)["ci95"]


def test_two_fold_refuses_candidates_scored_on_different_judged_sets(caplog):
    import pytest

    from aspire.benchmarks.csfcube import GROUPS
    from aspire.evaluate.two_fold import select_two_fold

    def run(value, judged=None):
        halves = {h: {"MAP": value, "NDCG%20": value} for h in ("fold1_test", "fold2_test", "fold1_dev", "fold2_dev")}
        return {"folds": {g: halves for g in GROUPS}, **({"judged_set": judged} if judged else {})}

    assert select_two_fold({"a": run(40, "aaa"), "b": run(41, "aaa")})["chosen"] == {"fold1": "b", "fold2": "b"}
    with pytest.raises(ValueError, match="a and b were scored on different queries.*aaa and bbb"):
        select_two_fold({"a": run(40, "aaa"), "b": run(41, "bbb")})  # chose b, on queries a never saw
    with caplog.at_level("WARNING"):
        select_two_fold({"a": run(40, "aaa"), "old": run(41)})
    assert "1 candidate(s) record no judged set" in caplog.text and "old" in caplog.text


def test_csfcube_results_record_the_judged_set_they_were_scored_on(shared_data):
    from aspire.benchmarks.csfcube import evaluate_csfcube_rankings, load_csfcube
    from aspire.benchmarks.pools import PoolSet

    root = shared_data / "csfcube"
    pool_set = load_csfcube(root)
    print_ = pool_set.fingerprint()
    rankings = {facet: {q: list(pool) for q, pool in pools.items()} for facet, pools in pool_set.pools.items()}
    assert evaluate_csfcube_rankings(root, rankings)[0]["judged_set"] == print_ and len(print_) == 12
    facet = pool_set.facets[0]
    query, pool = next(iter(pool_set.pools[facet].items()))
    regraded = {**pool_set.pools, facet: {**pool_set.pools[facet], query: {c: 3 - g for c, g in pool.items()}}}
    assert PoolSet(pool_set.name, regraded, pool_set.splits).fingerprint() != print_
    moved = {**pool_set.splits, "all/fold1_test": pool_set.splits["all/fold1_test"][1:]}
    assert PoolSet(pool_set.name, pool_set.pools, moved).fingerprint() != print_


def _query_adapted_model(tiny_model_dir, out):
    import torch

    from aspire.encoders import ContextualSentenceEncoder

    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_adapters("lora", ["query"], scope="query", r=4, alpha=8.0)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in encoder.model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    encoder.save_pretrained(out)
    return out


def test_search_encodes_queries_with_a_query_adapter_when_asked(tiny_model_dir, tmp_path, capsys):
    from test_search_cli import build_labelled_index

    from aspire.cli.search import main as search_main

    model = _query_adapted_model(tiny_model_dir, tmp_path / "qmodel")
    index = build_labelled_index(tmp_path, model)
    paper = {"paper_id": "new", "title": "a model of text", "abstract": ["we propose a new method.", "the data is new."]}
    (tmp_path / "q.jsonl").write_text(json.dumps(paper) + "\n")

    def hits(*extra):
        capsys.readouterr()
        assert search_main(["--index", str(index), "--k", "8", "--json", "--quiet", *extra]) == 0
        return [(h["paper_id"], round(h["score"], 6)) for h in json.loads(capsys.readouterr().out)["hits"]]

    plain = hits("--query-file", str(tmp_path / "q.jsonl"))
    side = hits("--query-file", str(tmp_path / "q.jsonl"), "--query-side")
    assert side != plain  # the adapter was on for the query (it was never switched on in search)
    # an indexed paper by id: re-encoded from its stored text with the adapter on, not its stored (paper-side) vectors
    assert hits("--query-id", "p3") != hits("--query-id", "p3", "--query-side")
    (tmp_path / "plain").mkdir()
    assert search_main(["--index", str(build_labelled_index(tmp_path / "plain", tiny_model_dir)), "--query-id", "p3",
                        "--query-side", "--quiet"]) == 2
    assert "has no query adapter" in capsys.readouterr().err


def test_search_of_several_sentences_ranks_a_flat_index_as_the_exhaustive_single_match():
    """Query sentence 2 is crowded by paper B's 150 sentences; paper A lies 0.5 from it, C0.. lie near sentence 1.
    The lookups (30 neighbours each) held B's sentences for sentence 2 and C's for sentence 1, and A came back with
    no distance at all, though it ranks second."""
    import numpy as np
    import torch

    from aspire.batch import DocBatch
    from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SearchConfig, SentenceIndex
    from aspire.search import Searcher

    rng = np.random.default_rng(0)
    e = np.eye(8, dtype=np.float32)
    q1, q2 = e[0] * 3, e[1] * 3
    vectors = [q2 + 0.01 * rng.standard_normal(8).astype(np.float32) for _ in range(150)]  # B
    vectors.append(q2 + 0.5 * e[2])  # A
    vectors += [q1 + (1.0 + 0.05 * i) * e[3] for i in range(40)]  # C0..C39, one sentence each
    counts = [150, 1] + [1] * 40
    ids = ["B", "A"] + [f"C{i}" for i in range(40)]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    corpus = EncodedCorpus(np.array(vectors, dtype=np.float32), offsets, ids, ids, [[f"{p} s{j}" for j in range(c)]
                                                                                for p, c in zip(ids, counts)])
    index = SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")
    searcher = Searcher(index, SearchConfig(k=5, sentence_k_min=30, sentence_k_factor=1.0))
    query = DocBatch.from_list([torch.tensor(np.stack([q1, q2]))], ["query"], [["s1", "s2"]])
    hits = searcher.search(query)
    top, scores = searcher.exhaustive(query, "minl2", k=5)
    assert [h.paper_id for h in hits] == [index.paper_ids[p] for p in top] == ["B", "A", "C0", "C1", "C2"]
    assert np.allclose([h.score for h in hits], scores, atol=1e-3)  # the scan expands norms in float32


def test_float16_ot_gradients_stay_finite_at_a_small_temperature():
    """At tau 1e-6 the weights' softmax scales the cost's gradient by 1 / tau; a float16 cost in the graph overflowed
    it to inf, and the cost's backward made every vector's gradient NaN, though the true gradient is small (the
    float32 and bfloat16 runs agree on it)."""
    import torch

    from aspire.batch import DocBatch
    from aspire.scoring import get_scorer

    vals = [torch.tensor([[0.0], [30.0], [30.0]]), torch.tensor([[0.0], [30.0]])]
    grads = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        batch = DocBatch.from_list([v.to(dtype) for v in vals], paper_ids=["a", "b"])
        batch.emb.requires_grad_()
        details = get_scorer("ot", tau=1e-6, eps=0.05, max_iter=3000).dist_details(batch, batch)
        assert details.dist.dtype == details.cost.dtype == dtype
        (grads[dtype],) = torch.autograd.grad(details.dist.float().sum(), batch.emb)
    assert torch.isfinite(grads[torch.float16]).all()  # was NaN in five of six entries
    assert torch.allclose(grads[torch.float16].float(), grads[torch.float32], atol=2e-3)
