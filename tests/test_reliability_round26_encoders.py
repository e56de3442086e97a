"""Round 26, the small encoder modules (pieces, pooling, identity, inputs, task formats) checked against references:
mean pooling against sentence-transformers' on a tiny model and against a loop over word pieces (windows, a title,
overflow="truncate"), truncation records against each sentence tokenised alone, memory-bounded batches against their
rule, empty inputs, the encoding identity under set order, and the task formats' refusals leaving the encoder as it
was. Fixed: a mask of another shape than (N, T) broadcast in `masked_mean` (a (N, 1) mask gave the sum, not the
mean), and `raise_if_unseen` given fewer entries than papers let the rest through unchecked."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.identity import encoding_identity, fingerprint_version, plain, versioned
from aspire.encoders.inputs import EncoderInputs
from aspire.encoders.pieces import budget_batches, raise_if_unseen, truncation_records, unseen_sentences
from aspire.encoders.pooling import masked_mean
from tests.conftest import TINY_WORDS


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import BertModel, BertTokenizerFast

    return BertModel.from_pretrained(tiny_model_dir).eval(), BertTokenizerFast.from_pretrained(tiny_model_dir)


def random_sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(TINY_WORDS) for _ in range(rng.randint(1, 12))) + "."


# ---- pooling -------------------------------------------------------------------------------------------------------
def test_mean_refuses_a_mask_of_another_shape():
    """A (N, 1) mask broadcast over every position: masked_mean returned the sum over T (3x the mean here) with no
    error; a (1, T) mask or a (N, T, 1) one broadcast too. The shapes must be (N, T, D) and (N, T)."""
    hidden = torch.arange(24, dtype=torch.float32).view(2, 3, 4)
    for mask in (torch.ones(2, 1), torch.ones(1, 3), torch.ones(2, 3, 1), torch.ones(3, 2)):
        with pytest.raises(ValueError, match=r"mask \(N, T\)"):
            masked_mean(hidden, mask)
    with pytest.raises(ValueError, match=r"\(N, T, D\)"):
        masked_mean(hidden[..., 0], torch.ones(2, 3))
    torch.testing.assert_close(masked_mean(hidden, torch.ones(2, 3)), hidden.mean(1), rtol=0, atol=0)


def test_mean_against_a_loop_over_positions():
    """Random masks (rows with no position, NaN and inf at left-out positions) against a plain loop; empty inputs."""
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(5, 7, 3, generator=gen, dtype=torch.float64)
    mask = torch.rand(5, 7, generator=gen) < 0.5
    mask[2] = False
    hidden[~mask] = float("nan")
    hidden[0, ~mask[0]] = float("inf")
    got = masked_mean(hidden, mask)
    for n in range(5):
        kept = [hidden[n, t] for t in range(7) if mask[n, t]]
        want = torch.stack(kept).mean(0) if kept else torch.zeros(3, dtype=torch.float64)
        torch.testing.assert_close(got[n], want)
    assert masked_mean(torch.zeros(0, 4, 3), torch.zeros(0, 4)).shape == (0, 3)
    assert torch.equal(masked_mean(torch.zeros(2, 0, 3), torch.zeros(2, 0)), torch.zeros(2, 3))


def test_text_vectors_are_sentence_transformers_mean_pooling(tiny_model_dir, tiny):
    """`embed_texts` (masked_mean over a padded batch) against sentence-transformers' Transformer + mean Pooling of
    the same tiny model, texts of unequal length in batches of 3 and 2 (so padding differs)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer

    texts = ["the model.", "we propose a new approach using neural network language models for text similarity",
             "a", "café naïve résumé et al fig", "results of the two methods"]
    ours = ContextualSentenceEncoder(*tiny).embed_texts(texts, batch_size=3)
    module = Transformer(str(tiny_model_dir), max_seq_length=128)
    st = SentenceTransformer(modules=[module, Pooling(ours.shape[1], "mean")], device="cpu")
    theirs = st.encode(texts, convert_to_tensor=True, batch_size=2)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("overflow, include_title", [("window", False), ("window", True), ("truncate", True)])
