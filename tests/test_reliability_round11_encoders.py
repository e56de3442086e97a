"""Round 11 correctness sweep of the encoders' fast backends and model plumbing: fast backends against the exact
torch path (fresh and from a load record), the export cache's key, the recorded tokenizer against transformers,
the automatic backend choice, control codes, adapters and model names."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder, backends, load_encoder

LONG = " ".join(["The document similarity of scientific text is based on citation data."] * 6)
PAPERS = [
    Paper("p1", "A new model", ["We propose a new model.", "It improves the results, e.g. on text.", "Fig 2."]),
    Paper("p2", "Citation similarity", ["The document similarity of scientific text is based on citation data."]),
    Paper("p3", "", ["Data.", "The paper show results."]),
    Paper("p4", "Only a title", []),
    Paper("long", "A long abstract", [LONG, "We show results.", LONG, "Two new methods improve performance.", LONG,
                                      "Café naïve résumé."]),
]


def max_gap(a, b) -> float:
    """The largest difference of two DocBatches' sentence vectors, after checking that they hold the same papers,
    sentences and masks in the same order."""
    assert a.paper_ids == b.paper_ids and a.sentences == b.sentences and torch.equal(a.mask, b.mask)
    return float((a.emb - b.emb).abs().max())


def copy_model(tiny_model_dir, path):
    shutil.copytree(tiny_model_dir, path)
    return path


# ---- the export cache -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fingerprinted", [True, False])
def test_an_export_is_not_reused_for_a_model_whose_config_changed(fingerprinted, tiny_model_dir, tmp_path, cache,
                                                                  caplog, monkeypatch):
    """The version-1 fingerprint hashed weights and settings, not the architecture: a model whose config.json changed
    (here its activation; its attention heads alike) kept the fingerprint, and ONNX Runtime ran the graph of the old
    config. Version 2 hashes the activation (another fingerprint, another graph); a field its list lacks
    (`fingerprinted=False`: the activation taken off the list) is still caught by the graph's config hash."""
    from aspire.encoders import identity

    if not fingerprinted:
        monkeypatch.setattr(identity, "ENCODING_CONFIG", tuple(k for k in identity.ENCODING_CONFIG if k != "hidden_act"))
    folder = copy_model(tiny_model_dir, tmp_path / "model")
    first = load_encoder(folder, backend="onnx")
    before = load_encoder(folder).fingerprint()
    assert max_gap(load_encoder(folder).encode(PAPERS), first.encode(PAPERS)) < 1e-5
    config = json.loads((folder / "config.json").read_text())
    config["hidden_act"] = "relu"
    (folder / "config.json").write_text(json.dumps(config))
    exact = load_encoder(folder)
    want = exact.encode(PAPERS)
    assert max_gap(want, first.encode(PAPERS)) > 1e-3  # the change matters
    caplog.set_level("WARNING", logger="aspire.encoders.backends")
    for _ in range(2):  # exported again, then read from the load record
        fast = load_encoder(folder, backend="onnx")
        assert max_gap(want, fast.encode(PAPERS)) < 1e-5
    assert ("exported for a model config" in caplog.text) is not fingerprinted
    assert (exact.fingerprint() != before) is fingerprinted
    path = backends.onnx_model_path(exact.fingerprint(), None)
    assert backends._graph_problem(path, exact.model, backends.config_digest(exact.model.config)) is None


def test_config_digest_ignores_where_the_model_was_read_from(tiny_model_dir, tmp_path):
    a = ContextualSentenceEncoder.from_pretrained(tiny_model_dir).model.config
    b = ContextualSentenceEncoder.from_pretrained(copy_model(tiny_model_dir, tmp_path / "elsewhere")).model.config
    assert backends.config_digest(a) == backends.config_digest(b)
    b.num_attention_heads = 2
    assert backends.config_digest(a) != backends.config_digest(b)


