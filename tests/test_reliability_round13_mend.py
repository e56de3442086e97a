"""Round 13, mends: an index records its encoder's `include_title` in its manifest, and its BM25 and the
cross-encoder's candidate texts read a paper's title by that one rule (`SentenceIndex.title_first`), where
BM25 once judged the whole index from its texts and the cross-encoder each paper by its first sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.papers import abstract_text
from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.build import add_to_index, build_index
from aspire.index.disk import IndexFormatError
from aspire.index.lexical import index_bm25
from aspire.index.shards import encode_shard
from aspire.index.stream import merge_streaming
from aspire.retrieval.crossencoder import candidate_text
from aspire.scoring.lexical import BM25Index

FLAT = IndexBuildConfig(index=IndexConfig(kind="flat"))
QUERIES = ("graph", "text similarity", "citation", "neural method")
# every titled paper's abstract opens with a sentence that is its title: a plain index's texts look like an
# `include_title` index's, which is what judging the index from its texts got wrong
PAPERS = {
    "a": ("graph neural network", ["graph neural network", "we propose a method.", "results show text."]),
    "b": ("text similarity", ["text similarity", "a graph method for text.", "graph data shows results."]),
    "c": ("", ["a paper without a title on citation graphs."]),
}


class StandIn:
    """A stand-in encoder: vectors a fixed random function of each sentence's text; with `include_title` the
    title is sentence 0 where it is not blank, as `ContextualSentenceEncoder` stores it."""

    def __init__(self, include_title: bool) -> None:
        self.include_title = include_title

    def fingerprint(self) -> str:
        return f"stand-in/{self.include_title}"

    def to(self, device):
        return self

    def encode(self, papers, batch_size=32, progress=False) -> DocBatch:
        texts = [([p.title] if self.include_title and p.title.strip() else []) + list(p.sentences) for p in papers]
        vectors = [torch.stack([torch.from_numpy(np.random.default_rng(sum(map(ord, s))).standard_normal(4)).float()
                                for s in sents]) for sents in texts]
        return DocBatch.from_list(vectors, [p.paper_id for p in papers], texts, torch.stack([v.mean(0) for v in vectors]))


def write_corpus(path: Path, papers: dict = PAPERS) -> Path:
    path.write_text("".join(json.dumps({"paper_id": pid, "title": title, "abstract": sents}) + "\n"
                            for pid, (title, sents) in papers.items()))
    return path


def reference(index: SentenceIndex, papers: dict = PAPERS) -> np.ndarray:
    """BM25 over each paper's title and abstract sentences, as the corpus gives them."""
    texts = [abstract_text(*papers[pid]) for pid in index.paper_ids]
    return BM25Index(texts, index.paper_ids).scores(QUERIES)


@pytest.mark.parametrize("include_title", [False, True])
def test_a_built_index_records_include_title_and_reads_each_title_once(tmp_path, include_title):
    index, gen = build_index(tmp_path / "idx", "m", write_corpus(tmp_path / "c.jsonl"), FLAT,
                             load_encoder=lambda name: StandIn(include_title), progress=False)
    assert json.loads((gen / "manifest.json").read_text())["include_title"] is include_title
    loaded = SentenceIndex.load(tmp_path / "idx")
    assert loaded.include_title is include_title
    # with include_title the stored sentences start with the title; without, the abstract's own title-like
    # sentence is kept: judged from the texts, that plain index had it dropped from its BM25
    assert loaded.sentences[0][0] == "graph neural network" and len(loaded.sentences[0]) == 3 + include_title
    np.testing.assert_allclose(loaded.bm25.scores(QUERIES), reference(loaded), rtol=1e-6)
    np.testing.assert_allclose(index_bm25(loaded).scores(QUERIES), reference(loaded), rtol=1e-6)
    for i, pid in enumerate(loaded.paper_ids):
        assert candidate_text(loaded, i) == abstract_text(*PAPERS[pid]), pid
        assert loaded.title_first(i) is (include_title and bool(PAPERS[pid][0])), pid


