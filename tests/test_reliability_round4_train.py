"""Hostile inputs to the cross-encoder reranker and its training, weight soups and the ACL-sourced tasks:
each is refused naming the document, model or record, or (the cross-encoder's warm-up) does what its config says."""

from __future__ import annotations

import json
import math
import os

import pytest

from aspire.scoring.crossencoder import CrossEncoderReranker, load_cross_encoder, mix_rerank
from aspire.train.crossencoder import CrossEncoderConfig, fit_cross_encoder
from aspire.train.interpolate import soup
from aspire.train.tasks import build_tasks
from tests.test_interpolate import tuned_model
from tests.test_train import tiny_config


# ---- the reranker's mix --------------------------------------------------------------------------------------
@pytest.mark.parametrize("first", [[("a", 3.0), ("a", 2.0), ("b", 1.0)],  # twice in the head
                                   [("a", 3.0), ("b", 2.0), ("a", 1.0)]])  # in the head and the tail
def test_mix_rerank_refuses_a_document_listed_twice_naming_it(first):
    with pytest.raises(ValueError, match="document 'a' is listed twice"):
        mix_rerank(first, {"a": 0.1, "b": 2.0}, 2, 1.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_mix_rerank_refuses_a_non_finite_first_stage_score_in_the_tail_naming_it(bad):
    # the tail was shifted below the head by arithmetic on its scores: nan out, with no error
    with pytest.raises(ValueError, match="document 'c': first-stage score .* is not finite"):
        mix_rerank([("a", 2.0), ("b", 1.0), ("c", bad)], {"a": 1.0, "b": 0.5}, 2, 1.0)


def test_mix_rerank_names_the_document_of_a_non_finite_cross_encoder_score():
    with pytest.raises(ValueError, match="cross-encoder score nan of document 'b' is not finite"):
        mix_rerank([("a", 2.0), ("b", 1.0)], {"a": 1.0, "b": math.nan}, 2, 0.5)


def test_mix_rerank_still_takes_a_one_document_shortlist_and_an_empty_one():
    assert mix_rerank([("a", 2.0)], {"a": 1.0}, 5, 1.0) == [("a", 0.0)]
    assert mix_rerank([], {}, 5, 1.0) == []


def test_reranker_names_a_document_whose_text_is_not_a_string(tiny_cross_encoder_dir):
    reranker = CrossEncoderReranker(str(tiny_cross_encoder_dir))
    with pytest.raises(ValueError, match="document 'b': its text is a NoneType, not a string"):
        reranker.rerank("neural model", [("a", 1.0), ("b", 0.5)], {"a": "the model", "b": None}, top_n=2)


# ---- the cross-encoder's training ----------------------------------------------------------------------------
def test_crossencoder_warmup_of_one_warms_up_over_the_whole_run(tiny_model_dir, tmp_path, monkeypatch):
    """`warmup` is a share of the run in [0, 1]; transformers read 1.0 as one step, so the rate peaked at
    step 2 and fell (less warm-up than 0.5 gives)."""
    from transformers import Trainer

    rates = []
    log = Trainer.log

    def record(self, logs, *args, **kwargs):
        if "learning_rate" in logs and "loss" in logs:
            rates.append(float(logs["learning_rate"]))
        return log(self, logs, *args, **kwargs)

    monkeypatch.setattr(Trainer, "log", record)
    pairs = [("neural model", "neural network model", 1.0), ("neural model", "citation title", 0.0)] * 8
    cfg = CrossEncoderConfig(max_steps=4, batch_size=4, learning_rate=1e-3, warmup=1.0, logging_steps=1)
    report = fit_cross_encoder(load_cross_encoder(str(tiny_model_dir), 32), pairs, tmp_path, cfg)
    assert report["steps"] == 4 and len(rates) == 4
    assert all(a < b for a, b in zip(rates, rates[1:])), rates  # still rising at the last step
    assert rates[-1] < cfg.learning_rate


# ---- soups ---------------------------------------------------------------------------------------------------
def test_a_soup_refuses_a_model_given_twice_naming_it(tiny_model_dir, examples_dir, tmp_path, monkeypatch):
    """A repeat weighed 2/3 in the weights while interpolation.json recorded 1/2 each (its members are a dict)."""
    tuned = tuned_model(tiny_model_dir, examples_dir, tmp_path / "a")
    other = tuned_model(tiny_model_dir, examples_dir, tmp_path / "b")
    with pytest.raises(ValueError, match=f"{tuned}: the same model as {tuned}"):
        soup([tuned, tuned, other], tmp_path / "soup")
    monkeypatch.chdir(tmp_path)  # the same folder by a relative path
    with pytest.raises(ValueError, match="the same model as"):
        soup([tuned, os.path.relpath(tuned, tmp_path), other], tmp_path / "soup2")
    assert not (tmp_path / "soup").exists() and not (tmp_path / "soup2").exists()


# ---- tasks read from an ACL file ------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["author", "title"])
def test_an_acl_file_with_one_paper_id_on_two_records_is_refused_naming_it(task, tiny_model_dir, examples_dir,
                                                                          tmp_path):
    """The author task paired such a paper with itself as its own positive."""
    path = tmp_path / "acl.jsonl"
    rows = [{"paper_id": f"Q{i}", "title": f"paper title {i}", "abstract": ["model results.", "data task."],
             "authors": [f"author {i % 4}", "shared person"]} for i in range(12)]
    rows.append(dict(rows[3]))  # the same paper again
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = f"tasks=[{{name: {task}, sources: [acl], acl_path: {path}, benchmarks_dir: null, dev_share: 0.0}}]"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "model.kind=abstract", "loss.kind=mnrl", tasks)
    with pytest.raises(ValueError, match=f"{task} task: .*acl.jsonl: paper id 'Q3' is used by two records"):
        build_tasks(cfg, "train")