# ---- fast backends against the exact path -----------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_fast_backends_match_the_exact_model_with_codes_titles_and_windows_fresh_and_recorded(
        tiny_model_dir, tmp_path_factory, cache, backend):
    """Same papers, sentences, masks and order; vectors within fp32 arithmetic; with a control code in force, the title
    as sentence 0, continuation windows (max_length 24), per query code; the second load reads the load record."""
    from aspire.encoders.codes import codes_for

    folder = tmp_path_factory.getbasetemp() / "coded-model"
    if not folder.exists():
        coded = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, include_title=True, max_length=24)
        coded.add_codes(*codes_for("facet", []))
        with torch.no_grad():  # distinct code embeddings, so that a wrong code shows
            coded.model.get_input_embeddings().weight[-len(coded.codes):].normal_(0, 1)
        coded.save_pretrained(folder)
    exact = load_encoder(folder)
    assert exact.code == "[DOC]" and exact.include_title and exact.max_length == 24
    want = exact.encode(PAPERS, batch_size=2)
    assert exact.truncation_report(PAPERS)  # the long paper runs over into further windows
    fresh = load_encoder(folder, backend=backend)
    recorded = load_encoder(folder, backend=backend)
    assert recorded.recorded_fingerprint == fresh.fingerprint() == recorded.fingerprint()
    for fast in (fresh, recorded):
        assert max_gap(want, fast.encode(PAPERS, batch_size=3)) < 1e-5
        with exact.using_code("[METHOD]"), fast.using_code("[METHOD]"):
            assert max_gap(exact.encode(PAPERS), fast.encode(PAPERS)) < 1e-5
        texts, pairs = [p.title or "x" for p in PAPERS], [" ".join(p.sentences) or "y" for p in PAPERS]
        assert torch.allclose(exact.embed_texts(texts, pairs), fast.embed_texts(texts, pairs), atol=1e-5)


def test_a_code_is_never_pooled_into_a_sentence(tiny_model_dir):
    from aspire.encoders.codes import code_id

    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    encoder.add_codes(["[X]"], "[X]")
    inputs = encoder.tokenize(PAPERS)
    code = inputs.input_ids == code_id(encoder.tokenizer, "[X]")
    assert code[:, 1].all() and code.sum() == len(inputs.input_ids)  # one code a window, after [CLS]
    assert (inputs.sent_index[code] == -1).all()
    with encoder.using_code(None):
        plain = encoder.tokenize(PAPERS)

    def pieces(enc, paper: int) -> list[tuple[int, int]]:  # (sentence, word piece) of a paper over its windows
        rows = (enc.row_paper == paper).nonzero().flatten().tolist()
        return [(s, i) for r in rows for s, i in zip(enc.sent_index[r].tolist(), enc.input_ids[r].tolist()) if s >= 0]

    # every sentence keeps its word pieces with and without the code (the windows hold one piece fewer)
    assert len(inputs.input_ids) > len(PAPERS)
    for paper in range(len(PAPERS)):
        assert pieces(inputs, paper) == pieces(plain, paper)


# ---- the recorded tokenizer -------------------------------------------------------------------------------------
ALPHABET = (list("abcdefghijklmnopqrstuvwxyz  .,;:-()[]0123456789")
            + list("ÉéèàçñüößøÅ→α∑—–“”’…\u00a0\u200b\u0301\t\n") + ["[SEP]", "[CLS]", "日本語", "🙂", "e.g.", " et al. "])


def tokenizer_folders(tiny_model_dir):
    from aspire.encoders.pretrained import resolve_model

    folders = [tiny_model_dir]
    try:
        folders.append(resolve_model("minilm"))
    except FileNotFoundError:
        pass
    return folders


def as_lists(encoding) -> dict:
    return {key: value.tolist() if hasattr(value, "tolist") else value for key, value in encoding.items()}


