"""Round 12 correctness sweep of the contextual sentence encoder's core and `DocBatch`: sentence and whole-abstract
vectors against means of the Hugging Face model's own hidden states computed by hand (float64, one pass and
continuation windows, blank titles, control codes), truncation records by hand, sentence-transformers' pooling of
the same model folder, independence of batch size, order and memory budget; the encoder's mode and autograd state
after encoding; DocBatch's views against the papers they came from on random batches."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.codes import add_control_codes
from aspire.encoders.contextual import paper_sentences, title_is_sentence
from tests.conftest import TINY_WORDS

SPECIALS = 3  # [CLS] title [SEP] abstract [SEP]


def random_papers(seed: int, n: int = 10, longest: int = 12) -> list[Paper]:
    """Random papers of the tiny vocabulary; every fourth has a blank title (no sentence with include_title)."""
    rng = random.Random(seed)

    def sentence(k: int) -> str:
        return " ".join(rng.choice(TINY_WORDS) for _ in range(k)) + "."

    return [Paper(f"p{i}", "  " if i % 4 == 3 else sentence(rng.randint(1, 6)),
                  [sentence(rng.randint(1, longest)) for _ in range(rng.randint(1, 7))]) for i in range(n)]


@pytest.fixture(scope="module")
def tiny64(tiny_model_dir):
    """The tiny BERT in float64 and its tokenizer."""
    from transformers import BertModel, BertTokenizerFast

    return BertModel.from_pretrained(tiny_model_dir).double().eval(), BertTokenizerFast.from_pretrained(tiny_model_dir)


def by_hand(model, tok, paper: Paper, include_title: bool, max_length: int, code: str | None = None,
            first_only: bool = False):
    """(S, D) sentence vectors, (S,) which sentences got a piece, (D,) whole vector and the (cut, partial) record
    (None: one window) of `paper`, built here window by window from the model's hidden states: a window is
    `[CLS] [code] title [SEP] piece run [SEP]`, a sentence's vector the mean of its pieces in all windows (in the
    first alone with `first_only`)."""
    shift = int(title_is_sentence(paper, include_title))
    extra = [] if code is None else [tok.convert_tokens_to_ids(code)]
    title = tok(paper.title, add_special_tokens=False)["input_ids"][: min(64, max_length - len(extra) - SPECIALS - 1)]
    pieces, owner = [], []
    for j, s in enumerate(paper.sentences):
        ids = tok(s, add_special_tokens=False)["input_ids"]
        pieces += ids
        owner += [j + shift] * len(ids)
    room = max_length - len(extra) - SPECIALS - len(title)
    windows = [range(lo, min(lo + room, len(pieces))) for lo in range(0, len(pieces), room)]
    S = len(paper_sentences(paper, include_title))
    sums, counts = torch.zeros(S, model.config.hidden_size, dtype=torch.float64), torch.zeros(S)
    whole, n_whole = 0.0, 0
    for w in windows[:1] if first_only else windows:
        ids = [tok.cls_token_id, *extra, *title, tok.sep_token_id, *(pieces[i] for i in w), tok.sep_token_id]
        assert len(ids) <= max_length
        sent = [-1] * (1 + len(extra)) + [0 if shift else -1] * len(title) + [-1] + [owner[i] for i in w] + [-1]
        types = [0] * (len(extra) + len(title) + 2) + [1] * (len(w) + 1)
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])).last_hidden_state[0]
        for t, k in enumerate(sent):
            if k >= 0:
                sums[k] += hidden[t]
                counts[k] += 1
        whole, n_whole = whole + hidden.sum(0), n_whole + len(ids)
    first = {owner[i] for i in windows[0]}
    later = {owner[i] for w in windows[1:] for i in w}
    record = None if len(windows) == 1 else (sorted(later - first), sorted(later & first))
    return sums / counts.clamp_min(1)[:, None], counts > 0, whole / n_whole, record


# ---- sentence and whole vectors against the model's hidden states ------------------------------------------------
@pytest.mark.parametrize("include_title", [False, True])
@pytest.mark.parametrize("max_length", [0, 18])
def test_sentence_and_whole_vectors_are_means_of_the_models_hidden_states(tiny64, include_title, max_length):
    model, tok = tiny64
    papers = random_papers(0)
    enc = ContextualSentenceEncoder(model, tok, include_title=include_title, max_length=max_length)
    inputs = enc.tokenize(papers)
    assert inputs.titled == [title_is_sentence(p, include_title) for p in papers]
    with torch.no_grad():
        out = enc.forward(inputs)
    records = {r.paper_id: (r.cut, r.partial) for r in inputs.truncation}
    for b, p in enumerate(papers):
        emb, seen, whole, record = by_hand(model, tok, p, include_title, enc.max_length)
        n = len(emb)
        assert seen.all() and out.mask[b].tolist() == [True] * n + [False] * (out.mask.shape[1] - n)
        assert torch.allclose(out.emb[b, :n], emb, atol=1e-12), p.paper_id
        assert torch.allclose(out.whole[b], whole, atol=1e-12), p.paper_id
        assert records.get(p.paper_id) == record, p.paper_id
    if max_length:  # the windows were used: most papers overflow, some with a sentence split by the first window
        assert len(records) >= 5 and any(partial for _, partial in records.values())


def test_truncate_keeps_the_first_windows_pieces_and_says_what_it_cut(tiny64):
    model, tok = tiny64
    papers = random_papers(1)
    enc = ContextualSentenceEncoder(model, tok, include_title=True, max_length=18, overflow="truncate")
    out = enc.encode(papers, batch_size=3)
    records = {r.paper_id: r for r in enc.truncation_report(papers)}
    for b, p in enumerate(papers):
        emb, seen, whole, record = by_hand(model, tok, p, True, 18, first_only=True)
        n = len(emb)
        assert out.mask[b].tolist() == seen.tolist() + [False] * (out.mask.shape[1] - n)
        assert torch.allclose(out.emb[b, :n].double(), emb, atol=1e-6)  # a split sentence: its first window's pieces
        assert torch.allclose(out.whole[b].double(), whole, atol=1e-6)
        assert not out.emb[b, :n][~seen].any()
        if record is None:
            assert p.paper_id not in records and seen.all()
        else:
            assert (records[p.paper_id].cut, records[p.paper_id].partial) == record
            assert records[p.paper_id].handled_by == "truncate" and seen.tolist() == [i not in record[0] for i in range(n)]
    assert sum(1 for r in records.values() if r.cut) >= 3


def test_windows_with_per_paper_control_codes_match_the_hand_built_windows(tiny64):
    model, tok = copy.deepcopy(tiny64[0]), copy.deepcopy(tiny64[1])
    add_control_codes(model, tok, ["[METHOD]", "[DOC]"])
    model = model.double()
    papers = random_papers(2)
    codes = ["[METHOD]" if i % 2 else "[DOC]" for i in range(len(papers))]
    for include_title in (False, True):
        enc = ContextualSentenceEncoder(model, tok, include_title=include_title, max_length=20,
                                        codes=["[METHOD]", "[DOC]"], code="[DOC]")
        inputs = enc.tokenize(papers, codes=codes)
        assert inputs.input_ids.shape[1] <= 20  # the code fits in the window
        with torch.no_grad():
            out = enc.forward(inputs)
        for b, p in enumerate(papers):
            emb, _, whole, _ = by_hand(model, tok, p, include_title, 20, code=codes[b])
            assert torch.allclose(out.emb[b, : len(emb)], emb, atol=1e-12), p.paper_id
            assert torch.allclose(out.whole[b], whole, atol=1e-12), p.paper_id


def test_whole_vector_is_sentence_transformers_mean_pooling_of_the_same_text(tiny_model_dir):
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    transformer = Transformer(str(tiny_model_dir))
    reference = st.SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "mean")],
                                       device="cpu")
    papers = random_papers(3)
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, segment_ids=False)  # one segment, as ST has it
    out = enc.encode(papers, batch_size=4)
    expected = reference.encode([f"{p.title} [SEP] {' '.join(p.sentences)}" for p in papers], convert_to_tensor=True)
    assert torch.allclose(out.whole, expected.cpu(), atol=1e-5)
    independent = enc.encode_independent(papers)
    expected = reference.encode([s for p in papers for s in paper_sentences(p, False)], convert_to_tensor=True)
    assert torch.allclose(independent.emb[independent.mask], expected.cpu(), atol=1e-5)


# ---- batching -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overflow", ["window", "truncate"])
def test_encode_is_independent_of_batch_size_order_and_memory_budget(tiny64, overflow):
    model, tok = tiny64
    papers = random_papers(4, n=12)
    enc = ContextualSentenceEncoder(model, tok, include_title=True, max_length=20, overflow=overflow)
    base = enc.encode(papers)
    rng = random.Random(0)
    for batch_size, budget in [(1, 1 << 20), (3, 1 << 20), (32, 60), (2, 1), (5, 200)]:
        order = list(range(len(papers)))
        rng.shuffle(order)
        out = enc.encode([papers[i] for i in order], batch_size=batch_size, max_batch_chars=budget)
        out = out.index(np.argsort(order).tolist())
        assert out.paper_ids == base.paper_ids and out.sentences == base.sentences
        assert torch.equal(out.mask, base.mask)
        assert torch.allclose(out.emb, base.emb, atol=1e-6) and torch.allclose(out.whole, base.whole, atol=1e-6)


# ---- mode and autograd state after encoding ------------------------------------------------------------------------
def test_a_refused_paper_leaves_a_training_encoder_in_training_mode(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, include_title=True)
    bad = [Paper("ok", "model", ["the data."]), Paper("bad", "   ", ["the model.", "\ufffd\x00"])]
    enc.train()
    with pytest.raises(ValueError, match="paper bad: sentence"):
        enc.encode(bad)
    assert enc.training and enc.model.training  # was left in eval mode: dropout off for the rest of training
    broken = copy.deepcopy(enc)
    with torch.no_grad():
        broken.model.embeddings.word_embeddings.weight.fill_(float("nan"))
    broken.train()
    with pytest.raises(ValueError, match="non-finite"):
        broken.encode_abstract(bad[:1])
    assert broken.training and broken.model.training


def test_encode_independent_keeps_no_autograd_graph(tiny_model_dir):
    enc = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    out = enc.encode_independent(random_papers(5), batch_size=4)
    # was: emb required grad, its graph holding every batch's activations (memory grew with the corpus)
    assert not out.emb.requires_grad and out.emb.grad_fn is None


# ---- DocBatch views on random batches -------------------------------------------------------------------------------
def random_batch(rng: random.Random, B: int, whole: bool):
    vectors = [torch.randn(rng.randint(1, 5), 4, dtype=torch.float64) for _ in range(B)]
    ids = [f"b{rng.random():.8f}" for _ in range(B)]
    sents = [[f"{ids[i]}/{j}" for j in range(len(v))] for i, v in enumerate(vectors)]
    w = torch.randn(B, 4, dtype=torch.float64) if whole else None
    return DocBatch.from_list(vectors, ids, sents, w), vectors, w


def assert_batch(batch: DocBatch, vectors, ids, sents, whole, masks) -> None:
    assert batch.paper_ids == ids and batch.sentences == sents
    S = batch.emb.shape[1]
    for i, v in enumerate(vectors):
        assert torch.equal(batch.emb[i, : len(v)], v) and not batch.emb[i, len(v):].any()
        assert batch.mask[i].tolist() == masks[i] + [False] * (S - len(v))
    assert (batch.whole is None) if whole is None else torch.equal(batch.whole, whole)


def test_docbatch_views_keep_ids_sentences_vectors_whole_and_masks_aligned():
    rng = random.Random(7)
    for _ in range(150):
        B = rng.randint(1, 6)
        batch, vectors, whole = random_batch(rng, B, rng.random() < 0.7)
        ids, sents = list(batch.paper_ids), [list(s) for s in batch.sentences]
        chosen = [sorted(rng.sample(range(len(v)), rng.randint(1, len(v)))) for v in vectors]
        picked = batch.select_sentences(chosen)
        masks = [[j in c for j in range(len(v))] for c, v in zip(chosen, vectors)]
        assert_batch(picked, vectors, ids, sents, whole, masks)
        narrower = [[rng.choice(c)] for c in chosen]
        assert_batch(picked.select_sentences(narrower), vectors, ids, sents, whole,
                     [[j in c for j in range(len(v))] for c, v in zip(narrower, vectors)])
        rows = [rng.randrange(-B, B) for _ in range(rng.randint(1, 7))]
        for form in (rows, torch.tensor(rows), np.array(rows)):
            assert_batch(picked.index(form), [vectors[r] for r in rows], [ids[r] for r in rows],
                         [sents[r] for r in rows], None if whole is None else whole[rows], [masks[r] for r in rows])
        others = [random_batch(rng, rng.randint(1, 3), whole is not None) for _ in range(rng.randint(1, 3))]
        empty = batch.index([])
        joined = DocBatch.concat([empty, picked, *(o[0] for o in others), empty])
        assert_batch(joined, vectors + [v for o in others for v in o[1]], ids + [i for o in others for i in o[0].paper_ids],
                     sents + [s for o in others for s in o[0].sentences],
                     None if whole is None else torch.cat([whole, *(o[2] for o in others)]),
                     masks + [[True] * len(v) for o in others for v in o[1]])
        moved = picked.to("cpu", dtype=torch.float32)
        assert moved.emb.dtype == torch.float32 and (moved.whole is None or moved.whole.dtype == torch.float32)
        assert torch.equal(moved.mask, picked.mask) and moved.paper_ids == ids and moved.sentences == sents
        assert torch.equal(moved.emb, picked.emb.float())