def test_sentence_vectors_are_the_mean_of_their_pieces_over_windows(tiny, overflow, include_title):
    """`forward` against a loop over every (row, piece) of the tokenisation: each sentence's vector is the mean of
    the hidden states of the pieces with its index, over all of its paper's windows; a sentence with none is masked
    and zero. Papers of 1 to 6 sentences in windows of 20 pieces."""
    model, tok = tiny
    rng = random.Random(5)
    enc = ContextualSentenceEncoder(model, tok, max_length=20, include_title=include_title, overflow=overflow)
    papers = [Paper(f"p{i}", rng.choice(["", "the title of a paper"]), [random_sentence(rng) for _ in range(rng.randint(1, 6))])
              for i in range(4)]
    inputs = enc.tokenize(papers)
    assert len(inputs.row_paper) > len(papers) or overflow == "truncate"  # some paper overflowed
    with torch.no_grad():
        out = enc.forward(inputs, max_rows=2)
        hidden = model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask,
                       token_type_ids=inputs.token_type_ids).last_hidden_state
    cut = {(r.paper_id, s) for r in inputs.truncation for s in r.cut}
    for b, paper in enumerate(papers):
        for s in range(inputs.n_sentences[b]):
            pieces = [hidden[r, t] for r in range(len(inputs.row_paper)) if inputs.row_paper[r] == b
                      for t in range(inputs.input_ids.shape[1]) if inputs.sent_index[r, t] == s]
            if pieces:
                assert bool(out.mask[b, s])
                torch.testing.assert_close(out.emb[b, s], torch.stack(pieces).mean(0), rtol=1e-5, atol=1e-5)
            else:
                assert (paper.paper_id, s) in cut and not out.mask[b, s] and not out.emb[b, s].any()
        assert not out.mask[b, inputs.n_sentences[b]:].any()


def test_a_sentence_with_no_piece_is_masked_and_zero(tiny):
    """Inputs built by hand where sentence 1 of paper 0 has no piece (as a caller's own EncoderInputs may): its
    vector is zero and masked, the others are their pieces' means; row 2 continues paper 0."""
    model, tok = tiny
    enc = ContextualSentenceEncoder(model, tok)
    ids = torch.tensor([[2, 40, 41, 3, 0], [2, 42, 43, 44, 3], [2, 45, 3, 0, 0]])
    att = (ids != 0).long()
    sent = torch.tensor([[-1, 0, 0, -1, -1], [-1, 0, 1, 2, -1], [-1, 2, -1, -1, -1]])
    inputs = EncoderInputs(ids, att, sent, torch.tensor([0, 1, 0]), [3, 3], ["a", "b"],
                           [["x", "y", "z"], ["u", "v", "w"]])
    with torch.no_grad():
        out = enc.forward(inputs)
        hidden = model(input_ids=ids, attention_mask=att).last_hidden_state
    assert out.mask.tolist() == [[True, False, True], [True, True, True]]
    assert not out.emb[0, 1].any()
    torch.testing.assert_close(out.emb[0, 2], hidden[2, 1])
    torch.testing.assert_close(out.emb[0, 0], hidden[0, 1:3].mean(0))
    torch.testing.assert_close(out.emb[1, 2], hidden[1, 3])
    torch.testing.assert_close(out.whole[0], torch.cat([hidden[0, :4], hidden[2, :3]]).mean(0))


