"""Task formats (SPECTER2) on a tiny random BERT: control codes and peft adapters, in the encoder and in training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_train import tiny_config
from transformers import AutoModel, AutoTokenizer

from aspire.config import ConfigError, load_config
from aspire.data.papers import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.adapters import ADAPTER_DIR
from aspire.encoders.codes import codes_for, query_code
from aspire.encoders.pretrained import SETTINGS_FILE
from aspire.train import checkpoint as ckpt
from aspire.train.config import Config
from aspire.train.data import TripletCollator, load_split
from aspire.train.document_model import DocumentModel
from aspire.train.task_formats import apply_formats, use_task
from aspire.train.trainer import build_model, run

FACET_CODES = ["[BACKGROUND]", "[METHOD]", "[RESULT]", "[DOC]"]
PAPERS = [
    Paper("a", "the model", ["we propose a new method.", "results show it improves the task."]),
    Paper("b", "neural text", ["the data is text.", "two documents.", "we show state of the art."]),
]


def load(path, **settings) -> ContextualSentenceEncoder:
    return ContextualSentenceEncoder.from_pretrained(path, **settings)


def with_codes(path, **settings) -> ContextualSentenceEncoder:
    encoder = load(path, **settings)
    encoder.add_codes(FACET_CODES, "[DOC]")
    return encoder


def perturb_adapters(encoder: ContextualSentenceEncoder, seed: int = 0) -> None:
    """LoRA's B starts at zero (the adapter adds nothing): give every adapter weight random values."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in encoder.model.named_parameters():
            if "lora_" in name or "trainable_tokens_delta" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


# ---- control codes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("include_title", [False, True])
def test_code_goes_after_cls_and_leaves_every_sentence_span_unchanged(tiny_model_dir, include_title):
    plain = load(tiny_model_dir, include_title=include_title)
    coded = with_codes(tiny_model_dir, include_title=include_title)
    a, b = plain.tokenize(PAPERS), coded.tokenize(PAPERS)
    doc = coded.tokenizer.convert_tokens_to_ids("[DOC]")
    assert b.input_ids.shape[1] == a.input_ids.shape[1] + 1
    assert (b.input_ids[:, 0] == coded.tokenizer.cls_token_id).all() and (b.input_ids[:, 1] == doc).all()
    assert (b.sent_index[:, 1] == -1).all() and (b.attention_mask[:, 1] == 1).all()
    drop = torch.cat([b.sent_index[:, :1], b.sent_index[:, 2:]], dim=1)  # the code's column taken out
    assert torch.equal(drop, a.sent_index)
    assert torch.equal(torch.cat([b.input_ids[:, :1], b.input_ids[:, 2:]], dim=1), a.input_ids)
    out = coded.encode(PAPERS)
    assert torch.equal(out.mask, plain.encode(PAPERS).mask)


def test_code_keeps_windows_within_the_limit_and_every_sentence(tiny_model_dir):
    long = Paper("long", "the model", [f"we show the {w} result." for w in "two new neural text data task".split()] * 4)
    coded = with_codes(tiny_model_dir, max_length=24)
    inputs = coded.tokenize([long])
    assert inputs.input_ids.shape[0] > 1 and inputs.input_ids.shape[1] <= 24
    assert (inputs.input_ids[:, 1] == coded.tokenizer.convert_tokens_to_ids("[DOC]")).all()
    assert coded.encode([long]).mask.all()


def test_codes_are_special_tokens_started_from_their_names(tiny_model_dir):
    encoder = with_codes(tiny_model_dir)
    tok, table = encoder.tokenizer, encoder.model.get_input_embeddings().weight
    assert tok.convert_tokens_to_ids("[METHOD]") not in (None, tok.unk_token_id)  # one token of the vocabulary
    assert tok.tokenize("[METHOD] method") == ["[", "method", "]", "method"]  # typed in a paper: plain text
    method = tok.convert_tokens_to_ids("method")
    assert torch.allclose(table[tok.convert_tokens_to_ids("[METHOD]")], table[method])
    assert table.shape[0] == len(tok) == encoder.model.config.vocab_size


