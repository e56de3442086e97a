"""Round 29, the lead's mends of leftovers named in earlier rounds: `unseen_sentences` excused a sentence cut by
overflow="truncate" by (paper id, position), so of two papers sharing an id in one call, one's sentence without a
word piece was let through because the other's same-numbered sentence was truncated."""

from __future__ import annotations

import numpy as np
import pytest

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.pieces import unseen_sentences

LONG = Paper("x", "a neural model", [f"sentence {i} of a long abstract about models and data." for i in range(8)])
BLANK = Paper("x", "t", ["a model.", "\u200b", "data."])  # sentence 1 gets no word piece


def test_unseen_sentences_tell_two_papers_sharing_an_id_apart(tiny_model_dir):
    """Paper LONG (id x) has sentence 1 cut by the truncation; paper BLANK (id x too) has sentence 1 without a word
    piece. The old rule excused ("x", 1) for both: BLANK's blank sentence was let through, unseen [[], []]."""
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, max_length=24, overflow="truncate")
    assert 1 in encoder.tokenize([LONG]).truncation[0].cut  # the premise: LONG's sentence 1 is truncated
    assert encoder.unseen_sentences([LONG, BLANK]) == [[], [1]]
    assert encoder.unseen_sentences([BLANK, LONG]) == [[1], []]
    with pytest.raises(ValueError, match=r"paper x: sentence\(s\) \[1\] produced no word pieces"):
        encoder.encode([LONG, BLANK])


def test_unseen_sentences_by_rows_against_a_loop():
    """Random rows: a sentence counts as unseen when no kept row of its paper holds it and no row left out does."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        n_papers = int(rng.integers(1, 5))
        n_sent = rng.integers(1, 6, size=n_papers).tolist()
        row_paper = np.sort(rng.integers(0, n_papers, size=int(rng.integers(1, 9))))
        sent_index = np.array([rng.integers(-1, n_sent[b], size=5) for b in row_paper]).reshape(len(row_paper), 5)
        keep = rng.random(len(row_paper)) < 0.6
        got = unseen_sentences(n_sent, sent_index, row_paper, keep)
        for b in range(n_papers):
            want = [i for i in range(n_sent[b])
                    if not any(row_paper[r] == b and i in sent_index[r] for r in range(len(row_paper)))]
            assert got[b] == want


# ---- chunked scoring: an infinite budget -------------------------------------------------------------------------
class CountingScorer:
    """min-L2, counting its calls (one call a chunk)."""

    def __init__(self):
        from aspire.scoring import get_scorer

        self.inner, self.calls = get_scorer("minl2"), 0

    def score(self, q, c):
        self.calls += 1
        return self.inner.score(q, c)


@pytest.mark.parametrize("budget", [float("inf"), 1e18, 2**70])
def test_an_unbounded_budget_scores_in_one_chunk(budget):
    """budget_bytes=inf passed the check, but inf // 64 is NaN and max(1, NaN) is 1: a chunk of one cell, one
    scorer call per (query, candidate) pair (here 6 x 7 = 42 calls for one)."""
    import torch

    from aspire.batch import DocBatch
    from aspire.scoring.chunked import score_chunked

    gen = torch.Generator().manual_seed(0)
    q = DocBatch(torch.randn(6, 3, 8, generator=gen), torch.ones(6, 3, dtype=torch.bool))
    c = DocBatch(torch.randn(7, 4, 8, generator=gen), torch.ones(7, 4, dtype=torch.bool))
    scorer = CountingScorer()
    got = score_chunked(scorer, q, c, budget_bytes=budget)
    assert scorer.calls == 1
    torch.testing.assert_close(got, scorer.inner.score(q, c), rtol=0, atol=0)


# ---- BM25: Unicode forms and one-letter words ------------------------------------------------------------------
def test_bm25_matches_a_decomposed_query_to_a_composed_text_and_back():
    """A query "cafe" + combining acute (NFD) scored 0 against a text holding the composed "café" (NFC): bm25s
    splits the decomposed word at the combining mark, so neither side's word matched the other's."""
    import unicodedata

    from aspire.scoring.lexical import BM25Index

    composed, decomposed = "café", unicodedata.normalize("NFD", "café")
    assert composed != decomposed
    texts = [f"a {composed} near the station", "a bakery near the river", "tea and coffee shops"]
    index = BM25Index(texts, ["a", "b", "c"])
    scores = index.scores([composed, decomposed])
    assert scores[0, 0] > 0 and scores[0, 1:].tolist() == [0.0, 0.0]
    np.testing.assert_array_equal(scores[1], scores[0])
    back = BM25Index([t.replace(composed, decomposed) for t in texts], ["a", "b", "c"]).scores([composed])
    np.testing.assert_array_equal(back, scores[:1])


def test_bm25_does_not_index_one_letter_words_as_its_docstring_says():
    """The docstring said "lower-cased words"; bm25s' pattern keeps words of two or more characters."""
    from aspire.scoring import lexical

    assert "two or more characters" in lexical.__doc__
    index = lexical.BM25Index(["models written in R", "models written in Rust"], ["a", "b"], stopwords=None)
    assert index.scores(["R"]).tolist() == [[0.0, 0.0]]
    assert index.scores(["rust"])[0, 1] > 0