def test_the_recorded_tokenizer_encodes_random_texts_as_transformers(tiny_model_dir):
    from transformers import AutoTokenizer

    from aspire.encoders import recorded_tokenizer

    rnd = random.Random(0)
    text = lambda n: "".join(rnd.choice(ALPHABET) for _ in range(n))  # noqa: E731
    for folder in tokenizer_folders(tiny_model_dir):
        reference = AutoTokenizer.from_pretrained(folder)
        spec = recorded_tokenizer.record_spec(reference)
        assert spec is not None
        recorded = recorded_tokenizer.rebuild(json.loads(json.dumps(spec)))  # as a load record holds it
        assert len(recorded) == len(reference)
        assert recorded.num_special_tokens_to_add(pair=True) == reference.num_special_tokens_to_add(pair=True)
        for _ in range(12):
            n = rnd.randint(1, 5)
            titles, texts = [text(rnd.randint(1, 30)) for _ in range(n)], [text(rnd.randint(0, 900)) for _ in range(n)]
            length = rnd.choice([16, 40, 128])
            calls = [
                dict(text=titles, add_special_tokens=False, return_offsets_mapping=True),
                dict(text=[t[:8] for t in titles], text_pair=texts, truncation="only_second", max_length=length,
                     stride=0, return_overflowing_tokens=True, return_offsets_mapping=True, padding=True),
                dict(text=texts, truncation=True, max_length=length, padding=True, return_tensors="pt"),
                dict(text=titles, text_pair=texts, truncation="longest_first", max_length=length, padding=True,
                     return_tensors="pt"),
            ]
            for call in calls:
                want, got = reference(**call), recorded(**call)
                assert as_lists(want) == as_lists(got), (folder, call)
                assert all(want.sequence_ids(r) == got.sequence_ids(r) for r in range(len(want["input_ids"])))


# ---- the automatic backend choice -------------------------------------------------------------------------------
def test_auto_choice_follows_its_documented_rules(tmp_path, tiny_model_dir):
    from aspire.encoders.choice import choose_backend

    native, plain = tmp_path / "native", tmp_path / "plain"
    native.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile\n")
    plain.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16x\n")  # a flag that only starts alike
    fast = choose_backend(str(tiny_model_dir), None, native, openvino_installed=True)
    assert (fast.backend, fast.quantize) == ("openvino", "bf16") and fast.options() == {"backend": "openvino",
                                                                                        "quantize": "bf16"}
    assert "avx512_bf16" in fast.note and "--backend torch" in fast.note and "\n" not in fast.note
    for why, choice in [("no AMX or AVX512-BF16", choose_backend(None, None, plain, openvino_installed=True)),
                        ("not installed", choose_backend(None, None, native, openvino_installed=False)),
                        ("cannot be read", choose_backend(None, None, tmp_path / "none", openvino_installed=True)),
                        ("on cuda", choose_backend(None, "cuda", native, openvino_installed=True))]:
        assert (choice.backend, choice.quantize, choice.options()) == ("torch", None, {}) and why in choice.note


def test_a_cpu_device_with_an_index_is_the_cpu(tmp_path, monkeypatch):
    """--device cpu:0 is the CPU (torch.device('cpu:0').type == 'cpu'): auto said 'on cpu:0 (the fast backends run on
    the CPU)' and kept the exact model, and $ASPIRE_BACKEND=onnx was refused as if the device were another."""
    from aspire.encoders.choice import choose_backend, resolve_backend

    native = tmp_path / "cpuinfo"
    native.write_text("flags\t\t: amx_bf16\n")
    assert choose_backend(None, "cpu:0", native, openvino_installed=True).backend == "openvino"
    monkeypatch.setenv("ASPIRE_BACKEND", "onnx")
    assert resolve_backend(None, None, None, "cpu:0") == ("onnx", None, None)
    with pytest.raises(ValueError, match="encodes on the CPU; got --device cuda:0"):
        resolve_backend(None, None, None, "cuda:0")


