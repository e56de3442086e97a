"""The one-pass whole-abstract vector and the hybrid scorer (issue: an aspect model with one encoder pass)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from aspire.batch import DocBatch
from aspire.data.papers import Paper
from aspire.encoders.contextual import ContextualSentenceEncoder
from aspire.evaluate.encode import encode_papers
from aspire.scoring import get_scorer
from aspire.scoring.scorers import HybridScorer, minl2_dist

PAPERS = [
    Paper("a", "Graph parsing", ["We parse graphs.", "A new parser is fast.", "It wins on three sets."]),
    Paper("b", "Neural translation", ["Translation is hard.", "We add attention."]),
    Paper("c", "Word vectors", ["Vectors of words.", "They help tagging.", "Results improve a lot.", "Code is out."]),
]


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    torch.manual_seed(0)
    return ContextualSentenceEncoder.from_pretrained(tiny_model_dir)


def test_pass_whole_vector_is_the_mean_of_every_attended_piece(encoder):
    """The pass's whole vector equals sentence-transformers mean pooling of the same `title [SEP] abstract` input."""
    batch = encoder.encode(PAPERS)
    separate = encoder.encode_abstract(PAPERS)  # the (title, abstract) pair, mean over the attention mask
    assert batch.whole is not None and batch.whole.shape == (3, encoder.dim)
    torch.testing.assert_close(batch.whole, separate, atol=1e-5, rtol=1e-4)


def test_pass_whole_vector_spans_every_window(tiny_model_dir):
    """A paper longer than one window: the whole vector pools the pieces of all its windows (not the first only)."""
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=16)
    long = Paper("long", "T", [f"Sentence number {i} says something new." for i in range(8)])
    inputs = enc.tokenize([long])
    assert len(inputs.input_ids) > 1  # several windows
    with torch.no_grad():
        hidden = enc.model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                           **({} if inputs.token_type_ids is None else {"token_type_ids": inputs.token_type_ids})
                           ).last_hidden_state
        expected = hidden[inputs.attention_mask.bool()].mean(0)
        got = enc.forward(inputs).whole[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_whole_vector_travels_with_the_batch_and_through_the_cache(encoder, tmp_path):
    batch, from_cache = encode_papers(encoder, PAPERS, "contextual", tmp_path)
    assert not from_cache
    again, from_cache = encode_papers(encoder, PAPERS, "contextual", tmp_path)
    assert from_cache
    torch.testing.assert_close(again.whole, batch.whole)
    picked = batch.index([2, 0])
    torch.testing.assert_close(picked.whole, batch.whole[[2, 0]])
    assert DocBatch.concat([batch.index([0]), batch.index([1])]).whole.shape == (2, encoder.dim)
    assert batch.select_sentences([[0], [1], [2]]).whole is batch.whole  # a selection never narrows `whole`
    single, from_cache = encode_papers(encoder, PAPERS, "pass", tmp_path)  # the same cache entry: no second pass
    assert from_cache and single.emb.shape == (3, 1, encoder.dim)
    torch.testing.assert_close(single.emb[:, 0], batch.whole)


def test_cache_entry_without_whole_vectors_is_encoded_again(encoder, tmp_path, caplog):
    from aspire.evaluate import cache

    old = DocBatch(torch.zeros(3, 4, encoder.dim), torch.ones(3, 4, dtype=torch.bool), [p.paper_id for p in PAPERS],
                   [p.sentences for p in PAPERS])
    path = cache.cache_path(tmp_path, encoder.fingerprint(), "contextual", {}, PAPERS)
    cache._save(path, old)
    batch, from_cache = encode_papers(encoder, PAPERS, "contextual", tmp_path)
    assert not from_cache and batch.whole is not None
    assert "holds no whole-abstract vectors" in caplog.text


def test_docbatch_refuses_a_whole_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"whole must be \(B, D\)"):
        DocBatch(torch.zeros(2, 3, 4), torch.ones(2, 3, dtype=torch.bool), whole=torch.zeros(2, 5))


def _toy(seed: int, b: int = 3, s: int = 4, d: int = 8) -> DocBatch:
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(b, s, d, generator=g)
    mask = torch.ones(b, s, dtype=torch.bool)
    mask[0, 3] = False
    return DocBatch(emb, mask, [f"p{seed}{i}" for i in range(b)], [["x"] * s] * b, torch.randn(b, d, generator=g))