# ---- teacher vectors ------------------------------------------------------------------------------------------
def test_teacher_refuses_an_acl_file_with_one_paper_id_on_two_records(tiny_model_dir, tmp_path, capsys):
    """The teacher wrote both rows under one id, and `rows` read the second for the first paper too."""
    from aspire.train.teacher import main

    path = tmp_path / "acl.jsonl"
    rows = [{"paper_id": "A1", "title": "neural model", "abstract": ["the model.", "the data."]},
            {"paper_id": "A2", "title": "citation title", "abstract": ["the task."]},
            {"paper_id": "A1", "title": "neural model again", "abstract": ["a method."]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["--teacher", str(tiny_model_dir), "--out", str(tmp_path / "t"), "--acl-path", str(path),
                 "--benchmarks-dir", "", "--max-papers", "0", "--max-length", "32", "--quiet"]) == 2
    assert "paper id 'A1' is used by two records" in capsys.readouterr().err
    assert not (tmp_path / "t" / "ids.json").exists()


def test_load_teacher_refuses_ids_naming_one_paper_twice(tmp_path):
    import numpy as np

    from aspire.train.teacher import load_teacher

    np.save(tmp_path / "vectors.npy", np.eye(3, 4, dtype=np.float32))
    (tmp_path / "ids.json").write_text(json.dumps(["A1", "A2", "A1"]))
    (tmp_path / "teacher.json").write_text("{}")
    with pytest.raises(ValueError, match="ids.json: paper id 'A1' names two rows"):
        load_teacher(tmp_path)


@pytest.mark.parametrize("text", ["[1, 2]", "null", '"model"'])
def test_a_cross_encoder_config_that_is_not_an_object_is_refused_naming_the_path(text, tmp_path):
    from aspire.scoring.crossencoder import check_trained_cross_encoder

    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ValueError, match=f"{tmp_path / 'config.json'}: the cross-encoder's config holds a JSON .*, not an object"):
        check_trained_cross_encoder(tmp_path)


def test_mix_rerank_refuses_a_first_stage_out_of_order_naming_the_document():
    """The head and tail are cut by position: a tail of 1.0 then 5.0 once gave the second tail document a score
    above the head's lowest. Ties stay allowed."""
    assert [d for d, _ in mix_rerank([("a", 3.0), ("b", 2.0), ("c", 2.0)], {"a": 0.1, "b": 2.0}, 2, 1.0)] == ["b", "a", "c"]
    with pytest.raises(ValueError, match=r"best first .* document 'd' at rank 4 scores 5.0 above 'c' at rank 3 \(1.0\)"):
        mix_rerank([("a", 3.0), ("b", 2.0), ("c", 1.0), ("d", 5.0)], {"a": 0.1, "b": 2.0}, 2, 0.5)


def test_a_paper_of_both_sources_is_taken_once(tiny_model_dir, examples_dir, tmp_path):
    """`sources: [cocite, acl]` with a paper in both (one ACL paper is among the co-citation abstracts): it went in
    twice, its crop ids and pairs repeated; now once, from the co-citation source, and counted."""
    from aspire.train.data import load_split, split_paper_ids
    from aspire.train.tasks import source_papers

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run")
    train = split_paper_ids(cfg.data, "train")  # the source is the train split's papers (round 11)
    cocite = {pid: p for pid, p in load_split(cfg.data, "train").papers.items() if pid in train}
    shared = next(iter(cocite))
    path = tmp_path / "acl.jsonl"
    rows = [{"paper_id": pid, "title": f"acl title {i}", "abstract": ["a model.", "the data.", "results."]}
            for i, pid in enumerate([shared, "A1", "A2"])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = f"{{name: crop, sources: [cocite, acl], acl_path: {path}, benchmarks_dir: null, dev_share: 0.0}}"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", f"tasks=[{task}]")
    papers, stats = source_papers(cfg, cfg.tasks[0], "train", ("cocite", "acl"))
    ids = [p.paper_id for p in papers]
    assert len(ids) == len(set(ids)) == len(cocite) + 2
    assert stats["acl"]["in_cocite_already"] == 1
    assert next(p for p in papers if p.paper_id == shared).title == cocite[shared].title


def test_a_task_without_examples_names_its_split(tiny_model_dir, examples_dir, tmp_path):
    """A crop task with dev_share 0 has no dev pairs: the error once said only "task 'crop' has no examples"."""
    task = "{name: crop, sources: [cocite], benchmarks_dir: null, dev_share: 0.0}"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", f"tasks=[{{name: cocite}}, {task}]")
    assert build_tasks(cfg, "train").names == ["cocite", "crop"]
    with pytest.raises(ValueError, match=r"task 'crop' has no examples in the dev split \(.*in_split.: 0.*\); raise its "
                                         "dev_share where it has one, or set data.use_dev=false"):
        build_tasks(cfg, "dev")