# ---- control codes ----------------------------------------------------------------------------------------------
def test_query_code_picks_the_documented_code_per_facet():
    from aspire.encoders.codes import codes_for, query_code

    facet_codes, _ = codes_for("facet", [])
    task_codes, _ = codes_for("task", ["cocite"])
    for facet in ("background", "method", "result"):
        assert query_code(facet_codes, "auto", facet) == f"[{facet.upper()}]"
        assert query_code(task_codes, "auto", facet) is None  # no facet codes: the model's own code
        assert query_code(facet_codes, "none", facet) is None
        assert query_code(facet_codes, "method", facet) == "[METHOD]"  # one facet's code for every query
    assert query_code(facet_codes, "auto", "") is None
    with pytest.raises(ValueError, match=r"facet code \[RESULT\] asked for"):
        query_code(task_codes, "result", "method")


def test_add_codes_is_idempotent_and_keeps_the_vocabulary(tiny_model_dir):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    size = len(encoder.tokenizer)
    table = encoder.model.get_input_embeddings().weight.detach().clone()
    encoder.add_codes(["[METHOD]", "[DOC]"], "[DOC]")
    after = encoder.model.get_input_embeddings().weight.detach().clone()
    assert len(encoder.tokenizer) == size + 2 and torch.equal(after[:size], table)
    method = encoder.tokenizer(["method"], add_special_tokens=False)["input_ids"][0]
    assert torch.equal(after[size], table[method].mean(0))  # starts at its name's word pieces
    encoder.add_codes(["[DOC]", "[METHOD]"], "[METHOD]")
    assert len(encoder.tokenizer) == size + 2 and encoder.codes == ["[METHOD]", "[DOC]"]
    assert torch.equal(encoder.model.get_input_embeddings().weight, after) and encoder.code == "[METHOD]"


def test_a_code_given_twice_without_word_pieces_starts_at_the_mean_of_the_old_vocabulary(tiny_model_dir):
    """A code listed twice counted twice in how many rows were new: its start left the last old row out of the mean."""
    from aspire.encoders.codes import add_control_codes

    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    table = encoder.model.get_input_embeddings().weight.detach().clone()  # (V, D)
    assert add_control_codes(encoder.model, encoder.tokenizer, ["[ ]", "[ ]"]) == ["[ ]"]
    after = encoder.model.get_input_embeddings().weight.detach()
    assert after.shape[0] == table.shape[0] + 1
    assert torch.allclose(after[-1], table.mean(0), atol=1e-7)


# ---- adapters ---------------------------------------------------------------------------------------------------
def lora_b_random(model, seed: int = 3) -> None:
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "ia3_l" in name or "trainable_tokens_delta" in name:
                p.normal_(0, 0.5)


def test_a_query_adapter_is_on_for_queries_and_off_for_papers(tiny_model_dir, tmp_path):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    base = encoder.encode(PAPERS)
    encoder.add_adapters("lora", ["query"], scope="query")
    lora_b_random(encoder.model)
    papers_print = encoder.fingerprint()
    assert max_gap(base, encoder.encode(PAPERS)) == 0.0
    with encoder.query_side():
        queries = encoder.encode(PAPERS)
        assert encoder.fingerprint() != papers_print
    assert max_gap(base, queries) > 1e-2
    assert max_gap(base, encoder.encode(PAPERS)) == 0.0 and encoder.fingerprint() == papers_print
    with pytest.raises(RuntimeError, match="inside"), encoder.query_side():
        raise RuntimeError("inside")
    assert max_gap(base, encoder.encode(PAPERS)) == 0.0  # switched off again after an error
    encoder.save_pretrained(tmp_path / "query")
    loaded = load_encoder(tmp_path / "query")
    assert loaded.adapter_scope == "query" and max_gap(base, loaded.encode(PAPERS)) == 0.0
    with loaded.query_side():
        assert max_gap(queries, loaded.encode(PAPERS)) == 0.0
    with pytest.raises(ValueError, match="merged"):
        loaded.merged()