def test_an_index_without_the_record_reads_titles_by_one_guess_for_bm25_and_the_cross_encoder(tmp_path):
    # a plain index where two papers' abstracts open with their title and one's does not: the guess from the
    # texts says "not titled", and the cross-encoder's text, which judged each paper by its first sentence,
    # dropped the two papers' first sentences where BM25 kept them
    papers = {**PAPERS, "d": ("citation data", ["neural method of text similarity."])}
    _, gen = build_index(tmp_path / "idx", "m", write_corpus(tmp_path / "c.jsonl", papers), FLAT,
                         load_encoder=lambda name: StandIn(False), progress=False)
    manifest = json.loads((gen / "manifest.json").read_text())
    del manifest["include_title"]  # as an index saved before the manifest recorded it
    (gen / "manifest.json").write_text(json.dumps(manifest))
    old = SentenceIndex.load(tmp_path / "idx")
    assert old.include_title is None and not any(old.title_first(i) for i in range(old.n_papers))
    assert [candidate_text(old, i) for i in range(old.n_papers)] == [abstract_text(*papers[p]) for p in old.paper_ids]
    np.testing.assert_allclose(index_bm25(old).scores(QUERIES), reference(old, papers), rtol=1e-6)
    # grown with the same encoder (its fingerprint checked), the index learns the setting and records it
    more = write_corpus(tmp_path / "more.jsonl", {"e": ("more", ["another sentence."])})
    grown, _, added, _ = add_to_index(tmp_path / "idx", more, load_encoder=lambda name: StandIn(False), progress=False)
    assert added == 1 and grown.include_title is False and SentenceIndex.load(tmp_path / "idx").include_title is False
    gen = Path(SentenceIndex.read_manifest(tmp_path / "idx")["path"])
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["include_title"] = "yes"
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="include_title is 'yes'"):
        SentenceIndex.load(tmp_path / "idx")


def test_a_streamed_merge_records_the_shards_include_title(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl")
    for shard in range(2):
        encode_shard(StandIn(True), corpus, tmp_path / "shards", FLAT, shard, 2, model_name="m", progress=False)
    merge_streaming(tmp_path / "shards", tmp_path / "idx", FLAT)
    loaded = SentenceIndex.load(tmp_path / "idx")
    assert loaded.include_title is True
    np.testing.assert_allclose(loaded.bm25.scores(QUERIES), reference(loaded), rtol=1e-6)


def test_staged_experiment_names_keep_every_digit_of_a_weight_that_six_would_round():
    from aspire.evaluate.options import Stages

    # the names of existing runs are as they were; two weights that agree to six digits once shared one folder
    assert Stages(bm25=True, alpha=0.815).exp("m") == "m-bm25-a0.815"
    assert Stages(bm25=True, alpha=1.0).exp("m") == "m-bm25-a1"
    a, b = (Stages(bm25=True, alpha=x).exp("m") for x in (0.8150001, 0.8150002))
    assert a != b and a == "m-bm25-a0.8150001"


def test_probe_rows_keep_the_encoder_only_while_model_device_and_encoder_options_stay(monkeypatch, tmp_path):
    from aspire.evaluate import probes
    from aspire.evaluate.options import EvalOptions

    built, indexed = [], []

    class Features:
        def __init__(self, model, options, cache_dir, batch_size, device, encoder_options):
            built.append((model, device, encoder_options))

    monkeypatch.setattr(probes, "Features", Features)
    monkeypatch.setattr(probes, "acl_index", lambda data: indexed.append(data) or ({}, {}))
    monkeypatch.setattr(probes, "run_format", lambda *a, features, **k: {"encoder_fingerprint": id(features)})
    monkeypatch.setattr(probes, "_suite_rows", lambda bench, res: [])
    bench, settings = type("Bench", (), {"name": "venue"})(), {}
    fingerprints = [probes.probe_rows(bench, tmp_path, "m", None, tmp_path, settings,
                                      EvalOptions(encoder_options=options))[1]
                    for options in ({}, {}, {"max_length": 64}, {"max_length": 64})]
    # a second format with the same options reuses the encoder; other encoder options load it again
    assert built == [("m", None, {}), ("m", None, {"max_length": 64})]
    assert fingerprints[0] == fingerprints[1] != fingerprints[2] == fingerprints[3]
    assert len(indexed) == 1  # the ACL index is read once a suite run


def test_bench_caches_are_reused_only_when_made_the_same_way(tmp_path, capsys):
    from experiments.bench_ot_stage import bench_record, reuse_index
    from experiments.bench_sinkhorn import cached_pool

    made = []
    make = lambda: made.append(1) or torch.arange(4.0)  # noqa: E731
    path, minilm = tmp_path / "pool.pt", {"source": "minilm", "pool_model": "minilm", "n_papers": 400, "seed": 0}
    assert cached_pool(path, minilm, make).tolist() == [0, 1, 2, 3] and cached_pool(path, minilm, make) is not None
    assert len(made) == 1  # made once, then read
    torch.save(torch.zeros(4), path)  # an older cache that does not say what made it: made again, said
    cached_pool(path, minilm, make)
    assert len(made) == 2 and "unrecorded" in capsys.readouterr().out
    cached_pool(path, {**minilm, "pool_model": "mpnet"}, make)
    assert len(made) == 3 and "making it again" in capsys.readouterr().out

    index_dir, settings = tmp_path / "index", {"papers": 10, "seed": 0, "queries": [1, 2], "config": "c"}
    assert reuse_index(index_dir, settings) is False  # none built yet
    index_dir.mkdir()
    (index_dir / "CURRENT").write_text("gen-000001\n")
    with pytest.raises(SystemExit, match="records nothing"):
        reuse_index(index_dir, settings)
    bench_record(index_dir).write_text(json.dumps(settings))
    assert reuse_index(index_dir, settings) is True
    with pytest.raises(SystemExit, match="records other papers, seed"):
        reuse_index(index_dir, {**settings, "papers": 20, "seed": 1})


def test_self_training_acl_queries_leave_out_a_candidate_by_id_or_abstract_not_by_title_alone(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from aspire.data.acl import read_acl
    from aspire.data.papers import Paper
    from aspire.train.self_training import SelfTrainingConfig, add_acl_queries

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    read_acl.cache_clear()
    rows = [{"paper_id": "J05-1004", "title": "", "abstract": "A cited paper. Without a title."},
            {"paper_id": "Z9", "title": "A copy", "abstract": "Its abstract is a candidate's. Word for word."},
            {"paper_id": "K1", "title": "Kept paper", "abstract": "Nothing held out here. Two sentences."}]
    path = tmp_path / "acl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench = SimpleNamespace(queries={"q": "a citing sentence"}, candidates=[
        Paper("J05-1004", "", ["A cited paper.", "Without a title."]),
        Paper("c2", "Another title", ["Its abstract is a candidate's.", "Word for word."])])
    stats = add_acl_queries(bench, SelfTrainingConfig(acl_queries=5, acl_path=str(path), benchmarks_dir=None))
    assert sorted(bench.queries) == ["acl:K1", "q"]  # the two candidates came back as queries by title alone
    assert stats["removed_benchmark_by"] == {"title": 0, "paper_id": 1, "abstract": 1}
    assert stats["excluded_titles"]["candidates"] == 2


