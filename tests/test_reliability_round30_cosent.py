"""Round 30: CoSentBert's groups reading, the teacher's alignments against a brute-force argmax, peft adapters
(save/load, off, merge, unknown names) and control codes, each against an independent reference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.align import abs_align, cc_align
from aspire.encoders import adapters, codes
from aspire.io import DataError

TEXTS = ["the model of text", "a neural network for language", "we propose a new approach"]


def _groups(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- cosentbert: groups files


def test_a_groups_file_repeating_a_set_is_refused_naming_its_line(tmp_path, tiny_model_dir):
    """Two lines of one set id: the text on both was counted twice in dev retrieval (its copy, the nearest row, a
    free hit: 6 contexts and acc@1 0.5 on the tiny model, where the set holds 5 distinct texts)."""
    from aspire.encoders.cosentbert import context_pairs, evaluate_contexts, load_sentence_model

    path = _groups(tmp_path / "groups.dev.jsonl", [
        {"set_id": "a|b", "contexts_clean": ["the model of text", "a neural network"]},
        {"set_id": "c|d", "contexts_clean": ["we propose a new approach", "state of the art results"]},
        {"set_id": "a|b", "contexts_clean": ["the model of text", "scientific document similarity"]},
    ])
    with pytest.raises(DataError, match=r"groups\.dev\.jsonl:3: co-cited set 'a\|b' repeats the set of line 1"):
        context_pairs(path)
    model = load_sentence_model(tiny_model_dir)
    with pytest.raises(DataError, match=r"groups\.dev\.jsonl:3: .*repeats the set of line 1"):
        evaluate_contexts(model, path)


def test_distinct_sets_still_read_as_before(tmp_path):
    from aspire.encoders.cosentbert import context_pairs

    path = _groups(tmp_path / "groups.train.jsonl", [
        {"set_id": "a|b", "contexts_clean": TEXTS[:2]},
        {"set_id": "b|c", "contexts_clean": [TEXTS[2], TEXTS[2], TEXTS[0]]},  # a text repeated within a set: once
    ])
    assert context_pairs(path) == [(TEXTS[0], TEXTS[1], "a|b"), (TEXTS[2], TEXTS[0], "b|c")]


# --------------------------------------------------------------------------- alignments (aspire.data.align)


def _brute_cc(sents: np.ndarray, n_s: int, ctx: np.ndarray, n_c: int) -> tuple[int, float]:
    """First sentence whose highest cosine to a context is the best (ties within 1e-6), by plain loops."""
    unit = lambda v: v / np.linalg.norm(v)  # noqa: E731
    scores = [max(float(unit(sents[i]) @ unit(ctx[c])) for c in range(n_c)) for i in range(n_s)]
    best = max(scores)
    i = next(k for k, s in enumerate(scores) if s >= best - 1e-6)
    return i, scores[i]


def _brute_abs(a: np.ndarray, n_a: int, b: np.ndarray, n_b: int) -> tuple[tuple[int, int], float]:
    unit = lambda v: v / np.linalg.norm(v)  # noqa: E731
    scores = {(i, j): float(unit(a[i]) @ unit(b[j])) for i in range(n_a) for j in range(n_b)}
    best = max(scores.values())
    ij = next(k for k in sorted(scores) if scores[k] >= best - 1e-6)
    return ij, scores[ij]


def _padded(rows: list[np.ndarray], width: int, dim: int) -> DocBatch:
    emb = torch.zeros(len(rows), width, dim)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for k, r in enumerate(rows):
        emb[k, : len(r)] = torch.from_numpy(r)
        mask[k, : len(r)] = True
        emb[k, len(r):] = 7.0  # padding that would win if it were read
    return DocBatch(emb=emb, mask=mask)


def test_alignments_equal_a_brute_force_argmax_with_ties_and_one_sentence_abstracts():
    rng = np.random.default_rng(0)
    dim, papers = 6, []
    for k in range(12):
        n_s, n_c = [1, 1, 4, 5, 3, 6][k % 6], [1, 3, 2, 4, 1, 2][k % 6]
        sents = rng.normal(size=(n_s, dim)).astype(np.float32)
        ctx = rng.normal(size=(n_c, dim)).astype(np.float32)
        if n_s > 2 and k % 2:  # a tie: a later sentence repeats an earlier one (scaled: cosine is scale-free)
            sents[n_s - 1] = 3.0 * sents[1]
            ctx[0] = sents[1] + 0.01 * rng.normal(size=dim).astype(np.float32)
        papers.append((sents, ctx))
    s_batch = _padded([s for s, _ in papers], 6, dim)
    c_batch = _padded([c for _, c in papers], 4, dim)
    index, sim = cc_align(s_batch, c_batch)
    for k, (sents, ctx) in enumerate(papers):
        i, s = _brute_cc(sents, len(sents), ctx, len(ctx))
        assert int(index[k]) == i, k
        assert float(sim[k]) == pytest.approx(s, abs=1e-5)
    # abs_align: paper k against paper k+1, the ties made above included
    a_rows, b_rows = [s for s, _ in papers[:-1]], [s for s, _ in papers[1:]]
    pairs, psim = abs_align(_padded(a_rows, 6, dim), _padded(b_rows, 6, dim))
    for k, (a, b) in enumerate(zip(a_rows, b_rows)):
        ij, s = _brute_abs(a, len(a), b, len(b))
        assert tuple(pairs[k].tolist()) == ij, k
        assert float(psim[k]) == pytest.approx(s, abs=1e-5)


def test_abs_align_tie_goes_to_the_smallest_i_then_j():
    a = np.array([[1, 0], [0, 1], [2, 0]], dtype=np.float32)  # sentences 0 and 2 are the same direction
    b = np.array([[0, 1], [1, 0], [3, 0]], dtype=np.float32)  # so are 1 and 2
    pairs, sim = abs_align(_padded([a], 3, 2), _padded([b], 3, 2))
    assert pairs.tolist() == [[0, 1]] and float(sim[0]) == pytest.approx(1.0)


# --------------------------------------------------------------------------- adapters


def _tiny(tiny_model_dir, with_codes: bool):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModel.from_pretrained(tiny_model_dir).eval()
    ids = []
    if with_codes:
        ids = [codes.code_id(tokenizer, c) for c in codes.add_control_codes(model, tokenizer, ["[METHOD]", "[DOC]"])]
    enc = dict(tokenizer(TEXTS, return_tensors="pt", padding=True))
    if with_codes:
        enc = codes.encoding_with_code(enc, tokenizer, "[METHOD]")
    return model, tokenizer, ids, enc


def _randomise(model, seed: int = 1) -> None:
    """Adapters start as the identity (LoRA's B = 0, IA3's ones): give them weights that move the output."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ia3_" in name:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif "lora_" in name or "trainable_tokens_delta" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def _out(model, enc) -> torch.Tensor:
    with torch.no_grad():
        return model(**enc).last_hidden_state