# ---- pieces ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overflow", ["window", "truncate"])
def test_truncation_records_against_each_sentence_tokenised_alone(tiny, overflow):
    """Each sentence's pieces counted alone (the tokenizer's own), laid end to end after the title: with C abstract
    pieces fitting the first window, a sentence starting at or past C is cut, one straddling C partial; no record for
    a paper that fits. Titles are sentence 0 with include_title, so positions shift by one."""
    model, tok = tiny
    rng = random.Random(11)
    for trial in range(12):
        include_title = trial % 2 == 0
        enc = ContextualSentenceEncoder(model, tok, max_length=rng.choice([16, 24, 32]), include_title=include_title,
                                        overflow=overflow)
        papers = [Paper(f"p{i}", rng.choice(["", "model", "the title of a paper"]),
                        [random_sentence(rng) for _ in range(rng.randint(1, 6))]) for i in range(3)]
        records = {r.paper_id: r for r in enc.tokenize(papers).truncation}
        for p in papers:
            shift = int(include_title and bool(p.title))
            per = [len(tok(s, add_special_tokens=False)["input_ids"]) for s in p.sentences]
            title = len(tok(p.title, add_special_tokens=False)["input_ids"])
            room = enc.max_length - tok.num_special_tokens_to_add(pair=True) - title
            bounds = np.cumsum([0, *per])
            if bounds[-1] <= room:
                assert p.paper_id not in records, (trial, p)
                continue
            rec = records[p.paper_id]
            assert rec.cut == [j + shift for j in range(len(per)) if bounds[j] >= room], (trial, p)
            assert rec.partial == [j + shift for j in range(len(per)) if bounds[j] < room < bounds[j + 1]], (trial, p)
            assert rec.handled_by == overflow


def test_pieces_helpers_on_no_rows_and_no_papers():
    """No paper, no row: no record, no unseen list, no batch, nothing refused."""
    none = np.zeros((0, 4), dtype=np.int64)
    assert truncation_records([], none, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), "window") == []
    assert unseen_sentences([], none, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)) == []
    assert budget_batches([], [], 4, 10) == []
    raise_if_unseen([], [], [])


def test_unseen_sentences_leave_out_the_truncated_ones_only():
    """Paper a: sentence 2 has no piece in any kept row and is not cut, so it is unseen; paper b: sentence 1 has
    pieces only in a row overflow="truncate" leaves out and does not count, sentence 2 (in no row) does."""
    sent = np.array([[0, 1, -1], [0, 0, -1], [1, 1, -1]])
    rows = np.array([0, 1, 1])
    assert unseen_sentences([3, 3], sent, rows, np.array([True, True, False])) == [[2], [2]]
    # overflow="window" keeps every row: b's sentence 1 has a piece in a kept row
    assert unseen_sentences([3, 3], sent, rows, np.ones(3, dtype=bool)) == [[2], [2]]
    assert unseen_sentences([3, 3], sent[:2], rows[:2], np.ones(2, dtype=bool)) == [[2], [1, 2]]


def test_raise_if_unseen_refuses_counts_that_differ():
    """Two papers, one `unseen` list: zipped, paper b (whose sentence 0 has no piece) was let through unchecked."""
    with pytest.raises(ValueError, match="2 papers"):
        raise_if_unseen(["a", "b"], [["x"]], [[], [0]])
    with pytest.raises(ValueError, match="2 papers"):
        raise_if_unseen(["a", "b"], [["x"], ["y"]], [[]])
    with pytest.raises(ValueError, match="titled"):
        raise_if_unseen(["a", "b"], [["x"], ["y"]], [[], []], [True])
    with pytest.raises(ValueError, match=r"paper b: sentence\(s\) \[0\].*sentence 0 is the paper's title"):
        raise_if_unseen(["a", "b"], [["x"], ["y", "z"]], [[], [0]], [False, True])
    raise_if_unseen(["a", "b"], [["x"], ["y"]], [[], []], [True, False])


def test_budget_batches_against_their_rule():
    """Random sizes and limits: the batches are `order` cut into consecutive runs; each holds at most `max_items`
    and at most `max_total` in size unless it is one item; and no batch could have taken the next batch's first
    item (a batch is cut only when a limit forces it)."""
    rng = random.Random(2)
    for _ in range(200):
        n = rng.randint(0, 12)
        sizes = [rng.randint(0, 12) for _ in range(n)]
        order = rng.sample(range(n), n)
        max_items, max_total = rng.randint(1, 5), rng.randint(1, 20)
        batches = budget_batches(order, sizes, max_items, max_total)
        assert [i for b in batches for i in b] == order
        for k, batch in enumerate(batches):
            total = sum(sizes[i] for i in batch)
            assert batch and len(batch) <= max_items and (total <= max_total or len(batch) == 1)
            if k + 1 < len(batches):
                nxt = batches[k + 1][0]
                assert len(batch) == max_items or total + sizes[nxt] > max_total


