"""Round 40: CoSentBert's inputs checked before any model loads, and its pairs, dev metric and seeded runs checked
against hand computations."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

from aspire.config import ConfigError
from aspire.encoders.cosentbert import (
    CoSentBertConfig,
    context_pairs,
    evaluate_contexts,
    load_sentence_model,
    main,
    same_set_retrieval,
    train_cosentbert,
)
from tests.test_cosentbert import WORDS


def _group(set_id: str, texts: list[str]) -> dict:
    return {"set_id": set_id, "paper_ids": set_id.split("|"), "contexts": texts, "contexts_clean": texts}


def _write(path: Path, groups: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(g) + "\n" for g in groups))
    return path


def _examples(tmp_path: Path, dev: bool = True) -> Path:
    d = tmp_path / "examples"
    _write(d / "groups.train.jsonl", [_group(f"p{i}|q{i}", [f"{WORDS[i]} {WORDS[i + 1]}", f"{WORDS[i]} data",
                                                          f"the {WORDS[i]} text"]) for i in range(6)])
    if dev:
        _write(d / "groups.dev.jsonl", [_group(f"r{i}|s{i}", [f"{WORDS[i]} a", f"{WORDS[i]} of"]) for i in range(3)])
    return d


def test_evaluate_contexts_refuses_an_unknown_text_field(tmp_path, tiny_model_dir):
    """`paper_ids` is a list of strings too: it was encoded and scored as if it were the contexts."""
    path = _write(tmp_path / "groups.dev.jsonl", [_group("A|B", ["a one", "a two"]), _group("C|D", ["c one", "c two"])])
    model = load_sentence_model(tiny_model_dir, 16)
    with pytest.raises(ValueError, match=r"unknown text_field 'paper_ids'; valid: \['contexts_clean', 'contexts'\]"):
        evaluate_contexts(model, path, "paper_ids")
    assert evaluate_contexts(model, path, "contexts")["contexts"] == 4


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_context_pairs_refuses_a_cap_below_one(tmp_path, bad):
    """0 gave no pair from any set (training then said "no set has two contexts"); -1 failed inside random.sample."""
    path = _write(tmp_path / "groups.train.jsonl", [_group("A|B", ["a1", "a2", "a3"])])
    with pytest.raises(ValueError, match=r"max_pairs_per_set must be an integer >= 1, got "):
        context_pairs(path, "contexts_clean", max_pairs_per_set=bad)
    assert len(context_pairs(path, "contexts_clean", max_pairs_per_set=1)) == 1


@pytest.mark.parametrize("field, value", [("epochs", 0.0), ("batch_size", 1), ("warmup", 2.0), ("epochs", float("nan"))])
def test_train_checks_a_config_built_in_python_before_loading_the_model(tmp_path, field, value):
    """As `load_config` checks a file's fields: epochs=0 divided by zero after the model loaded, batch_size=1 trained
    on a loss of exactly 0 (no in-batch negative), warmup=2 was read as 1."""
    cfg = CoSentBertConfig(base_model=str(tmp_path / "no-model"), **{field: value})
    with pytest.raises(ConfigError, match=f"^{field}: must be"):
        train_cosentbert(_examples(tmp_path), tmp_path / "out", cfg)
    with pytest.raises(ValueError, match="unknown text_field 'paper_ids'"):
        train_cosentbert(_examples(tmp_path), tmp_path / "out",
                         CoSentBertConfig(base_model=str(tmp_path / "no-model"), text_field="paper_ids"))


def test_train_command_refuses_a_missing_dev_split_before_loading_the_model(tmp_path, capsys):
    d = _examples(tmp_path, dev=False)
    argv = ["train", "--examples", str(d), "--out", str(tmp_path / "out"), f"base_model={tmp_path / 'no-model'}", "-q"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"error: no groups.dev.jsonl in --examples (a split folder of `aspire data`): "
                                       f"{d / 'groups.dev.jsonl'}\n")
    assert not (tmp_path / "out").exists()


def test_pairs_are_every_distinct_pair_of_a_set_and_never_a_text_with_itself(tmp_path):
    groups = [_group("A|B", ["x", "y", "x", "z"]), _group("C|D", ["w"]), _group("E|F", ["x", "v"])]
    path = _write(tmp_path / "groups.train.jsonl", groups)
    pairs = context_pairs(path, "contexts_clean", max_pairs_per_set=10)
    expected = [(a, b, g["set_id"]) for g in groups
                for a, b in itertools.combinations(list(dict.fromkeys(g["contexts_clean"])), 2)]
    assert pairs == expected
    assert all(a != b for a, b, _ in pairs)


def test_same_set_retrieval_equals_a_hand_computation():
    # rows 0,1 set A; rows 2,3 set B; row 4 set C alone (no query)
    emb = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
    # cosines: row0 -> 2 (0.8) beats 1 (0.6): rank 2; row1 -> 2 (0.96) beats 0 (0.6) and 3 (0.8): rank 3;
    # row2 -> 1 (0.96) and 0 (0.8) beat 3 (0.6): rank 3; row3 -> 1 (0.8) beats 2 (0.6): rank 2
    out = same_set_retrieval(emb * 3.0, ["A", "A", "B", "B", "C"])
    assert out["queries"] == 4 and out["acc@1"] == 0.0
    assert out["mrr"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 3 + 1 / 2) / 4)


def test_the_same_seed_trains_the_same_model(tmp_path, tiny_model_dir):
    d = _examples(tmp_path)
    cfg = CoSentBertConfig(base_model=str(tiny_model_dir), epochs=1, batch_size=4, learning_rate=1e-3,
                           max_seq_length=16, logging_steps=1)
    r1 = train_cosentbert(d, tmp_path / "o1", cfg)
    r2 = train_cosentbert(d, tmp_path / "o2", cfg)
    assert r1["loss_history"] == r2["loss_history"] and r1["steps"] == r2["steps"] > 0
    s1 = load_sentence_model(tmp_path / "o1" / "model").state_dict()
    s2 = load_sentence_model(tmp_path / "o2" / "model").state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