@pytest.mark.parametrize("kind,with_codes", [("lora", True), ("lora", False), ("ia3", False)])
def test_adapters_off_save_load_and_merge_against_the_base_model(tmp_path, tiny_model_dir, kind, with_codes):
    from transformers import AutoModel

    model, tokenizer, ids, enc = _tiny(tiny_model_dir, with_codes)
    base_out = _out(model, enc)  # the unadapted model (codes added) before peft wraps it
    options = {"trainable_tokens": ids} if ids else {}
    adapted = adapters.attach_adapters(model, kind, ["default", "second"], **options)
    _randomise(adapted)
    adapted.eval()
    first = _out(adapted, enc)
    adapted.set_adapter("second")
    second = _out(adapted, enc)
    assert (first - base_out).abs().max() > 1e-3 and (second - first).abs().max() > 1e-3  # adapters do something

    trains = {n: p.requires_grad for n, p in adapted.named_parameters()}
    assert any(trains.values()) and not any(v for n, v in trains.items() if "base_layer" in n)
    adapters.set_enabled(adapted, False)
    assert torch.equal(_out(adapted, enc), base_out)  # off: exactly the base model
    assert {n: p.requires_grad for n, p in adapted.named_parameters()} == trains
    adapters.set_enabled(adapted, True)
    assert torch.equal(_out(adapted, enc), second)

    adapters.save_adapted(adapted, tmp_path)
    settings = adapters.adapter_settings(adapted)
    assert settings == {"kind": kind, "names": ["default", "second"], "scope": "all", "active": "second"}
    plain = AutoModel.from_pretrained(tmp_path).eval()  # the base weights alone, plain transformers
    assert torch.equal(_out(plain, enc), base_out)
    loaded = adapters.load_adapted(AutoModel.from_pretrained(tmp_path), tmp_path, settings).eval()
    assert loaded.active_adapter == "second" and torch.equal(_out(loaded, enc), second)
    loaded_first = adapters.load_adapted(AutoModel.from_pretrained(tmp_path), tmp_path, settings, active="default")
    assert torch.equal(_out(loaded_first.eval(), enc), first)

    folded = adapters.merged(adapted).eval()
    assert not adapters.is_adapted(folded)
    torch.testing.assert_close(_out(folded, enc), second, atol=1e-5, rtol=1e-5)
    assert torch.equal(_out(adapted, enc), second)  # merged works on a copy


def test_load_adapted_refuses_an_unknown_active_adapter_listing_the_names(tmp_path, tiny_model_dir):
    """peft said only "Adapter nope not found.", after loading every adapter."""
    from transformers import AutoModel

    model, _, _, _ = _tiny(tiny_model_dir, False)
    adapted = adapters.attach_adapters(model, "lora", ["default", "second"])
    adapters.save_adapted(adapted, tmp_path)
    settings = adapters.adapter_settings(adapted)
    with pytest.raises(ValueError, match=r"no adapter 'nope' to activate; valid: \['default', 'second'\]"):
        adapters.load_adapted(AutoModel.from_pretrained(tmp_path), tmp_path, settings, active="nope")