def test_saved_codes_load_with_plain_transformers_and_back(tiny_model_dir, tmp_path):
    encoder = with_codes(tiny_model_dir)
    encoder.save_pretrained(tmp_path / "m")
    tok, model = AutoTokenizer.from_pretrained(tmp_path / "m"), AutoModel.from_pretrained(tmp_path / "m")
    assert tok.convert_tokens_to_ids("[RESULT]") == encoder.tokenizer.convert_tokens_to_ids("[RESULT]")
    assert tok.tokenize("[RESULT] text") == ["[RESULT]", "text"]
    assert torch.equal(model.get_input_embeddings().weight, encoder.model.get_input_embeddings().weight)
    settings = json.loads((tmp_path / "m" / "aspire_encoder.json").read_text())
    assert settings["codes"] == FACET_CODES and settings["code"] == "[DOC]"
    again = load(tmp_path / "m")
    assert again.codes == FACET_CODES and again.code == "[DOC]"
    assert torch.equal(again.encode(PAPERS).emb, encoder.encode(PAPERS).emb)
    assert again.fingerprint() == encoder.fingerprint()


def test_a_query_code_changes_the_query_vectors_and_is_checked(tiny_model_dir):
    encoder = with_codes(tiny_model_dir)
    doc = encoder.encode(PAPERS)
    with encoder.using_code("[METHOD]"):
        method = encoder.encode(PAPERS)
        assert encoder.fingerprint() != with_codes(tiny_model_dir).fingerprint()  # caches keep them apart
    assert encoder.code == "[DOC]"
    assert not torch.allclose(method.emb, doc.emb)
    assert torch.equal(encoder.encode(PAPERS).emb, doc.emb)
    assert encoder.encode_abstract(PAPERS).shape == (2, encoder.dim)
    with pytest.raises(ValueError, match=r"\[NOPE\].*not one of this encoder's codes"):
        with encoder.using_code("[NOPE]"):
            pass
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        ContextualSentenceEncoder(encoder.model, load(tiny_model_dir).tokenizer, codes=["[METHOD]"])


def test_query_code_choices():
    assert codes_for("facet", ["cocite"]) == (FACET_CODES, "[DOC]")
    assert codes_for("task", ["cocite", "search"]) == (["[COCITE]", "[SEARCH]"], "[COCITE]")
    assert query_code(FACET_CODES, "auto", "method") == "[METHOD]"
    assert query_code(["[COCITE]"], "auto", "method") is None  # a model without facet codes is unchanged
    assert query_code(FACET_CODES, "auto", "") is None  # an unfaceted set
    assert query_code(FACET_CODES, "none", "method") is None
    assert query_code(FACET_CODES, "result", "method") == "[RESULT]"
    with pytest.raises(ValueError, match=r"\[RESULT\] asked for.*\['\[COCITE\]'\]"):
        query_code(["[COCITE]"], "result", "method")
    with pytest.raises(ValueError, match="unknown facet code 'methods'"):
        query_code(FACET_CODES, "methods", "method")