def test_an_ivf_index_grown_by_add_assigns_lists_as_a_build_does():
    import faiss

    from aspire.index import EncodedCorpus

    rng = np.random.default_rng(0)
    base = rng.standard_normal((400, 64)).astype(np.float32)

    def corpus_of(vectors, start):
        n = len(vectors)
        return EncodedCorpus(vectors, np.arange(n + 1, dtype=np.int64), [f"p{start + i}" for i in range(n)],
                             [f"t{start + i}" for i in range(n)], [[f"s{start + i}"] for i in range(n)])

    config = IndexBuildConfig(index=IndexConfig(kind="ivf", ivf_nlist=8, ivf_nprobe=8))
    index = SentenceIndex.build(corpus_of(base, 0), config, "fp")
    ivf = faiss.extract_index_ivf(index.faiss_index)
    centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist).astype(np.float64)
    # rows within rounding of the midpoint of two centroids: the exact nearest is one bit of arithmetic away
    mid = (centroids[0] + centroids[1]) / 2
    new = (mid + rng.standard_normal((600, 64)) * 1e-6).astype(np.float32)
    index.add(corpus_of(new, 400), "fp")
    exact = ((new.astype(np.float64)[:, None] - centroids[None]) ** 2).sum(-1)
    want = np.argmin(exact, axis=1)  # the lowest position on an exact tie, as the build's assignment takes
    invlists = ivf.invlists
    got = np.full(len(new), -1)
    for lst in range(ivf.nlist):
        ids = faiss.rev_swig_ptr(invlists.get_ids(lst), invlists.list_size(lst)).copy()
        got[ids[ids >= 400] - 400] = lst
    assert (got == want).all(), f"{int((got != want).sum())} of {len(new)} rows in another list than the nearest"


