"""CoSentBert: training pairs, the distinct-set batch sampler, dev retrieval, a tiny training run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aspire.encoders.cosent_sampler import DistinctSetBatchSampler
from aspire.encoders.cosentbert import (
    CoSentBertConfig,
    context_pairs,
    evaluate_contexts,
    load_sentence_model,
    same_set_retrieval,
    train_cosentbert,
)

WORDS = "the model method result paper task data learning neural network language text sentence document".split()


def _group(set_id: str, texts: list[str]) -> dict:
    return {"set_id": set_id, "paper_ids": set_id.split("|"), "context_ids": [f"{set_id}#{i}" for i in range(len(texts))],
            "contexts": [t + " (Smith, 2000)" for t in texts], "contexts_clean": [t + " [CIT]" for t in texts]}


def _write_groups(path: Path, groups: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(g) + "\n" for g in groups))
    return path


def test_context_pairs_are_within_a_set_capped_and_seeded(tmp_path):
    groups = [_group("A|B", ["a1", "a2", "a3"]), _group("C|D", ["c1"]), _group("E|F", [f"e{i}" for i in range(6)]),
              _group("G|H", ["g1", "g1"])]
    path = _write_groups(tmp_path / "groups.train.jsonl", groups)
    pairs = context_pairs(path, "contexts_clean", max_pairs_per_set=4, seed=1)
    by_set = {}
    for a, b, sid in pairs:
        by_set.setdefault(sid, []).append((a, b))
        assert a != b and a[0] == b[0] == sid[0].lower()  # both texts come from the pair's own set
    assert {k: len(v) for k, v in by_set.items()} == {"A|B": 3, "E|F": 4}  # C|D: one text; G|H: one distinct
    assert pairs == context_pairs(path, "contexts_clean", max_pairs_per_set=4, seed=1)
    assert by_set["E|F"] != [(a, b) for a, b, s in context_pairs(path, "contexts_clean", 4, seed=2) if s == "E|F"]
    assert context_pairs(path, "contexts", 4, 1)[0][0] == "a1 (Smith, 2000)"
    with pytest.raises(ValueError, match="valid"):
        context_pairs(path, "text", 4, 1)


def test_distinct_set_batch_sampler_never_mixes_a_set_or_a_text():
    from datasets import Dataset

    groups = [f"s{i % 7}" for i in range(60)]
    anchors = [f"a{i % 25}" for i in range(60)]
    positives = [f"p{i}" for i in range(60)]
    data = Dataset.from_dict({"anchor": anchors, "positive": positives})
    sampler = DistinctSetBatchSampler(data, batch_size=5, drop_last=False, seed=3, groups=groups)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(60))  # every row exactly once
    for b in batches:
        assert len(b) <= 5
        assert len({groups[i] for i in b}) == len(b)
        assert len({anchors[i] for i in b}) == len(b)
    assert sum(len(b) == 5 for b in batches) >= 8
    assert len(sampler) == len(batches)  # the trainer runs exactly the batches the sampler yields
    sampler.set_epoch(1)
    assert list(sampler) != batches  # reshuffled each epoch
    sampler.set_epoch(0)
    assert list(sampler) == batches  # and deterministic
    with pytest.raises(ValueError, match="groups has 3 entries"):
        DistinctSetBatchSampler(data, batch_size=5, drop_last=False, groups=groups[:3])


def test_same_set_retrieval_known_answer():
    emb = torch.tensor([[1.0, 0.05], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
    labels = ["x", "x", "y", "z", "y"]
    # row 0 -> 1 (x, hit); row 1 -> 0 (x, hit); row 2: nearest 3 (z), then 4 (y) -> rank 2;
    # row 3 has no partner; row 4: nearest are 1 (x) then 3 (z)... its y-partner 2 comes third or later
    out = same_set_retrieval(emb, labels)
    assert out["queries"] == 4
    assert out["acc@1"] == pytest.approx(0.5)
    unit = torch.nn.functional.normalize(emb, dim=-1)
    sims4 = (unit @ unit[4]).tolist()
    rank4 = 1 + sum(s > sims4[2] for k, s in enumerate(sims4) if k != 4)
    assert out["mrr"] == pytest.approx((1 + 1 + 1 / 2 + 1 / rank4) / 4)
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        same_set_retrieval(emb, labels[:3])


def _examples_dir(tmp_path: Path) -> Path:
    gen = torch.Generator().manual_seed(0)

    def text(k: int) -> str:
        return " ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (6,), generator=gen)) + f" {k}"

    train = [_group(f"T{i}|U{i}", [text(3 * i + j) for j in range(3)]) for i in range(8)]
    dev = [_group(f"D{i}|E{i}", [text(100 + 2 * i + j) for j in range(2)]) for i in range(4)]
    d = tmp_path / "examples"
    _write_groups(d / "groups.train.jsonl", train)
    _write_groups(d / "groups.dev.jsonl", dev)
    return d


def test_load_sentence_model_wraps_a_plain_encoder(tiny_model_dir):
    model = load_sentence_model(tiny_model_dir, max_seq_length=16)
    emb = model.encode(["the model", "the paper"], convert_to_tensor=True)
    assert emb.shape == (2, 32) and model.max_seq_length == 16
    with pytest.raises(FileNotFoundError):
        load_sentence_model(tiny_model_dir / "missing")


def test_train_cosentbert_tiny(tmp_path, tiny_model_dir):
    d = _examples_dir(tmp_path)
    cfg = CoSentBertConfig(base_model=str(tiny_model_dir), epochs=2, batch_size=4, learning_rate=1e-3,
                           max_seq_length=16, logging_steps=1)
    before_model = load_sentence_model(tiny_model_dir, 16)
    report = train_cosentbert(d, tmp_path / "out", cfg)
    assert report["train_pairs"] == 24 and report["train_sets_with_pairs"] == 8
    assert report["steps"] >= 12 and report["loss_history"]
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in report["loss_history"])
    assert report["dev_before"]["queries"] == report["dev_after"]["queries"] == 8
    saved = load_sentence_model(tmp_path / "out" / "model")
    texts = ["the neural model", "a document"]
    moved = (saved.encode(texts, convert_to_tensor=True) - before_model.encode(texts, convert_to_tensor=True)).abs().max()
    assert moved > 1e-4  # training changed the weights, and the saved model holds them
    assert json.loads((tmp_path / "out" / "report.json").read_text())["steps"] == report["steps"]
    assert (tmp_path / "out" / "cosentbert.yaml").is_file()
    assert evaluate_contexts(saved, d / "groups.dev.jsonl")["contexts"] == 8


def test_train_cosentbert_never_batches_a_pair_against_its_version(tmp_path, tiny_model_dir, monkeypatch):
    # P05-1018 and its journal version J08-1001 (one title) are one work: the contexts of {P05-1018, X} and of
    # {J08-1001, X} cite one pair of works; the sampler saw two pairs and made each set's contexts the other's negatives
    d = _examples_dir(tmp_path)
    versions = [_group("P05-1018|X", ["entity grid coherence a", "entity grid coherence b"]),
                _group("J08-1001|X", ["entity grid coherence c", "entity grid coherence d"])]
    groups = versions + [json.loads(line) for line in (d / "groups.train.jsonl").read_text().splitlines()]
    _write_groups(d / "groups.train.jsonl", groups)
    titles = {"P05-1018": "Modeling Local Coherence", "J08-1001": "Modeling local coherence.", "X": "Centering"}
    papers = [{"paper_id": pid, "title": titles.get(pid, f"paper {pid}"), "abstract": [f"The abstract of {pid}."]}
              for pid in sorted({pid for g in groups for pid in g["paper_ids"]})]
    (d / "abstracts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in papers))
    batches = []
    pack = DistinctSetBatchSampler._pack
    monkeypatch.setattr(DistinctSetBatchSampler, "_pack", lambda self, order: (batches.append(b) or b
                                                                              for b in pack(self, order)))
    cfg = CoSentBertConfig(base_model=str(tiny_model_dir), batch_size=8, max_seq_length=16, logging_steps=1)
    train_cosentbert(d, tmp_path / "out", cfg)
    sets = [sid for _, _, sid in context_pairs(d / "groups.train.jsonl")]
    assert {i for b in batches for i in b} == set(range(len(sets)))  # (`len` packs the batches too)
    for b in batches:
        assert not {"P05-1018|X", "J08-1001|X"} <= {sets[i] for i in b}


def test_evaluate_command_prints_strict_json_when_no_dev_set_has_a_pair(tmp_path, tiny_model_dir, capsys):
    """A split whose sets hold one context each has no query: acc@1 and mrr are undefined, printed as null
    (named under "non_finite"), never as a bare NaN that strict JSON readers refuse."""
    from aspire.encoders.cosentbert import main

    d = tmp_path / "examples"
    _write_groups(d / "groups.dev.jsonl", [_group(f"a{i}|b{i}", [f"the model {WORDS[i]}"]) for i in range(3)])
    assert main(["evaluate", "--examples", str(d), "--model", str(tiny_model_dir), "-q"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"bare {name} in the JSON"))
    assert report == {"contexts": 3, "queries": 0, "acc@1": None, "mrr": None,
                      "non_finite": {"acc@1": "nan", "mrr": "nan"}}
    assert main(["evaluate", "--examples", str(d), "--split", "train", "--model", str(tiny_model_dir)]) == 2
    assert capsys.readouterr().err == f"error: no groups.train.jsonl in --examples (a split folder of `aspire data`): {d / 'groups.train.jsonl'}\n"


def test_train_refuses_an_out_folder_that_holds_an_earlier_run(tmp_path, tiny_model_dir, capsys):
    """A second `cosentbert train` into the same --out is refused before any training: the earlier model stays
    whole (training into it would replace the model and leave the earlier run's other files beside the new)."""
    from aspire.encoders.cosentbert import main

    d = _examples_dir(tmp_path)
    out = tmp_path / "out"
    (out / "model").mkdir(parents=True)
    (out / "model" / "config.json").write_text("{}")
    argv = ["train", "--examples", str(d), "--out", str(out), f"base_model={tiny_model_dir}", "epochs=1",
            "batch_size=4", "max_seq_length=16", "-q"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"error: --out {out} already holds an earlier run's files; choose another "
                                       "--out or remove that folder first\n")
    assert sorted(p.name for p in out.rglob("*")) == ["config.json", "model"]
    (out / "model" / "config.json").unlink()
    (out / "model").rmdir()
    assert main(argv) == 0  # an empty folder is a fresh one
    assert (out / "model").is_dir() and (out / "report.json").is_file()
    capsys.readouterr()
    assert main([*argv[:4], str(out / "report.json"), *argv[5:]]) == 2
    assert capsys.readouterr().err == f"error: --out {out / 'report.json'} is a file, not a folder\n"


def test_train_says_at_the_start_when_the_dev_split_cannot_be_measured(tmp_path, tiny_model_dir, caplog):
    """A dev split whose sets hold one context each: training runs, and a warning says up front that the report's
    dev acc@1 and mrr will be null (once they were null in report.json with nothing said)."""
    d = _examples_dir(tmp_path)
    _write_groups(d / "groups.dev.jsonl", [_group(f"a{i}|b{i}", [f"the model {WORDS[i]}"]) for i in range(3)])
    cfg = CoSentBertConfig(base_model=str(tiny_model_dir), epochs=1, batch_size=4, max_seq_length=16)
    with caplog.at_level("WARNING", logger="aspire.encoders.cosentbert"):
        report = train_cosentbert(d, tmp_path / "out", cfg)
    assert report["dev_after"]["queries"] == 0
    assert [r.getMessage() for r in caplog.records] == [
        f"{d / 'groups.dev.jsonl'}: no set has two contexts (3 contexts): dev retrieval cannot be measured, acc@1 "
        "and mrr will be null before and after training"]