# ---- nearest negatives: k and skip -----------------------------------------------------------------------------
def test_nearest_negatives_with_k_zero_gives_none_and_drops_nothing():
    """k = 0 raised IndexError (`kept[-1]` of an empty list) for any non-empty paper list."""
    from aspire.data.negatives.rank import nearest_negatives

    vecs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    ids = [f"P{i}" for i in range(5)]
    mined = nearest_negatives(vecs, {"P0": {"P1"}, "P1": {"P0"}}, ids, 0)
    assert mined.negatives == {pid: [] for pid in ids} and mined.dropped == {"partner": 0}
    one = nearest_negatives(vecs, {"P0": {"P1"}, "P1": {"P0"}}, ids, 1)
    assert all(len(n) == 1 for n in one.negatives.values())


@pytest.mark.parametrize("k, skip", [(-1, 0), (1.5, 0), (True, 0), ("2", 0), (1, -1), (1, 0.5)])
def test_nearest_negatives_refuses_k_or_skip_that_is_no_count(k, skip):
    """k = -1 sliced `[: skip + k]` (all but the last candidate kept); skip = -1 kept one candidate too many."""
    from aspire.data.negatives.rank import nearest_negatives

    vecs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="k \\(negatives per paper\\)|skip \\(nearest survivors"):
        nearest_negatives(vecs, {}, [f"P{i}" for i in range(5)], k, skip)


# ---- Sinkhorn: weights all denormal, on the torch path ---------------------------------------------------------
def test_sinkhorn_on_the_torch_path_refuses_weights_that_are_all_denormal():
    """The compiled CPU path refuses them since round 29; the torch path (a tape, or another device) checked the raw
    mass (positive), then made every denormal padding: an all-zero plan, value 0, converged True, unsaid."""
    import torch

    from aspire.scoring.sinkhorn import sinkhorn

    cost = torch.rand(2, 2, 2, generator=torch.Generator().manual_seed(0)).requires_grad_()
    a = torch.tensor([[0.5, 0.5], [1e-39, 1e-39]])
    with pytest.raises(ValueError, match=r"among them \[1\]"):
        sinkhorn(cost, a, a.clone(), 0.1)
    ok = sinkhorn(cost[:1], a[:1], a[:1].clone(), 0.1)  # a normal problem still solves
    assert bool(ok.converged.all()) and float(ok.plan.detach().sum()) == pytest.approx(1.0, abs=1e-4)


# ---- scorers: an empty side with no sentence slots -------------------------------------------------------------
@pytest.mark.parametrize("name", ["minl2", "ot", "attention", "maxpassage"])
def test_an_empty_batch_without_sentence_slots_scores_to_an_empty_matrix(name):
    """A (0, 0, D) batch: min-L2, OT and max-passage raised IndexError (a reduction over no slot); attention gave
    (0, Bc). Every scorer now gives (0, Bc), (Bq, 0) and (0,), and still refuses another width."""
    import torch

    from aspire.batch import DocBatch
    from aspire.scoring import get_scorer

    none = DocBatch(torch.zeros(0, 0, 4), torch.zeros(0, 0, dtype=torch.bool))
    some = DocBatch(torch.randn(3, 2, 4), torch.ones(3, 2, dtype=torch.bool))
    scorer = get_scorer(name)
    assert scorer.score(none, some).shape == (0, 3) and scorer.score(some, none).shape == (3, 0)
    assert scorer.pairwise_score(none, none).shape == (0,)
    with pytest.raises(ValueError, match="4-d and candidate vectors 5-d"):
        scorer.score(none, DocBatch(torch.randn(3, 2, 5), torch.ones(3, 2, dtype=torch.bool)))


# ---- co-citation run-all: a rerun that stops leaves no earlier run's later stages ------------------------------
def test_a_rerun_of_run_all_that_stops_leaves_no_earlier_later_stage(tmp_path):
    """A first run wrote all five stage folders; a second into the same folder stopped at the filter (it left
    nothing). 3_group .. 5_examples still held the first run's output, which `align` took as its input and whose
    report chain led back to the new 1_ingest: examples of the first run's settings read as the second's."""
    from aspire.data import cocite
    from aspire.data.cocite import CociteConfig
    from tests.test_cocite import LONG_CONTEXT, _record, _write_jsonl

    records = _write_jsonl(tmp_path / "r.jsonl", [_record(LONG_CONTEXT + f" {i}.", f"p{i}", f"p{i + 1}") for i in range(30)])
    out = tmp_path / "run"
    cocite.run_all(records, out, held_out=())
    assert all((out / name / "report.json").is_file() for name in cocite.STAGE_DIRS)
    stopping = CociteConfig()
    stopping.filter.min_context_tokens = 10_000
    with pytest.raises(ValueError, match="2_filter"):
        cocite.run_all(records, out, stopping, held_out=())
    assert [name for name in cocite.STAGE_DIRS if (out / name).exists()] == ["1_ingest", "2_filter"]
    assert not (out / "pipeline_report.json").exists()
    cocite.run_all(records, out, held_out=())  # and a later run into it goes through
    assert all((out / name / "report.json").is_file() for name in cocite.STAGE_DIRS)