def test_hybrid_terms_are_the_named_similarities():
    q, c = _toy(1), _toy(2)
    terms = HybridScorer().term_scores(q, c)
    whole = F.normalize(q.whole, dim=-1) @ F.normalize(c.whole, dim=-1).T
    pooled = (q.emb * q.mask[..., None]).sum(1) / q.mask.sum(1, keepdim=True)
    torch.testing.assert_close(terms["whole"], whole)
    torch.testing.assert_close(terms["facet"], F.normalize(pooled, dim=-1) @ F.normalize(c.whole, dim=-1).T)
    torch.testing.assert_close(terms["minl2"], -minl2_dist(q.emb, q.mask, c.emb, c.mask))
    torch.testing.assert_close(terms["ot"], get_scorer("ot").score(q, c))


def test_hybrid_score_is_the_weighted_standardised_sum_and_pairwise_agrees():
    q, c = _toy(3), _toy(4)
    calibration = {"whole": (0.1, 0.5), "facet": (0.0, 2.0), "ot": (-3.0, 0.25)}
    scorer = HybridScorer({"whole": 1.0, "facet": 0.5, "ot": 2.0}, calibration)
    terms = scorer.term_scores(q, c)
    expected = ((terms["whole"] - 0.1) / 0.5 + 0.5 * terms["facet"] / 2.0 + 2.0 * (terms["ot"] + 3.0) / 0.25)
    torch.testing.assert_close(scorer.score(q, c), expected)
    torch.testing.assert_close(scorer.pairwise_score(q, c), expected.diagonal(), atol=1e-4, rtol=1e-4)
    details = scorer.dist_details(q, c)
    torch.testing.assert_close(sum(details.shares.values()), expected)  # each term's share adds up to the score


def test_aspect_selection_moves_the_facet_term_but_not_the_whole_term():
    q, c = _toy(5), _toy(6)
    narrowed = q.select_sentences([[0], [1], [2]])
    scorer = HybridScorer()
    before, after = scorer.term_scores(q, c), scorer.term_scores(narrowed, c)
    torch.testing.assert_close(after["whole"], before["whole"])
    assert not torch.allclose(after["facet"], before["facet"])


def test_hybrid_refuses_bad_settings_and_missing_whole_vectors():
    with pytest.raises(ValueError, match="unknown hybrid terms"):
        HybridScorer({"wholee": 1.0})
    with pytest.raises(ValueError, match="non-zero weight"):
        HybridScorer({"whole": 0.0})
    with pytest.raises(ValueError, match="sigma must be > 0"):
        HybridScorer(calibration={"whole": (0.0, 0.0)})
    plain = DocBatch(torch.randn(2, 3, 8), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="whole-abstract vectors"):
        HybridScorer().score(plain, plain)


def test_calibration_is_mean_and_std_of_each_term():
    scores = {"whole": torch.tensor([[0.0, 1.0], [2.0, 3.0]])}
    mean, std = HybridScorer.calibrate(scores)["whole"]
    assert mean == pytest.approx(1.5) and std == pytest.approx(torch.tensor([0.0, 1, 2, 3]).std().item())


# ---- kind hybrid: the two terms trained from one pass ---------------------------------------------------
def test_hybrid_kind_trains_both_terms_and_its_facet_term_counts_only_aligned_anchors(tiny_model_dir, tmp_path):
    from aspire.train.data import TripletCollator, load_split
    from aspire.train.trainer import build_model
    from tests.test_train import tiny_config, write_examples_dir

    examples = write_examples_dir(tmp_path / "examples")
    cfg = tiny_config(tiny_model_dir, examples, tmp_path, "model.kind=hybrid", "loss.kind=mnrl")
    model = build_model(cfg)
    data = load_split(cfg.data, "train")
    batch = TripletCollator(model.tokenize, data.papers)([data[i] for i in range(8)])
    out = model(batch)
    assert set(out) >= {"loss/whole", "loss/facet"} and torch.isfinite(out["loss"]) and out["loss"] > 0
    out["loss"].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.encoder.parameters())
    # the facet term: the anchor's aligned sentence alone against the positive's whole vector
    docs = model.embed(batch.inputs)
    anchors, positives = docs.index(torch.arange(8)), docs.index(torch.arange(8, 16))
    a_idx, _, ok = model._aligned_positions(batch, anchors, positives)
    assert bool(ok.any())
    i = int(ok.nonzero()[0])
    expected = F.cosine_similarity(anchors.emb[i, a_idx[i]], positives.whole[i], dim=0)
    facet_only = anchors.with_mask(F.one_hot(a_idx, anchors.mask.shape[1]).bool() & anchors.mask)
    from aspire.train.terms import PassCosine

    torch.testing.assert_close(PassCosine("facet").sim(facet_only, positives)[i, i], expected, atol=1e-5, rtol=1e-4)
    unaligned = batch.align.clone()
    unaligned[:] = -1  # no alignment known: the facet term has no anchor to count
    none = type(batch)(batch.inputs, batch.group_ids, batch.pos_ids, unaligned, batch.hard_rows, batch.task)
    assert model(none)["loss/facet"] == 0
    model.save_pretrained(tmp_path / "saved")
    loaded = type(model).from_pretrained(tmp_path / "saved")
    assert loaded.inference_name == "hybrid"
    enc = loaded.encode([data.papers[p] for p in sorted(data.papers)[:4]])
    assert enc.whole is not None and loaded.score(enc, enc).shape == (4, 4)