# ---- adapters -----------------------------------------------------------------------------------------
def test_wrapping_and_loading_an_adapted_model_warns_nothing(tiny_model_dir, tmp_path):
    """peft reads transformers' deprecated `is_gradient_checkpointing` as it wraps a model: a FutureWarning every
    load of an adapted model (aspire-minilm) showed users, `-q` or not. Adding adapters and loading them back warn
    nothing now."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoder = load(tiny_model_dir)
        encoder.add_adapters("lora", ["default"], r=4, alpha=8.0)
        encoder.save_pretrained(tmp_path / "m")
        load(tmp_path / "m")
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []


@pytest.mark.parametrize("kind", ["lora", "ia3"])
def test_adapter_saves_beside_the_base_and_loads_with_peft_equal(tiny_model_dir, tmp_path, kind):
    from peft import PeftModel

    encoder = load(tiny_model_dir)
    before = encoder.encode(PAPERS).emb
    encoder.add_adapters(kind, ["default"], r=4, alpha=8.0)
    perturb_adapters(encoder)
    if kind == "ia3":
        with torch.no_grad():
            for name, p in encoder.model.named_parameters():
                if "ia3_l" in name:
                    p.mul_(1.5)
    after = encoder.encode(PAPERS).emb
    assert not torch.allclose(after, before, atol=1e-4)
    encoder.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / ADAPTER_DIR / "adapter_config.json").is_file()
    base = AutoModel.from_pretrained(tmp_path / "m")  # the base weights, as the pretrained model's
    original = AutoModel.from_pretrained(tiny_model_dir).state_dict()
    assert base.state_dict().keys() == original.keys()
    assert all(torch.equal(v, original[k]) for k, v in base.state_dict().items())
    peft_model = PeftModel.from_pretrained(base, tmp_path / "m" / ADAPTER_DIR).eval()
    via_peft = ContextualSentenceEncoder(peft_model, encoder.tokenizer).encode(PAPERS).emb
    assert torch.allclose(via_peft, after, atol=1e-6)
    again = load(tmp_path / "m")
    assert torch.allclose(again.encode(PAPERS).emb, after, atol=1e-6)
    merged = again.merged()
    merged.save_pretrained(tmp_path / "merged")
    assert not (tmp_path / "merged" / ADAPTER_DIR).exists()
    plain = AutoModel.from_pretrained(tmp_path / "merged")
    assert type(plain).__name__ == "BertModel"
    assert torch.allclose(load(tmp_path / "merged").encode(PAPERS).emb, after, atol=1e-5)


def test_lora_trains_only_the_adapter(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "model.kind=max", "model.adapter.kind=lora",
                      "model.adapter.r=4", "train.max_steps=3", "train.eval_every=3")
    model = build_model(cfg)
    data = load_split(cfg.data, "train")
    batch = TripletCollator(model.tokenize, data.papers)([data[i] for i in range(0, 24, 3)])
    model(batch)["loss"].backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    lora = [n for n in grads if "lora_" in n]
    assert lora and all(grads[n] is not None for n in lora)
    assert any(float(grads[n].abs().sum()) > 0 for n in lora)
    assert all(grads[n] is None for n in grads if "lora_" not in n)  # base frozen
    result = run(cfg)
    saved = tmp_path / "run" / ckpt.read_pointer(tmp_path / "run")["checkpoint"] / ckpt.MODEL_DIR
    original = AutoModel.from_pretrained(tiny_model_dir).state_dict()
    assert all(torch.equal(v, original[k]) for k, v in AutoModel.from_pretrained(saved).state_dict().items())
    trained = DocumentModel.from_pretrained(saved)
    moved = [p for n, p in trained.encoder.model.named_parameters() if "lora_B" in n]
    assert moved and any(float(p.detach().abs().sum()) > 0 for p in moved)  # B starts at zero: training moved it
    assert result["step"] == 3


def test_an_adapted_encoder_continues_its_own_adapter_and_refuses_another(tiny_model_dir, examples_dir, tmp_path):
    lora = ("model.kind=max", "model.adapter.kind=lora", "model.adapter.r=4", "train.eval_every=2")
    run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "first", *lora, "train.max_steps=2"))
    saved = tmp_path / "first" / ckpt.read_pointer(tmp_path / "first")["checkpoint"] / ckpt.MODEL_DIR
    start = {n: p.detach().clone() for n, p in load(saved).model.named_parameters() if "lora_" in n}
    assert any(float(p.abs().sum()) > 0 for n, p in start.items() if "lora_B" in n)  # the first run moved B

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "warm", *lora, "train.max_steps=2",
                      f"model.encoder={saved}")
    model = build_model(cfg)
    params = dict(model.encoder.model.named_parameters())
    assert set(start) == {n for n in params if "lora_" in n}  # the same adapter, not a second one beside it
    assert all(torch.equal(params[n].detach(), start[n]) for n in start)  # warm: it starts where the first run ended
    assert all(p.requires_grad == ("lora_" in n) for n, p in params.items())  # base frozen, adapter trains
    run(cfg)
    warm = tmp_path / "warm" / ckpt.read_pointer(tmp_path / "warm")["checkpoint"] / ckpt.MODEL_DIR
    after = dict(load(warm).model.named_parameters())
    assert any(not torch.equal(after[n].detach(), start[n]) for n in start)

    other = tiny_config(tiny_model_dir, examples_dir, tmp_path / "other", "model.kind=max", "model.adapter.kind=lora",
                        "model.adapter.r=8", f"model.encoder={saved}")
    with pytest.raises(ConfigError, match=r"has its own adapters.*r: encoder 4, config 8"):
        build_model(other)


def test_per_task_adapters_switch_and_only_the_active_one_learns(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.adapter.kind=lora",
                      "model.adapter.per_task=true", "model.control_codes=task")
    encoder = load(tiny_model_dir)
    apply_formats(encoder, cfg.model, ["cocite", "search"])
    assert list(encoder.model.peft_config) == ["cocite", "search"] and encoder.code == "[COCITE]"
    perturb_adapters(encoder)
    encoder.train()
    use_task(encoder, cfg.model, "search")
    assert encoder.model.active_adapter == "search" and encoder.code == "[SEARCH]"
    assert encoder.tokenize(PAPERS).input_ids[0, 1] == encoder.tokenizer.convert_tokens_to_ids("[SEARCH]")
    encoder(encoder.tokenize(PAPERS)).emb.sum().backward()
    grads = {n: p.grad for n, p in encoder.model.named_parameters()}
    assert all(grads[n] is not None for n in grads if "lora_" in n and ".search." in n)
    assert all(grads[n] is None for n in grads if ".cocite." in n)
    search = encoder.eval().encode(PAPERS).emb
    use_task(encoder, cfg.model, "cocite")
    assert not torch.allclose(encoder.encode(PAPERS).emb, search, atol=1e-4)
    with pytest.raises(ValueError, match="no adapter for task 'other'"):
        use_task(encoder, cfg.model.__class__(adapter=cfg.model.adapter), "other")


def test_codes_train_beside_lora_and_survive_save_and_merge(tiny_model_dir, tmp_path):
    cfg = load_config(Config, None, ["model.control_codes=facet", "model.adapter.kind=lora", "model.adapter.r=4"])
    encoder = load(tiny_model_dir)
    apply_formats(encoder, cfg.model, ["cocite"])
    encoder.train()
    encoder(encoder.tokenize(PAPERS)).emb.sum().backward()
    deltas = [p for n, p in encoder.model.named_parameters() if "trainable_tokens_delta" in n]
    assert deltas and deltas[0].grad is not None and float(deltas[0].grad.abs().sum()) > 0
    perturb_adapters(encoder.eval())
    with encoder.using_code("[METHOD]"):
        expected = encoder.encode(PAPERS).emb
    encoder.save_pretrained(tmp_path / "m")
    again = load(tmp_path / "m")
    merged = again.merged()
    for enc in (again, merged):
        with enc.using_code("[METHOD]"):
            assert torch.allclose(enc.encode(PAPERS).emb, expected, atol=1e-5)


def test_saved_document_model_keeps_its_formats(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=max", "model.control_codes=task")
    model = build_model(cfg)
    model.save_pretrained(tmp_path / "saved")
    loaded = DocumentModel.from_pretrained(tmp_path / "saved")
    assert loaded.model_cfg == model.model_cfg and loaded.encoder.codes == ["[COCITE]"]
    assert torch.equal(loaded.encode(PAPERS).emb, model.encode(PAPERS).emb)


# ---- a query-scope adapter (SPECTER2's ad-hoc query adapter) -------------------------------------------
def query_adapted(path) -> ContextualSentenceEncoder:
    encoder = load(path)
    encoder.add_adapters("lora", ["query"], scope="query", r=4, alpha=8.0)
    perturb_adapters(encoder)
    return encoder


def test_query_adapter_is_off_for_papers_and_on_only_for_queries(tiny_model_dir, tmp_path):
    from aspire.encoders import load_encoder

    base = load(tiny_model_dir)
    encoder = query_adapted(tiny_model_dir)
    papers = encoder.encode(PAPERS).emb
    assert torch.equal(papers, base.encode(PAPERS).emb)  # papers: the base encoder's vectors, bit for bit
    paper_print = encoder.fingerprint()
    with encoder.query_side():
        queries = encoder.encode(PAPERS).emb
        query_print = encoder.fingerprint()
    assert not torch.allclose(queries, papers, atol=1e-4) and query_print != paper_print
    assert torch.equal(encoder.encode(PAPERS).emb, papers) and encoder.fingerprint() == paper_print  # off again
    encoder.save_pretrained(tmp_path / "m")
    settings = json.loads((tmp_path / "m" / SETTINGS_FILE).read_text())["adapter"]
    assert settings == {"kind": "lora", "names": ["query"], "scope": "query"}
    again = load(tmp_path / "m")
    assert torch.equal(again.encode(PAPERS).emb, papers)
    with again.query_side():
        assert torch.allclose(again.encode(PAPERS).emb, queries, atol=1e-6)
    with pytest.raises(ValueError, match="query-scope adapter applies to queries only"):
        again.merged()
    with pytest.raises(ValueError, match="exact torch backend only"):
        load_encoder(tmp_path / "m", quantize="bf16")
    plain = load(tiny_model_dir)  # no adapter: query_side changes nothing
    with plain.query_side():
        assert torch.equal(plain.encode(PAPERS).emb, papers)
    with pytest.raises(ValueError, match="one adapter named 'query'"):
        load(tiny_model_dir).add_adapters("lora", ["default"], scope="query")


QUERY_SCOPE = ("model.kind=abstract", "loss.kind=mnrl", "model.adapter.kind=lora", "model.adapter.r=4",
               "model.adapter.scope=query", "train.max_steps=3", "train.eval_every=3")


@pytest.mark.parametrize("kind", ["abstract", "max"])  # whole texts split by rows; sentence inputs passed whole
def test_query_adapter_trains_on_anchors_only_and_keeps_the_papers(kind, tiny_model_dir, examples_dir, tmp_path):
    from aspire.encoders import load_encoder

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", *QUERY_SCOPE, f"model.kind={kind}")
    model = build_model(cfg)
    assert list(model.encoder.model.peft_config) == ["query"] and not model.encoder.query_on
    perturb_adapters(model.encoder)
    data = load_split(cfg.data, "train")
    batch = TripletCollator(model.tokenize, data.papers)([data[i] for i in range(0, 24, 3)])
    model.eval()  # no dropout: the sides can be compared with plain encodings
    docs = model._embed_query_side(batch.inputs, len(batch))
    with torch.no_grad():
        off = model.embed(batch.inputs)
        with model.encoder.query_side():
            on = model.embed(batch.inputs)
    B = len(batch)
    assert torch.allclose(docs.emb[:B], on.emb[:B], atol=1e-5) and torch.allclose(docs.emb[B:], off.emb[B:], atol=1e-5)
    assert not torch.allclose(on.emb[:B], off.emb[:B], atol=1e-4)
    model.train()
    model(batch)["loss"].backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    lora = [n for n in grads if "lora_" in n]
    assert lora and any(grads[n] is not None and float(grads[n].abs().sum()) > 0 for n in lora)
    assert all(grads[n] is None for n in grads if "lora_" not in n)  # base frozen
    assert run(cfg)["step"] == 3
    out = tmp_path / "run"
    saved = out / ckpt.read_pointer(out)["checkpoint"] / ckpt.MODEL_DIR
    trained, base = load_encoder(saved), load_encoder(tiny_model_dir)
    encode = (lambda enc: enc.encode_abstract(PAPERS)) if kind == "abstract" else (lambda enc: enc.encode(PAPERS).emb)
    expected = encode(base)
    assert torch.equal(encode(trained), expected)  # papers untouched by training
    with trained.query_side():
        assert not torch.allclose(encode(trained), expected, atol=1e-5)


def test_context2doc_encodes_its_queries_with_the_query_adapter(tiny_model_dir, tmp_path):
    from test_benchmarks import tiny_context2doc

    from aspire.encoders import load_encoder
    from aspire.evaluate.context2doc_run import dense_scores
    from aspire.evaluate.encode import encode_papers
    from aspire.evaluate.options import EvalOptions
    from aspire.evaluate.rank import get_eval_scorer

    query_adapted(tiny_model_dir).save_pretrained(tmp_path / "m")
    bench = tiny_context2doc(tmp_path)
    scores, _ = dense_scores(bench, str(tmp_path / "m"), "abstract", EvalOptions(cache_dir=tmp_path / "cache"))
    adapted, base = load_encoder(tmp_path / "m"), load_encoder(tiny_model_dir)
    queries = [Paper(qid, "", [text]) for qid, text in bench.queries.items()]
    with adapted.query_side():
        qb, _ = encode_papers(adapted, queries, "abstract")
    cb, _ = encode_papers(base, bench.candidates, "abstract")  # the papers: the base model's vectors
    expected = get_eval_scorer("abstract").score(qb, cb)
    assert scores == pytest.approx(expected.numpy(), abs=1e-5)
    plain, _ = dense_scores(bench, str(tiny_model_dir), "abstract", EvalOptions(cache_dir=tmp_path / "cache"))
    assert not scores == pytest.approx(plain, abs=1e-4)
    again, _ = dense_scores(bench, str(tmp_path / "m"), "abstract", EvalOptions(cache_dir=tmp_path / "cache"))  # from the cache
    assert again == pytest.approx(scores, abs=1e-6)


# ---- task codes and adapters in multi-task runs ---------------------------------------------------------
CROP_TASK = "{name: crop, sources: [cocite], benchmarks_dir: null, dev_share: 0.4, span_max: 2}"


@pytest.mark.parametrize("kind", ["abstract", "max"])
def test_each_paper_of_a_mixed_batch_gets_its_own_tasks_code(kind, tiny_model_dir, examples_dir, tmp_path):
    from aspire.train.tasks import build_tasks

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, f"model.kind={kind}", "loss.kind=mnrl",
                      "model.control_codes=task", f"tasks=[{{name: cocite}}, {CROP_TASK}]", "mix.mode=mixed")
    model = build_model(cfg)
    assert model.tasks == ["cocite", "crop"] and model.encoder.codes == ["[COCITE]", "[CROP]"]
    data = build_tasks(cfg, "train")
    examples = [data.examples[0], data.examples[data.offsets[1]]]  # one pair of each task
    batch = TripletCollator(model.tokenize, data.papers, data.weights, data.sources, ["cocite", "crop"])(examples)
    assert batch.task is None  # two tasks: no one adapter
    tok = model.encoder.tokenizer
    cocite, crop = tok.convert_tokens_to_ids("[COCITE]"), tok.convert_tokens_to_ids("[CROP]")
    ids = batch.inputs.encoding["input_ids"] if kind == "abstract" else batch.inputs.input_ids
    paper_of_row = torch.arange(len(ids)) if kind == "abstract" else batch.inputs.row_paper
    expected = torch.tensor([cocite, crop, cocite, crop])[paper_of_row]  # anchors, then positives
    assert torch.equal(ids[:, 1], expected) and (ids[:, 0] == tok.cls_token_id).all()
    plain = model.tokenize([data.papers[examples[0].query_id]])  # no tasks given: the encoder's own code
    assert (plain.encoding["input_ids"] if kind == "abstract" else plain.input_ids)[0, 1] == cocite
    assert torch.isfinite(model(batch)["loss"])


def test_abstract_kind_trains_with_the_code_it_is_scored_with(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=abstract", "model.control_codes=task")
    model = build_model(cfg).eval()
    with torch.no_grad():
        trained = model.embed(model.tokenize(PAPERS)).emb[:, 0]
    scored = model.encoder.encode_abstract(PAPERS, joiner=cfg.abstract.joiner, normalize=cfg.abstract.normalize)
    assert torch.allclose(trained, scored, atol=1e-5)


def test_per_task_adapters_need_batches_of_one_task(tiny_model_dir, examples_dir, tmp_path):
    common = ("model.kind=abstract", "loss.kind=mnrl", "model.adapter.kind=lora", "model.adapter.per_task=true",
              "model.control_codes=task", f"tasks=[{{name: cocite}}, {CROP_TASK}]")
    with pytest.raises(ConfigError, match="mix.mode alternating or sequential"):
        build_model(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", *common, "mix.mode=mixed"))
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", *common, "mix.mode=alternating")
    assert run(cfg)["step"] > 0
    out = Path(cfg.train.out_dir)
    saved = DocumentModel.from_pretrained(out / ckpt.read_pointer(out)["checkpoint"] / ckpt.MODEL_DIR)
    assert saved.tasks == ["cocite", "crop"] and list(saved.encoder.model.peft_config) == ["cocite", "crop"]
    assert saved.encoder.code == "[COCITE]" and saved.encoder.model.active_adapter == "cocite"


# ---- config errors ------------------------------------------------------------------------------------
BAD_FORMAT_VALUES = {"model.control_codes": "facets", "model.adapter.kind": "bottleneck", "model.adapter.r": 0,
                     "model.adapter.rank": 4}


@pytest.mark.parametrize("key", sorted(BAD_FORMAT_VALUES))
def test_bad_format_config_names_the_key(key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(Config, None, [f"{key}={BAD_FORMAT_VALUES[key]}"])


@pytest.mark.parametrize("extra", [["model.adapter.kind=none"], ["model.adapter.kind=lora", "model.adapter.per_task=true"]])
def test_query_scope_needs_one_shared_adapter(extra):
    with pytest.raises(ConfigError, match=r"model\.adapter\.scope=query needs one shared adapter"):
        load_config(Config, None, ["model.adapter.scope=query", *extra])
    with pytest.raises(ConfigError, match=r"model\.control_codes=task with model\.adapter\.scope=query"):
        load_config(Config, None, ["model.adapter.scope=query", "model.adapter.kind=lora", "model.control_codes=task"])


def test_codes_with_ia3_are_refused_naming_both_keys():
    with pytest.raises(ConfigError, match=r"model\.control_codes=facet with model\.adapter\.kind=ia3"):
        load_config(Config, None, ["model.control_codes=facet", "model.adapter.kind=ia3"])


def test_merged_export_cli_writes_a_plain_model_with_the_same_outputs(tiny_model_dir, examples_dir, tmp_path, capsys):
    from aspire.train.export import main as export_main

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=max", "model.adapter.kind=lora")
    model = build_model(cfg)
    perturb_adapters(model.encoder)
    model.save_pretrained(tmp_path / "adapted")
    assert export_main(["--model", str(tmp_path / "adapted"), "--out", str(tmp_path / "merged"), "--quiet"]) == 0
    assert not (tmp_path / "merged" / ADAPTER_DIR).exists()
    assert type(AutoModel.from_pretrained(tmp_path / "merged")).__name__ == "BertModel"
    merged = DocumentModel.from_pretrained(tmp_path / "merged")
    assert merged.model_cfg.adapter.kind == "none" and merged.inference_name == model.inference_name
    assert torch.allclose(merged.encode(PAPERS).emb, model.encode(PAPERS).emb, atol=1e-5)
    assert export_main(["--model", str(tmp_path / "merged"), "--out", str(tmp_path / "again"), "--quiet"]) == 2
    assert "has no adapter to merge: it is a plain model already" in capsys.readouterr().err
    # --adapter-only on a plain folder (no settings file at all): the same words, not a missing-file error
    assert export_main(["--model", str(tiny_model_dir), "--adapter-only", str(tiny_model_dir), "--out",
                        str(tmp_path / "adapter"), "--quiet"]) == 2
    assert f"{tiny_model_dir} has no adapter (no 'adapter' in a " in capsys.readouterr().err