# ---- the encoder fingerprint: tokenizer call settings ----------------------------------------------------------
def test_a_tokenizer_that_truncates_or_pads_on_the_left_has_another_fingerprint(tiny_model_dir):
    """Two encoders of one model whose tokenizers differ only in truncation_side encode long papers differently
    (round 31 measured vectors 0.139 apart), but had one fingerprint: a vector cache or an index keyed by it could
    serve one's vectors for the other. Tokenizers with the usual settings keep their fingerprint."""
    from aspire.encoders import load_encoder
    from aspire.encoders.identity import encoding_identity

    plain_encoder = load_encoder(tiny_model_dir)
    assert b'"tokenizer"' not in encoding_identity(plain_encoder.model, plain_encoder.tokenizer)
    prints = {plain_encoder.fingerprint()}
    for name, value in (("truncation_side", "left"), ("padding_side", "left")):
        other = load_encoder(tiny_model_dir)
        setattr(other.tokenizer, name, value)
        prints.add(other.fingerprint())
    assert len(prints) == 3


# ---- the multi-task sampler: a start outside the epoch ---------------------------------------------------------
@pytest.mark.parametrize("mode", ["mixed", "alternating", "sequential"])
def test_the_mix_sampler_refuses_a_start_or_rank_outside_the_epoch(mode):
    """As round 31 found for the one-task sampler: a start at or past the epoch's micro-batches yielded nothing
    (len negative), and the trainer, which moves on to the next epoch at the end of a pass, looped forever."""
    from aspire.train.mixing import MixSampler

    kw = dict(sizes=[40, 30], offsets=[0, 40], mode=mode, ratios=[1.0, 1.0] if mode == "sequential" else [3, 1],
              batch_size=8, seed=1, epoch=0, stage_batches=(3, 2) if mode == "sequential" else ())
    whole = MixSampler(**kw)
    n = whole.num_batches
    assert list(MixSampler(**kw, start=n - 1)) == list(whole)[n - 1:]
    for start in (n, n + 5, -1):
        with pytest.raises(ValueError, match=f"micro-batch {start} to start from"):
            MixSampler(**kw, start=start)
    with pytest.raises(ValueError, match="rank 2 is not one of the 2"):
        MixSampler(**kw, rank=2, world_size=2)


# ---- a training run past a million steps -----------------------------------------------------------------------
def test_a_run_whose_checkpoint_is_past_a_million_steps_is_a_model(tmp_path):
    """checkpoint_name(1_000_000) is 'checkpoint-1000000'; the pointer check allowed exactly six digits, so such a
    run's folder was refused as a --model: "latest names 'checkpoint-1000000', which holds no model/config.json"
    (found by round 32's checkpoint helper)."""
    import json

    from aspire.paths import run_model
    from aspire.train.checkpoint import checkpoint_name

    for step in (7, 1_000_000):
        run = tmp_path / f"run{step}"
        model = run / checkpoint_name(step) / "model"
        model.mkdir(parents=True)
        (model / "config.json").write_text("{}")
        (run / "latest").write_text(json.dumps({"checkpoint": checkpoint_name(step), "step": step}))
        assert run_model(run) == model
    (tmp_path / "run7" / "latest").write_text(json.dumps({"checkpoint": "checkpoint-7"}))  # too few digits
    with pytest.raises(ValueError, match="names 'checkpoint-7'"):
        run_model(tmp_path / "run7")


# ---- papers files: a key twice in one record -------------------------------------------------------------------
def test_a_papers_record_with_a_key_twice_is_rejected_naming_the_key(tmp_path):
    """`read_papers` and `jsonl_objects` (the ACL reader) parsed with plain json.loads: a record giving its abstract
    twice kept the second unsaid (found by round 35's io helper, which fixed iter_jsonl)."""
    from aspire.data.papers import jsonl_objects, read_papers
    from aspire.io import DataError

    path = tmp_path / "papers.jsonl"
    path.write_text('{"paper_id": "a", "title": "t", "abstract": ["one."]}\n'
                    '{"paper_id": "b", "title": "t", "abstract": ["first."], "abstract": ["second."]}\n')
    read = read_papers(path, skip_bad=True)
    assert [p.paper_id for p in read.papers] == ["a"]
    assert len(read.rejected) == 1 and "the key 'abstract' twice" in str(read.rejected[0])
    with pytest.raises(DataError, match=r"papers.jsonl:2: the key 'abstract' twice"):
        list(jsonl_objects(path))