def test_hybrid_ts_kind_adds_the_aligned_pair_at_its_own_scale(tiny_model_dir, tmp_path):
    """Kind `hybrid+ts`: the hybrid's two cosine terms plus `ts`'s aligned sentence pair under `mnrl`, the latter at
    `loss.term_scale.aligned`, so the min-L2 term of the hybrid score is trained too."""
    from aspire.config import ConfigError
    from aspire.losses.ranking import MultipleNegativesRankingLoss
    from aspire.losses.triplet import aligned_sentence_dist, in_batch_negative_mask
    from aspire.train.data import TripletCollator, load_split
    from aspire.train.trainer import build_model
    from tests.test_train import tiny_config, write_examples_dir

    examples = write_examples_dir(tmp_path / "examples")
    cfg = tiny_config(tiny_model_dir, examples, tmp_path, "model.kind=hybrid+ts", "loss.kind=mnrl",
                      "loss.term_scale={aligned: 4}")
    assert cfg.loss.term_scale == {"aligned": 4.0}
    model = build_model(cfg)
    data = load_split(cfg.data, "train")
    batch = TripletCollator(model.tokenize, data.papers)([data[i] for i in range(8)])
    out = model(batch)
    assert set(out) >= {"loss/whole", "loss/facet", "loss/aligned"} and out["loss/aligned"] > 0
    out["loss"].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.encoder.parameters())
    # the aligned term's loss is mnrl over minus the min-L2 matrix, its diagonal the aligned pair, at scale 4
    with torch.no_grad():
        model.eval()
        docs = model.embed(batch.inputs)
        anchors, positives = docs.index(torch.arange(8)), docs.index(torch.arange(8, 16))
        a_idx, p_idx, ok = model._aligned_positions(batch, anchors, positives)
        sim = -minl2_dist(anchors.emb, anchors.mask, positives.emb, positives.mask)
        sim = torch.where(torch.eye(8, dtype=torch.bool), aligned_sentence_dist(anchors, positives, a_idx, p_idx).neg()[:, None], sim)
        mask = in_batch_negative_mask(batch.group_ids, batch.pos_ids) & ok[:, None]
        expected, valid = MultipleNegativesRankingLoss(scale=4.0)(sim, mask)
        per_anchor, counted = model._term_loss("aligned", batch, docs, anchors, positives,
                                               in_batch_negative_mask(batch.group_ids, batch.pos_ids))
    assert bool(counted.any())
    torch.testing.assert_close(per_anchor[counted], expected[valid & ok], atol=1e-4, rtol=1e-4)
    sharper, _ = MultipleNegativesRankingLoss(scale=20.0)(sim, mask)
    assert not torch.allclose(sharper[valid & ok], expected[valid & ok])  # the scale took effect
    model.save_pretrained(tmp_path / "saved")
    assert type(model).from_pretrained(tmp_path / "saved").inference_name == "hybrid"
    with pytest.raises(ValueError, match=r"names \['ot'\], not terms of kind 'hybrid\+ts'"):
        build_model(tiny_config(tiny_model_dir, examples, tmp_path, "model.kind=hybrid+ts", "loss.kind=mnrl",
                                "loss.term_scale={ot: 4}"))
    with pytest.raises(ConfigError, match="does not read term_scale"):
        tiny_config(tiny_model_dir, examples, tmp_path, "model.kind=hybrid+ts", "loss.term_scale={aligned: 4}")
    with pytest.raises(ConfigError, match="term_scale: each scale must be > 0"):
        tiny_config(tiny_model_dir, examples, tmp_path, "loss.kind=mnrl", "loss.term_scale={aligned: 0}")
    with pytest.raises(ConfigError, match="loss.term_scale: expected a mapping"):
        tiny_config(tiny_model_dir, examples, tmp_path, "loss.kind=mnrl", "loss.term_scale=4")