def test_unknown_adapter_kind_scope_and_active_are_refused_listing_valid_ones():
    with pytest.raises(ValueError, match=r"unknown adapter kind 'bottleneck'; valid: \['lora', 'ia3'\]"):
        adapters.adapter_config("bottleneck", "bert")
    base = {"names": ["default", "second"], "kind": "lora", "scope": "all"}
    with pytest.raises(ValueError, match=r"'kind' 'houlsby' is unknown; valid: \['lora', 'ia3'\]"):
        adapters.check_adapter_settings({**base, "kind": "houlsby"}, "x.json")
    with pytest.raises(ValueError, match=r"'scope' 'papers' is unknown; valid: \['all', 'query'\]"):
        adapters.check_adapter_settings({**base, "scope": "papers"}, "x.json")
    with pytest.raises(ValueError, match=r"'active' 'third' is none of its names \['default', 'second'\]"):
        adapters.check_adapter_settings({**base, "active": "third"}, "x.json")
    with pytest.raises(ValueError, match="distinct"):
        adapters.check_adapter_settings({**base, "names": ["a", "a"]}, "x.json")


# --------------------------------------------------------------------------- control codes


def test_codes_are_added_once_and_start_at_their_words_mean(tiny_model_dir):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModel.from_pretrained(tiny_model_dir)
    before = len(tokenizer)
    old = model.get_input_embeddings().weight.detach().clone()
    assert codes.add_control_codes(model, tokenizer, ["[METHOD]", "[RESULT]", "[METHOD]"]) == ["[METHOD]", "[RESULT]"]
    assert len(tokenizer) == before + 2 and model.get_input_embeddings().weight.shape[0] == before + 2
    assert codes.add_control_codes(model, tokenizer, ["[RESULT]", "[METHOD]"]) == []  # already there: nothing added
    assert len(tokenizer) == before + 2 and model.get_input_embeddings().weight.shape[0] == before + 2
    table = model.get_input_embeddings().weight
    for code, word in (("[METHOD]", "method"), ("[RESULT]", "result")):
        pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
        torch.testing.assert_close(table[codes.code_id(tokenizer, code)], old[pieces].mean(0))
        # one token in the vocabulary; typed inside a paper's text it is plain text (round 52: `split_code_text`)
        assert tokenizer.convert_tokens_to_ids(code) == len(tokenizer) - 2 + ("[METHOD]", "[RESULT]").index(code)
        assert tokenizer.tokenize(f"a {code} b") == ["a", "[", word, "]", "b"]
    assert torch.equal(table[:before], old)  # the old rows are untouched


def test_with_code_puts_the_code_after_the_first_token_and_refuses_unknown_ones(tiny_model_dir):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    codes.add_control_codes(AutoModel.from_pretrained(tiny_model_dir), tokenizer, ["[DOC]", "[METHOD]"])
    enc = dict(tokenizer(TEXTS[:2], return_tensors="pt", padding=True))
    out = codes.encoding_with_code(enc, tokenizer, ["[DOC]", "[METHOD]"])
    for k in range(2):
        ids, want = out["input_ids"][k].tolist(), enc["input_ids"][k].tolist()
        assert ids == [want[0], codes.code_id(tokenizer, ["[DOC]", "[METHOD]"][k]), *want[1:]]
        assert out["attention_mask"][k].tolist() == [1, *enc["attention_mask"][k].tolist()]
        assert out["token_type_ids"][k].tolist() == [0, *enc["token_type_ids"][k].tolist()]
    with pytest.raises(ValueError, match=r"'\[RESULT\]' is not in the tokenizer's vocabulary"):
        codes.encoding_with_code(enc, tokenizer, "[RESULT]")
    with pytest.raises(ValueError, match="3 control codes for 2 papers"):
        codes.encoding_with_code(enc, tokenizer, ["[DOC]"] * 3)
    with pytest.raises(ValueError, match=r"unknown control-code mode 'facets'; valid: \['none', 'task', 'facet'\]"):
        codes.codes_for("facets", [])
    with pytest.raises(ValueError, match=r"unknown facet code 'methods'; valid: \['auto', 'none', 'background'"):
        codes.query_code(["[METHOD]"], "methods", "method")
    assert codes.codes_for("facet", []) == (["[BACKGROUND]", "[METHOD]", "[RESULT]", "[DOC]"], "[DOC]")
    assert codes.query_code(["[BACKGROUND]", "[DOC]"], "auto", "objective_label") == "[BACKGROUND]"
    assert codes.query_code(["[COCITE]"], "auto", "method") is None


def test_attach_adapters_refuses_a_bare_string_of_names(tiny_model_dir):
    """`attach_adapters(model, "lora", "abc")` made three adapters 'a', 'b' and 'c' (a string read as its letters)."""
    for names in ("abc", ["default", ""], ["default", 3], []):
        model, _, _, _ = _tiny(tiny_model_dir, False)
        with pytest.raises(ValueError, match="adapter names must be a list of distinct non-empty strings"):
            adapters.attach_adapters(model, "lora", names)
