"""Round 37: task formats (control codes, per-task adapters) checked against encodings without a code, brute
force, and the configs that cannot work."""

from __future__ import annotations

import pytest
import torch

from aspire.config import ConfigError
from aspire.data.papers import Paper
from aspire.encoders import ContextualSentenceEncoder
from aspire.encoders.codes import add_control_codes, code_id, codes_for, encoding_with_code, with_code
from aspire.train.config import AdapterConfig, Config, MixConfig, ModelConfig, TaskConfig
from aspire.train.task_formats import check_formats, use_task

LONG = Paper("long", "a model of text", ["we propose a new method for text similarity.",
                                          "results show the model improves performance on two tasks.",
                                          "the approach is based on neural network language models.",
                                          "we show state of the art results on scientific document similarity."])
SHORT = Paper("short", "citation", ["short one."])


def load(path, **settings) -> ContextualSentenceEncoder:
    return ContextualSentenceEncoder.from_pretrained(path, **settings)


def test_code_is_one_column_at_position_one_and_no_piece_changes_sentence(tiny_model_dir):
    """A coded window of max_length L equals the uncoded window of L - 1 with the code put in column 1."""
    plain = load(tiny_model_dir, max_length=23)
    coded = load(tiny_model_dir, max_length=24)
    coded.add_codes(["[COCITE]", "[CROP]"], "[COCITE]")
    a, b = plain.tokenize([LONG, SHORT]), coded.tokenize([LONG, SHORT])
    assert len(a.row_paper) >= 3 and torch.equal(a.row_paper, b.row_paper)  # LONG overflows into windows
    assert b.input_ids.shape[1] == a.input_ids.shape[1] + 1 <= 24
    keep = [0, *range(2, b.input_ids.shape[1])]
    assert torch.equal(b.input_ids[:, keep], a.input_ids)
    assert torch.equal(b.sent_index[:, keep], a.sent_index)
    assert torch.equal(b.attention_mask[:, keep], a.attention_mask)
    assert (b.input_ids[:, 1] == code_id(coded.tokenizer, "[COCITE]")).all()
    assert (b.sent_index[:, 1] == -1).all() and (b.attention_mask[:, 1] == 1).all()
    if b.token_type_ids is not None:
        assert (b.token_type_ids[:, 1] == 0).all()


def test_per_paper_codes_follow_each_window_to_its_paper(tiny_model_dir):
    coded = load(tiny_model_dir, max_length=24)
    coded.add_codes(["[COCITE]", "[CROP]"], "[COCITE]")
    inputs = coded.tokenize([LONG, SHORT], codes=["[CROP]", "[COCITE]"])
    want = [["[CROP]", "[COCITE]"][p] for p in inputs.row_paper.tolist()]  # brute force: row -> paper -> code
    assert coded.tokenizer.convert_ids_to_tokens(inputs.input_ids[:, 1].tolist()) == want
    with pytest.raises(ValueError, match="3 control codes for 2 papers"):
        with_code(coded.tokenize([LONG, SHORT]), coded.tokenizer, ["[CROP]"] * 3)


def test_coded_windows_fit_the_model_limit_and_encode(tiny_model_dir):
    """At the model's own limit (128 positions) a coded window is 128 long, never 129."""
    coded = load(tiny_model_dir)
    coded.add_codes(["[COCITE]"], "[COCITE]")
    big = Paper("big", "title", ["the model of text and data " * 12 + "."] * 6)
    inputs = coded.tokenize([big])
    assert inputs.input_ids.shape[1] == coded.max_length == 128
    assert len(inputs.row_paper) > 1
    docs = coded(inputs)  # 129 positions would be an index error in the position embeddings
    assert torch.isfinite(docs.emb).all()
    vecs = coded.embed_texts(["the model of text " * 60])
    assert torch.isfinite(vecs).all()
    enc = coded.tokenizer(["a model"], return_tensors="pt")
    out = encoding_with_code(dict(enc), coded.tokenizer, "[COCITE]")
    assert out["input_ids"][0].tolist() == [enc["input_ids"][0, 0].item(), code_id(coded.tokenizer, "[COCITE]"),
                                            *enc["input_ids"][0, 1:].tolist()]