# ---- shipping a model as its adapters over a named base ---------------------------------------------------
def trained_adapter(tiny_model_dir, trained: Path) -> ContextualSentenceEncoder:
    """The tiny model with a LoRA adapter that looks trained (non-zero B matrices), saved at `trained`."""
    from aspire.encoders.adapters import attach_adapters

    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    torch.manual_seed(1)
    encoder.model = attach_adapters(encoder.model, "lora", ["default"], r=4, alpha=8.0)
    with torch.no_grad():
        for name, p in encoder.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    encoder.save_pretrained(trained)
    return encoder


def adapted_tiny_model(tiny_model_dir, root: Path) -> Path:
    """A trained-looking adapter over the tiny model, exported adapter-only as `aspire-minilm` is shipped."""
    from aspire.train.export import export_adapter

    trained_adapter(tiny_model_dir, root / "trained")
    return export_adapter(root / "trained", root / "shipped", str(tiny_model_dir))[0]


def test_adapter_export_loads_by_its_base_and_refuses_another_base(tiny_model_dir, tmp_path):
    from aspire.encoders import load_encoder
    from aspire.train.export import export_adapter

    encoder = trained_adapter(tiny_model_dir, tmp_path / "trained")
    out, fingerprint = export_adapter(tmp_path / "trained", tmp_path / "shipped", str(tiny_model_dir))
    assert not (out / "model.safetensors").exists() and (out / "adapter").is_dir()
    shipped = load_encoder(out)
    assert fingerprint == shipped.fingerprint() == ContextualSentenceEncoder.from_pretrained(tmp_path / "trained").fingerprint()
    torch.testing.assert_close(shipped.encode(PAPERS).whole, encoder.encode(PAPERS).whole, atol=1e-5, rtol=1e-4)
    assert shipped.fingerprint() != ContextualSentenceEncoder.from_pretrained(tiny_model_dir).fingerprint()
    other = tmp_path / "other_base"  # the same architecture with other weights: not the base it was trained on
    import shutil

    from transformers import AutoModel

    shutil.copytree(tiny_model_dir, other)
    changed = AutoModel.from_pretrained(other)
    with torch.no_grad():
        changed.embeddings.word_embeddings.weight.add_(0.01)
    changed.save_pretrained(other)
    with pytest.raises(ValueError, match="is not the base"):
        export_adapter(tmp_path / "trained", tmp_path / "wrong", str(other))
    assert not (tmp_path / "wrong").exists()
    with pytest.raises(ValueError, match="is not the base"):  # a refused export over a good one leaves it as it was
        export_adapter(tmp_path / "trained", out, str(other))
    assert load_encoder(out).fingerprint() == fingerprint
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging left behind


# ---- the index stores whole vectors; search re-ranks with the hybrid ------------------------------------
def _whole_corpus():
    import numpy as np

    from aspire.index import EncodedCorpus

    vectors = np.array([[1, 0, 0, 0], [0, 0, 3, 0], [0, 0, 0, 3], [0, 1.2, 0, 0], [0, 0, 5, 5]], dtype=np.float32)
    offsets = np.array([0, 2, 4, 5], dtype=np.int64)
    whole = np.array([[0, 0, 1, 0], [1, 0.1, 0, 0], [0, 0, 0, 1]], dtype=np.float32)  # B's whole vector is the query's
    return EncodedCorpus(vectors, offsets, ["A", "B", "C"], ["ta", "tb", "tc"], [["a0", "a1"], ["b0", "b1"], ["c0"]],
                         whole=whole)