def test_suite_refuses_a_bad_aggregate_before_torch_loads(tmp_path, tiny_model_dir):
    from tests.test_light_commands import probe

    [(argv, status, heavy, err)] = probe([["evaluate", "suite", "--model", str(tiny_model_dir), "--scorer", "minl2",
                                           "--aggregate", "topk:0", "--out", str(tmp_path / "s")]])
    assert (status, heavy) == (2, []) and "unknown aggregate 'topk:0'" in err, err


def test_reviewers_refuse_weights_beside_one_scorer(tmp_path, capsys, tiny_model_dir):
    from aspire.cli import evaluate as evaluate_cli

    with pytest.raises(SystemExit) as exc:  # scaling one scorer's scores ranks every archive as before: unread
        evaluate_cli.main(["reviewers", "--model", str(tiny_model_dir), "--scorer", "minl2", "--weights", "2",
                           "--out", str(tmp_path / "r")])
    assert exc.value.code == 2 and "one scorer has nothing to weigh" in capsys.readouterr().err


def test_a_query_about_a_stored_label_gets_its_facets_code():
    from aspire.encoders.codes import query_code

    codes = ["[BACKGROUND]", "[METHOD]", "[RESULT]"]
    # CSFCube labels "objective" sentences background: such a selection got no code at all
    assert query_code(codes, "auto", "objective") == "[BACKGROUND]"
    assert query_code(codes, "auto", "method_label") == "[METHOD]" and query_code(codes, "auto", "result") == "[RESULT]"
    assert query_code(codes, "auto", "title") is None and query_code(["[TASK]"], "auto", "method") is None


def test_a_saved_model_with_scorer_settings_its_kind_never_read_still_loads(tmp_path, caplog):
    """Configs now refuse `ot_*` / `att_tau` for a kind that reads neither; a model trained before holds them in its
    document_model.json, where they never made a difference: it loads, the log names them, and a value no kind
    could take is still named as damage."""
    import logging

    from aspire.config import ConfigError
    from aspire.train.document_model import read_model_file

    file = tmp_path / "document_model.json"
    file.write_text(json.dumps({"model": {"kind": "ts", "ot_max_iter": 100, "att_tau": 1.0}, "tasks": ["cocite"]}))
    with caplog.at_level(logging.INFO, logger="aspire.train.document_model"):
        model, _, tasks = read_model_file(file)
    assert model.kind == "ts" and model.ot_max_iter == 1000 and tasks == ["cocite"]
    assert [r.getMessage() for r in caplog.records if "ot_max_iter=100" in r.getMessage()]
    file.write_text(json.dumps({"model": {"kind": "ts", "ot_eps": -1.0}}))
    with pytest.raises(ConfigError, match=r"in `model`: .*ot_eps"):
        read_model_file(file)


def test_the_overlap_folders_leave_out_the_overlapping_pairs_and_as_many_others(tmp_path):
    from experiments.context2doc_overlap_train import pair_of, write_without

    ex = tmp_path / "ex"
    ex.mkdir()
    train = [{"query_id": a, "positive_id": b} for a, b in (("p1", "p2"), ("p3", "p2"), ("p4", "p5"), ("p2", "p1"))]
    (ex / "examples.train.jsonl").write_text("".join(json.dumps(e) + "\n" for e in train))
    (ex / "examples.dev.jsonl").write_text(json.dumps({"query_id": "p1", "positive_id": "p2"}) + "\n")
    report = write_without(ex, tmp_path / "out", {("p1", "p2")})
    kept = [json.loads(line) for line in (tmp_path / "out" / "examples.train.jsonl").read_text().splitlines()]
    assert [pair_of(e) for e in kept] == [("p2", "p3"), ("p4", "p5")]  # both directions of (p1, p2) left out
    assert report["left_out"] == 2 and report["train_examples"] == 2
    assert (tmp_path / "out" / "examples.dev.jsonl").read_text() == (ex / "examples.dev.jsonl").read_text()
    with pytest.raises(FileExistsError):
        write_without(ex, tmp_path / "out", set())


def test_an_align_config_key_is_refused_before_torch_loads(tmp_path):
    from tests.test_light_commands import probe

    (tmp_path / "examples").mkdir()
    (tmp_path / "teacher").mkdir()
    (tmp_path / "teacher" / "modules.json").write_text("[]")  # a teacher folder as far as the path check reads it
    [(argv, status, heavy, err)] = probe([["data", "align", "--examples", str(tmp_path / "examples"), "--teacher",
                                           str(tmp_path / "teacher"), "--out", str(tmp_path / "out"), "chunk=0"]])
    assert (status, heavy) == (2, []) and "chunk" in err, err