def test_left_padded_inputs_are_refused(tiny_model_dir):
    coded = load(tiny_model_dir)
    coded.add_codes(["[COCITE]"], "[COCITE]")
    tok = coded.tokenizer
    tok.padding_side = "left"
    enc = tok(["a", "the model of text"], padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match="start with"):
        encoding_with_code(dict(enc), tok, "[COCITE]")


def test_new_code_starts_at_the_mean_of_its_names_pieces(tiny_model_dir):
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(tiny_model_dir), AutoModel.from_pretrained(tiny_model_dir)
    before = model.get_input_embeddings().weight.detach().clone()
    assert add_control_codes(model, tok, ["[METHOD]", "[COCITE]", "[METHOD]"]) == ["[METHOD]", "[COCITE]"]
    after = model.get_input_embeddings().weight
    assert after.shape[0] == len(tok) == before.shape[0] + 2 and torch.equal(after[: before.shape[0]], before)
    for code in ("[METHOD]", "[COCITE]"):
        pieces = tok(code.strip("[]").lower(), add_special_tokens=False)["input_ids"]
        assert torch.allclose(after[code_id(tok, code)], before[pieces].mean(0))
    assert add_control_codes(model, tok, ["[METHOD]"]) == []  # already there: nothing added


def test_unknown_codes_and_tasks_are_refused_naming_the_valid_ones(tiny_model_dir):
    coded = load(tiny_model_dir)
    size = len(coded.tokenizer)
    with pytest.raises(ValueError, match=r"\[COCITE\]"):
        coded.add_codes(["[COCITE]"], "[CROP]")
    assert len(coded.tokenizer) == size and coded.codes == []  # refused before anything was added
    coded.add_codes(["[COCITE]", "[CROP]"], "[COCITE]")
    with pytest.raises(ValueError, match=r"\[CROP\]"):
        coded.set_code("[TITLE]")
    with pytest.raises(ValueError, match=r"\[CROP\]"), coded.using_code("[TITLE]"):
        pass
    assert coded.code == "[COCITE]"
    with pytest.raises(ValueError, match="valid"):
        codes_for("tasks", ["cocite"])
    cfg = ModelConfig(control_codes="task")
    with pytest.raises(ValueError, match=r"\[CROP\]"):
        use_task(coded, cfg, "author")
    use_task(coded, cfg, "crop")
    assert coded.code == "[CROP]"


def test_saved_and_reloaded_encoder_keeps_its_codes_and_vectors(tiny_model_dir, tmp_path):
    coded = load(tiny_model_dir, max_length=24)
    coded.add_codes(["[COCITE]", "[CROP]"], "[CROP]")
    coded.save_pretrained(tmp_path / "m")
    back = load(tmp_path / "m")
    assert back.codes == ["[COCITE]", "[CROP]"] and back.code == "[CROP]" and back.max_length == 24
    assert code_id(back.tokenizer, "[CROP]") == code_id(coded.tokenizer, "[CROP]")
    assert torch.equal(back.encode([LONG, SHORT]).emb, coded.encode([LONG, SHORT]).emb)


def _cfg(mode: str, names: list[str], per_task: bool = True) -> Config:
    tasks = [TaskConfig(name=n, **({"sources": ["acl"]} if i else {})) if n == "crop" else TaskConfig(name=n)
             for i, n in enumerate(names)]
    return Config(tasks=tasks, mix=MixConfig(mode=mode),
                  model=ModelConfig(adapter=AdapterConfig(kind="lora", per_task=per_task)))


def test_per_task_adapters_refuse_a_mixed_batch_before_training():
    with pytest.raises(ConfigError, match="alternating or sequential"):
        check_formats(_cfg("mixed", ["cocite", "crop"]))
    check_formats(_cfg("mixed", ["cocite"]))  # one task: every batch is of it
    check_formats(_cfg("alternating", ["cocite", "crop"]))
    check_formats(_cfg("mixed", ["cocite", "crop"], per_task=False))


def test_per_task_adapters_refuse_two_tasks_of_one_name_before_the_model_loads():
    """Two crop tasks (two sources) would need two adapters both named crop: refused when the config loads, not
    later by peft's adapter naming once the model is loaded; since round 68 with one shared adapter too (the tasks
    would not build: each task may appear once)."""
    for per_task in (True, False):
        with pytest.raises(ConfigError, match=r"each task may appear once, got \['crop', 'crop'\]"):
            _cfg("alternating", ["crop", "crop"], per_task=per_task)