def test_index_keeps_whole_vectors_through_save_load_add_and_shards(tmp_path):
    import numpy as np

    from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
    from aspire.index.stream import merge_streaming

    corpus = _whole_corpus()
    index = SentenceIndex.build(corpus.subset([0, 1]), IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")
    index.add(corpus.subset([2]), "fp")
    np.testing.assert_array_equal(index.whole, corpus.whole)
    index.save(tmp_path / "idx")
    loaded = SentenceIndex.load(tmp_path / "idx", verify=True)
    np.testing.assert_array_equal(np.asarray(loaded.whole), corpus.whole)
    torch.testing.assert_close(loaded.gather([2, 0]).whole, torch.from_numpy(corpus.whole[[2, 0]]))
    for i, part in enumerate((corpus.subset([0, 1]), corpus.subset([2]))):  # two shards, merged streaming
        part.save_shard(tmp_path / "shards" / f"shard-{i:05d}-of-00002", {"model_fingerprint": "fp", "model_name": "m",
                                                                          "shard": i, "num_shards": 2})
    assert EncodedCorpus.load_shard(tmp_path / "shards" / "shard-00000-of-00002")[0].whole.shape == (2, 4)
    merge_streaming(tmp_path / "shards", tmp_path / "merged", IndexBuildConfig(index=IndexConfig(kind="flat")))
    np.testing.assert_array_equal(np.asarray(SentenceIndex.load(tmp_path / "merged").whole), corpus.whole)
    old = EncodedCorpus(corpus.vectors, corpus.offsets, corpus.paper_ids, corpus.titles, corpus.sentences)
    assert SentenceIndex.build(old, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp").whole is None
    with pytest.raises(ValueError, match="whole vectors"):
        EncodedCorpus(corpus.vectors, corpus.offsets, corpus.paper_ids, corpus.titles, corpus.sentences,
                      whole=corpus.whole[:2])


def test_hybrid_rerank_ranks_by_both_cosines_and_shows_each_terms_share():
    import numpy as np

    from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
    from aspire.search import Searcher

    corpus = _whole_corpus()
    searcher = Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))
    query = DocBatch.from_list([torch.tensor([[1.0, 0, 0, 0], [0, 0, 3, 0]])], ["q"], [["q0", "q1"]],
                               torch.tensor([[1.0, 0.1, 0, 0]]))
    single = searcher.search(query, k=3, rerank="none")
    assert single[0].paper_id == "A"  # A holds both query sentences exactly
    hybrid = searcher.search(query, k=3, rerank="hybrid", shortlist=3)
    assert hybrid[0].paper_id == "B"  # B's whole vector is the query's
    for hit in hybrid:
        shares = {k: v for k, v in hit.stages.items() if k.startswith("hybrid/")}
        assert set(shares) == {"hybrid/whole", "hybrid/facet"}
        assert sum(shares.values()) == pytest.approx(hit.stages["hybrid"], abs=1e-5) == pytest.approx(hit.score, abs=1e-5)
    # aspect selection moves the facet term: q1 alone is A's second sentence direction, and A's whole vector
    only_q1 = {h.paper_id: h for h in searcher.search(query.select_sentences([[1]]), k=3, rerank="hybrid", shortlist=3)}
    both = {h.paper_id: h for h in hybrid}
    assert only_q1["A"].stages["hybrid/facet"] == pytest.approx(1.0, abs=1e-5)
    assert both["A"].stages["hybrid/facet"] < 0.99
    assert only_q1["A"].stages["hybrid/whole"] == pytest.approx(both["A"].stages["hybrid/whole"], abs=1e-6)
    old = EncodedCorpus(corpus.vectors, corpus.offsets, corpus.paper_ids, corpus.titles, corpus.sentences)
    without = Searcher(SentenceIndex.build(old, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))
    with pytest.raises(ValueError, match="rebuild it"):
        without.search(query, k=1, rerank="hybrid", shortlist=3)
    assert np.isfinite([h.score for h in hybrid]).all()


def test_whole_vector_first_stage_is_exact_cosine_and_leaves_the_query_out():
    import numpy as np

    from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex
    from aspire.search import Searcher

    corpus = _whole_corpus()
    searcher = Searcher(SentenceIndex.build(corpus, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp"))
    query = DocBatch.from_list([torch.tensor([[1.0, 0, 0, 0]])], ["A"], [["q0"]], torch.tensor([[0.0, 0, 2, 0.1]]))
    hits = searcher.search(query, k=3, stages="whole", exclude=[])
    w = corpus.whole / np.linalg.norm(corpus.whole, axis=1, keepdims=True)
    expected = w @ (np.array([0, 0, 2, 0.1]) / np.linalg.norm([0, 0, 2, 0.1]))
    assert [h.paper_id for h in hits] == [corpus.paper_ids[i] for i in np.argsort(-expected)]
    np.testing.assert_allclose([h.stages["whole"] for h in hits], np.sort(expected)[::-1], rtol=1e-5)
    assert "A" not in [h.paper_id for h in searcher.search(query, k=3, stages="whole")]  # the query's own id
    reranked = searcher.search(query, k=2, stages="whole", rerank="hybrid", shortlist=3, exclude=[])
    assert len(reranked) == 2 and "hybrid/facet" in reranked[0].stages
    old = EncodedCorpus(corpus.vectors, corpus.offsets, corpus.paper_ids, corpus.titles, corpus.sentences)
    with pytest.raises(ValueError, match="rebuild it"):
        Searcher(SentenceIndex.build(old, IndexBuildConfig(index=IndexConfig(kind="flat")), "fp")).search(
            query, k=1, stages="whole")
