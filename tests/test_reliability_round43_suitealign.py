"""Round 43: sentence alignment (cc_align / abs_align / align_examples) against brute force, and `aspire evaluate
suite`'s refusals before any model or benchmark runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.align import TIE_TOLERANCE, AlignConfig, _position_limit, abs_align, align_examples, cc_align
from aspire.io import DataError
from tests.test_align import _examples_dir, _HashTeacher


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _batch(docs: list[np.ndarray]) -> DocBatch:
    return DocBatch.from_list([torch.tensor(d, dtype=torch.float32) for d in docs])


def test_cc_and_abs_align_equal_brute_force_loops_with_ties_and_padding():
    # hand-made: paper 0 repeats its best sentence (indices 1 and 3, scaled: same cosine) -> the earliest, 1;
    # paper 1 is shorter (padding) and its best sentence is the last real one
    e = np.eye(3)
    a = [np.stack([e[2], e[0] + e[1], e[2], 2 * (e[0] + e[1])]), np.stack([e[1], e[0]])]
    b = [np.stack([e[0] + e[1], e[2], e[0] + e[1]]), np.stack([e[2], e[0] + 0.1 * e[2], e[1]])]
    ctx = [np.stack([e[0], e[1]]), np.stack([e[0]])]
    for sents in (a, b):
        index, sim = cc_align(_batch(sents), _batch(ctx))
        for k, (s, c) in enumerate(zip(sents, ctx)):
            per = [max(_cos(x, y) for y in c) for x in s]  # a sentence's best cosine to any context
            want = next(i for i, v in enumerate(per) if v >= max(per) - TIE_TOLERANCE)
            assert int(index[k]) == want and float(sim[k]) == pytest.approx(per[want], abs=1e-6)
    assert cc_align(_batch(a), _batch(ctx))[0].tolist() == [1, 1]
    pair, psim = abs_align(_batch(a), _batch(b))
    for k in range(2):
        cos = [(_cos(x, y), i, j) for i, x in enumerate(a[k]) for j, y in enumerate(b[k])]
        best = max(c for c, _, _ in cos)
        want = next((i, j) for c, i, j in cos if c >= best - TIE_TOLERANCE)  # smallest i, then j
        assert tuple(pair[k].tolist()) == want and float(psim[k]) == pytest.approx(best, abs=1e-6)
    assert pair.tolist() == [[0, 1], [0, 2]]  # ties (a0~b1 and a1~b0, cos 1): smallest i


def test_alignment_refuses_a_paper_without_sentences_or_contexts():
    empty = DocBatch(emb=torch.zeros(1, 2, 3), mask=torch.zeros(1, 2, dtype=torch.bool))
    full = DocBatch(emb=torch.ones(1, 2, 3), mask=torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least one sentence"):
        cc_align(empty, full)
    with pytest.raises(ValueError, match="at least one sentence and one context"):
        cc_align(full, empty)
    with pytest.raises(ValueError, match="at least one sentence"):
        abs_align(full, empty)


@pytest.mark.parametrize("change, message", [
    ({"contexts_clean": []}, r"example P\|Q has no contexts"),
    ({"contexts_clean": ["ok", "  "]}, r"example P\|Q: contexts_clean\[1\] is blank"),
    ({"positive_id": "P"}, r"example P\|Q pairs paper 'P' with itself"),
    ({"positive_id": "X"}, r"example P\|Q: positive_id 'X' has no abstract"),
    ({"query_id": 3}, r"example P\|Q: query_id must be a string"),
])
def test_align_examples_refuses_bad_examples_naming_them(tmp_path, change, message):
    d = _examples_dir(tmp_path)
    line = json.loads((d / "examples.train.jsonl").read_text())
    (d / "examples.train.jsonl").write_text(json.dumps(line | change) + "\n")
    with pytest.raises(DataError, match=message):
        align_examples(d, _HashTeacher(), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_align_examples_refuses_a_missing_key_naming_the_line(tmp_path):
    d = _examples_dir(tmp_path)
    line = json.loads((d / "examples.train.jsonl").read_text())
    del line["positive_id"]
    (d / "examples.train.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(DataError, match=r"examples\.train\.jsonl:1.*positive_id"):
        align_examples(d, _HashTeacher(), tmp_path / "out")


class _Teacher(_HashTeacher):
    def __init__(self, model_type: str, positions: int, tokenizer_limit: int):
        super().__init__()
        config = SimpleNamespace(model_type=model_type, max_position_embeddings=positions)
        self.module = SimpleNamespace(auto_model=SimpleNamespace(config=config),
                                      tokenizer=SimpleNamespace(model_max_length=tokenizer_limit))

    def __getitem__(self, k):
        return [self.module][k]


def test_position_limit_and_max_seq_length_within_it(tmp_path):
    assert _position_limit(_Teacher("roberta", 514, 10**30)) == 512  # RoBERTa: positions start after padding
    assert _position_limit(_Teacher("bert", 512, 10**30)) == 512
    assert _position_limit(_Teacher("bert", 512, 64)) == 512  # a tokenizer's limit is the teacher's own length (round 67)
    assert _position_limit(_HashTeacher()) is None
    d = _examples_dir(tmp_path)
    teacher = _Teacher("bert", 64, 512)
    with pytest.raises(ValueError, match="align.max_seq_length=65 .* at most 64"):
        align_examples(d, teacher, tmp_path / "out", AlignConfig(max_seq_length=65))
    assert teacher.max_seq_length == 128 and not (tmp_path / "out").exists()
    align_examples(d, teacher, tmp_path / "ok", AlignConfig(max_seq_length=64))
    assert teacher.max_seq_length == 128  # restored


# ---- aspire evaluate suite ------------------------------------------------------------------------------------

def _ran(*args, **kwargs):
    raise AssertionError("a benchmark ran (a model loaded) before the options were checked")


@pytest.fixture
def no_runs(monkeypatch):
    import aspire.evaluate.ensemble as ens
    import aspire.evaluate.suite as suite

    for module, name in ((suite, "run_suite"), (ens, "run_ensemble_suite")):
        monkeypatch.setattr(module, name, _ran)
    monkeypatch.setattr("aspire.cli.evaluate.check_model", lambda name: None)


def _suite(tmp_path, *argv):
    from aspire.cli.evaluate import main

    return main(["suite", "--data", str(tmp_path), "--out", str(tmp_path / "out"), *argv])


def test_suite_refuses_unknown_benchmarks_and_left_out_ones_before_any_run(tmp_path, no_runs, capsys):
    with pytest.raises(SystemExit):
        _suite(tmp_path, "--model", "minilm", "--scorer", "minl2", "--benchmarks", "nosuch")
    assert "nosuch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _suite(tmp_path, "--model", "minilm", "--scorer", "minl2", "--benchmarks", "csfcube", "--aggregate", "mean")
    assert "--aggregate applies to the reviewers benchmark" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _suite(tmp_path, "--model", "minilm")
    assert "give --model and --scorer" in capsys.readouterr().err


def test_suite_refuses_missing_data_and_bad_out_before_any_run(tmp_path, no_runs, capsys):
    from aspire.cli.evaluate import main

    rc = _suite(tmp_path, "--model", "minilm", "--scorer", "minl2", "--benchmarks", "csfcube")
    assert rc != 0 and "csfcube" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    rc = main(["suite", "--data", str(tmp_path), "--out", str(tmp_path / "afile"), "--model", "minilm",
               "--scorer", "minl2"])
    assert rc != 0 and "afile" in capsys.readouterr().err


def test_ensemble_suite_refuses_missing_benchmark_data_before_any_member_runs(tmp_path, monkeypatch, capsys):
    """A missing folder of a later benchmark was found only after the members of those before it had run (CSFCube's
    encoders loaded and ran, then reviewer matching failed): `--model` runs checked every folder first."""
    import aspire.evaluate.ensemble as ens
    from aspire.cli.evaluate import main

    ran = []
    monkeypatch.setattr(ens, "fused_rows", lambda name, *a, **k: ran.append(name) or ([], f"{name}: stub"))
    (tmp_path / "data" / "csfcube").mkdir(parents=True)  # the first benchmark's data only
    config = tmp_path / "ens.yaml"
    config.write_text("members:\n  - {name: a, model: minilm, scorer: abstract, weight: 0.5}\n"
                      "  - {name: b, model: minilm, scorer: minl2, weight: 0.5}\n")
    argv = ["suite", "--ensemble", str(config), "--data", str(tmp_path / "data")]
    rc = main([*argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc != 0 and ran == [] and "the reviewers benchmark's data" in err
    # a benchmark where fewer than two members apply is skipped and needs no data: one model member and bm25 apply
    # to context2doc alone
    config.write_text("members:\n  - {name: a, model: minilm, scorer: abstract, weight: 0.5}\n"
                      "  - {name: b, model: bm25, weight: 0.5}\n")
    (tmp_path / "data" / "csfcube").rmdir()
    rc = main([*argv, "--out", str(tmp_path / "out2"), "--benchmarks", "csfcube", "reviewers"])
    assert rc == 0 and ran == ["csfcube", "reviewers"], capsys.readouterr().err