# ---- inputs ------------------------------------------------------------------------------------------------------
def test_encoder_inputs_to_keeps_every_field(tiny):
    """`to` rebuilds the dataclass positionally: every field comes back, tensors on the device asked for."""
    model, tok = tiny
    enc = ContextualSentenceEncoder(model, tok, max_length=16, include_title=True, codes=[], segment_ids=True)
    inputs = enc.tokenize([Paper("a", "the title", [random_sentence(random.Random(1)) for _ in range(4)])])
    moved = inputs.to(torch.device("meta"))
    for f in dataclasses.fields(EncoderInputs):
        before, after = getattr(inputs, f.name), getattr(moved, f.name)
        if isinstance(before, torch.Tensor):
            assert after.device.type == "meta" and after.shape == before.shape and after.dtype == before.dtype, f.name
        else:
            assert after == before, f.name
    assert inputs.truncation and inputs.titled == [True] and inputs.token_type_ids is not None


# ---- identity ----------------------------------------------------------------------------------------------------
def test_identity_versions_and_set_order():
    """`versioned` / `fingerprint_version` round trip; a legacy 16-digit fingerprint is version 1; `plain` sorts a
    set whatever its insertion order, so two adapters with the same targets hash the same."""
    assert versioned("0123456789abcdef" * 4) == "v2-0123456789abcdef"
    assert fingerprint_version(versioned("ab" * 32)) == 2
    for legacy in ("0123456789abcdef", "v-123", "x2-abc", ""):
        assert fingerprint_version(legacy) == 1, legacy
    assert plain({"value", "query", "key"}) == ["key", "query", "value"]

    class Config:
        def __init__(self, targets):
            self.targets = targets

        def to_dict(self):
            return {"model_type": "bert", "hidden_size": 8, "output_hidden_states": True, "r": 4,
                    "target_modules": self.targets}

    class Model:
        def __init__(self, targets):
            self.config = Config(targets)
            self.peft_config = {"default": Config(targets)}
            self.active_adapter = "default"

    class Tokenizer:
        def get_vocab(self):
            return {"b": 1, "a": 0}

    names = [f"layer.{i}.query" for i in range(40)]
    one, two = set(names), set(reversed(names))
    assert encoding_identity(Model(one), Tokenizer()) == encoding_identity(Model(two), Tokenizer())
    assert b"output_hidden_states" not in encoding_identity(Model(one), Tokenizer())  # not an encoding field


# ---- task formats ------------------------------------------------------------------------------------------------
def test_task_format_refusals_leave_the_encoder_as_it_was(tiny):
    """A refused code adds nothing to the tokenizer; `using_code` with an unknown code or a failing block leaves the
    code in force; `merged` without adapters and a second `add_adapters` are refused; a query-scope adapter must be
    the one adapter named `query`."""
    import copy

    model, tok = tiny
    enc = ContextualSentenceEncoder(copy.deepcopy(model), copy.deepcopy(tok))
    size = len(enc.tokenizer)
    with pytest.raises(ValueError, match="not one of this encoder's codes"):
        enc.add_codes(["[DOC]"], "[METHOD]")
    assert len(enc.tokenizer) == size and enc.codes == [] and enc.code is None
    enc.add_codes(["[DOC]", "[METHOD]"], "[DOC]")
    assert len(enc.tokenizer) == size + 2 and enc.model.get_input_embeddings().weight.shape[0] == size + 2
    with pytest.raises(ValueError):
        with enc.using_code("[RESULT]"):
            pass
    assert enc.code == "[DOC]"
    with pytest.raises(RuntimeError):
        with enc.using_code(None):
            assert enc.code is None
            raise RuntimeError
    assert enc.code == "[DOC]"
    with pytest.raises(ValueError, match="no adapters"):
        enc.merged()
    with pytest.raises(ValueError, match="query-scope adapter is one adapter"):
        enc.add_adapters("lora", ["default"], scope="query")
    with pytest.raises(ValueError, match="unknown adapter scope"):
        enc.add_adapters("lora", ["default"], scope="papers")
    enc.add_adapters("lora", ["default"], target_modules=["query", "value"])
    with pytest.raises(ValueError, match="already has adapters"):
        enc.add_adapters("lora", ["other"])