@pytest.mark.parametrize("kind", ["lora", "ia3"])
def test_merged_adapters_equal_peft_s_own_forward(tiny_model_dir, kind):
    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir, include_title=True)
    options = {}
    if kind == "lora":  # with control codes whose embeddings train beside the adapter
        encoder.add_codes(["[A]", "[B]"], "[A]")
        options = {"trainable_tokens": [encoder.tokenizer.convert_tokens_to_ids(c) for c in encoder.codes]}
    encoder.add_adapters(kind, ["first", "second"], **options)
    lora_b_random(encoder.model)
    encoder.model.set_adapter("second")
    lora_b_random(encoder.model, seed=4)
    want = encoder.encode(PAPERS)
    merged = encoder.merged()
    assert not hasattr(merged.model, "peft_config")  # a plain transformers model
    assert max_gap(want, merged.encode(PAPERS)) < 1e-5
    encoder.model.set_adapter("first")
    assert max_gap(encoder.encode(PAPERS), merged.encode(PAPERS)) > 1e-3  # the active adapter was folded in


# ---- model names ------------------------------------------------------------------------------------------------
def test_model_names_resolve_as_documented(tiny_model_dir, tmp_path):
    from aspire.encoders.pretrained import MODELS, SETTINGS_FILE, pinned_model, resolve_model
    from aspire.paths import BEST

    assert resolve_model(tiny_model_dir) == tiny_model_dir and resolve_model(str(tiny_model_dir)) == tiny_model_dir
    adapter = tmp_path / "adapter-only"
    adapter.mkdir()
    (adapter / SETTINGS_FILE).write_text(json.dumps({"base": str(tiny_model_dir)}))
    assert resolve_model(adapter) == adapter  # no config.json of its own: its base gives the weights
    run = tmp_path / "run"
    copy_model(tiny_model_dir, run / "checkpoint-000002" / "model")
    (run / BEST).write_text(json.dumps({"checkpoint": "checkpoint-000002"}))
    assert resolve_model(run) == run / "checkpoint-000002" / "model"
    assert pinned_model(str(run)) == str((run / "checkpoint-000002" / "model").absolute())
    assert pinned_model("minilm") == "minilm" and "minilm" in MODELS and "aspire-minilm" in MODELS
    (tmp_path / "empty").mkdir()
    for name in ("no-such-model", str(tmp_path / "empty")):
        with pytest.raises(ValueError, match=f"unknown model '{name}'.*no model hub is reached"):
            resolve_model(name)


def test_missing_weights_are_a_clear_error_on_every_backend(tiny_model_dir, tmp_path, cache):
    folder = copy_model(tiny_model_dir, tmp_path / "no-weights")
    (folder / "model.safetensors").unlink()
    for backend in ("torch", "onnx"):
        with pytest.raises(OSError, match="no file named model.safetensors.*no-weights"):
            load_encoder(folder, backend=backend)


def test_an_export_recorded_before_the_config_was_kept_is_used_as_it_is(tiny_model_dir, tmp_path, monkeypatch, caplog):
    """The config's hash lives in the export's record, not in the graph: the graph's bytes, and so the fast
    fingerprint every index built with it records, are those of an export made before the hash was kept."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    folder = copy_model(tiny_model_dir, tmp_path / "model")
    exact = load_encoder(folder)
    path = backends.cached_onnx_model(exact, None)
    fingerprint = load_encoder(folder, backend="onnx").fingerprint()
    record = backends.record_path(path)
    old = {k: v for k, v in json.loads(record.read_text()).items() if k != backends.CONFIG_KEY}
    record.write_text(json.dumps(old) + "\n")  # as an earlier version wrote it
    caplog.clear()
    caplog.set_level("INFO", logger="aspire.encoders.backends")
    assert backends.cached_onnx_model(exact, None) == path and "reading cached ONNX model" in caplog.text
    assert "exporting" not in caplog.text
    assert json.loads(record.read_text()) == old  # read, not exported again
    assert load_encoder(folder, backend="onnx").fingerprint() == fingerprint
