"""Round-16 correctness checks of the trainer, the document model, negatives and the corpus readers."""

from __future__ import annotations

import re

import pytest
import torch
from test_train import tiny_config

from aspire.train.data import EpochBatchSampler, load_split
from aspire.train.trainer import Trainer, build_model

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def test_a_train_seed_past_torchs_range_trains_as_the_sampler_takes_it(tiny_model_dir, examples_dir, tmp_path):
    """train.seed is any int >= 0; the loader's generator seed (seed * 1_000_003 + epoch) is taken mod 2**64 as the
    batch sampler takes it: torch refused seeds >= 2**64 (a ValueError, "Overflow") at the first step."""
    seed = 2**64 // 1_000_003 + 5  # seed * 1_000_003 overflows 2**64
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=max", f"train.seed={seed}",
                      "train.max_steps=1", "data.use_dev=false")
    train = load_split(cfg.data, "train")
    trainer = Trainer(cfg, build_model(cfg), train, None)
    seen = []
    collate = trainer.collate
    trainer.collate = lambda rows: seen.append(rows) or collate(rows)
    out = trainer.train()
    assert out["step"] == 1
    first = next(iter(EpochBatchSampler(len(train), cfg.train.batch_size, seed, 0)))
    assert [r for r in seen[0]] == [train[i] for i in first]


def test_read_acl_rejects_an_abstract_with_a_lone_surrogate_naming_it(tmp_path, monkeypatch):
    """A record that is not a valid paper is left out, named in stats["rejected"]: an abstract holding a lone
    surrogate (valid JSON, "\\ud800") crashed the whole read with a UnicodeEncodeError naming no record (its text was
    hashed for the split cache); the other records are read."""
    from aspire.data.acl import HeldOut, read_acl

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acl.jsonl"
    path.write_text('{"paper_id": "A1", "title": "One", "abstract": "We do a thing. It works well."}\n'
                    '{"paper_id": "A2", "title": "Two", "abstract": "Bad \\ud800 text. More text here."}\n',
                    encoding="utf-8")
    read_acl.cache_clear()
    papers, stats = read_acl(path, HeldOut(), 0)
    assert [(p.paper_id, p.sentences) for p in papers] == [("A1", ["We do a thing.", "It works well."])]
    assert stats["used"] == 1 and list(stats["rejected"]) == [f"{path}:2"]
    assert "'A2'" in stats["rejected"][f"{path}:2"] and "surrogate" in stats["rejected"][f"{path}:2"]
    read_acl.cache_clear()


def _s2orc_inputs(tmp_path, para: dict):
    import json

    full = {"paper_id": "P", "body_text": [para],
            "bib_entries": {"b0": {"title": "A", "link": "A"}, "b1": {"title": "B", "link": "B"}}}
    abstracts = [{"paper_id": "A", "title": "a", "abstract": ["One sentence."]},
                 {"paper_id": "B", "title": "b", "abstract": ["Two.", "Three."]}]
    (tmp_path / "full.jsonl").write_text(json.dumps(full) + "\n", encoding="utf-8")
    (tmp_path / "abs.jsonl").write_text("".join(json.dumps(a) + "\n" for a in abstracts), encoding="utf-8")
    return tmp_path / "full.jsonl", tmp_path / "abs.jsonl"


S2ORC_TEXT = "We follow prior work [1, 2] closely here. Another sentence."
S2ORC_CITES = [{"start": 21, "end": 24, "text": "[1,", "ref_id": "b0"}, {"start": 24, "end": 27, "text": " 2]", "ref_id": "b1"}]


@pytest.mark.parametrize("para, reason", [
    ({"text": S2ORC_TEXT.replace("closely", "closely \ud800"), "section": "Intro"}, "body_text[0].text holds a lone surrogate"),
    ({"text": S2ORC_TEXT, "section": "Intro\udc80"}, "body_text[0].section holds a lone surrogate"),
    ({"text": S2ORC_TEXT, "section": {"title": "Intro"}}, "body_text[0].section must be a string or null, got dict"),
])
def test_mine_s2orc_refuses_a_paragraph_that_is_not_unicode_text_naming_the_line(tmp_path, para, reason):
    """"No text may hold a lone surrogate" (the module's format), and a section is a string: a paragraph whose text
    or section held a lone surrogate was mined into a context (text / source) that input A refuses, and a section
    object was written as its Python repr ("s2orc:{'title': 'Intro'}")."""
    from aspire.data.cocite.config import IngestConfig
    from aspire.data.s2orc import mine_s2orc
    from aspire.io import DataError

    full, abstracts = _s2orc_inputs(tmp_path, {**para, "cite_spans": S2ORC_CITES})
    cfg = IngestConfig(splitter="regex", exclude_benchmark_test=False)
    with pytest.raises(DataError, match=rf"full\.jsonl:1: paper 'P': {re.escape(reason)}"):
        mine_s2orc(full, abstracts, tmp_path / "out", cfg)
    report = mine_s2orc(full, abstracts, tmp_path / "out", IngestConfig(splitter="regex", exclude_benchmark_test=False,
                                                                         on_error="skip"))
    assert report["bad_lines"] == 1 and report["counts"].get("contexts", 0) == 0


def test_mine_s2orc_keeps_a_paragraph_with_a_null_or_missing_section(tmp_path):
    from aspire.data.cocite.config import IngestConfig
    from aspire.data.s2orc import mine_s2orc

    for para in ({"text": S2ORC_TEXT, "section": None}, {"text": S2ORC_TEXT}):
        full, abstracts = _s2orc_inputs(tmp_path, {**para, "cite_spans": S2ORC_CITES})
        report = mine_s2orc(full, abstracts, tmp_path / "out", IngestConfig(splitter="regex",
                                                                            exclude_benchmark_test=False))
        assert report["counts"]["contexts"] == 1
        assert '"source": "s2orc:"' in (tmp_path / "out" / "contexts.jsonl").read_text(encoding="utf-8")


def test_from_pretrained_refuses_a_missing_scorers_file_when_the_scorers_have_weights(tiny_model_dir, examples_dir,
                                                                                     tmp_path, monkeypatch):
    """"A missing ... `scorers.pt` is an error naming the file": a model whose scorers hold weights loaded without
    the file kept the scorers' fresh weights, unsaid. (No shipped scorer has weights: one is given one here.)"""
    from aspire.train import document_model as dm

    make = dm.make_scorer

    def weighted(name, cfg):
        scorer = make(name, cfg)
        scorer.register_parameter("w", torch.nn.Parameter(torch.ones(1)))
        return scorer

    monkeypatch.setattr(dm, "make_scorer", weighted)
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=max")
    model = build_model(cfg)
    with torch.no_grad():
        model._scorers["minl2"].w.fill_(5.0)
    model.save_pretrained(tmp_path / "saved")
    assert float(dm.DocumentModel.from_pretrained(tmp_path / "saved")._scorers["minl2"].w.detach()) == 5.0
    (tmp_path / "saved" / "scorers.pt").unlink()
    with pytest.raises(FileNotFoundError, match="scorers.pt"):
        dm.DocumentModel.from_pretrained(tmp_path / "saved")
    monkeypatch.setattr(dm, "make_scorer", make)  # scorers without weights: no file, none needed
    assert dm.DocumentModel.from_pretrained(tmp_path / "saved").model_cfg.kind == "max"


@pytest.mark.parametrize("papers, batch_size, message", [
    ([], 32, "no papers given"), (["one sentence."], 0, "batch_size must be a whole number >= 1, got 0"),
    (["one sentence."], -1, "batch_size must be a whole number >= 1, got -1"),
])
def test_document_model_encode_refuses_what_the_encoders_encode_refuses(tiny_model_dir, examples_dir, tmp_path,
                                                                        papers, batch_size, message):
    """DocumentModel.encode takes papers as `ContextualSentenceEncoder.encode` does: no papers, or a batch size
    below 1, were range()'s "arg 3 must not be zero" or DocBatch.concat's "needs at least one batch"."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=max")
    model = build_model(cfg)
    with pytest.raises(ValueError, match=re.escape(message)):
        model.encode(papers, batch_size=batch_size)
    assert model.encode(["one sentence.", "two. three."], batch_size=1).emb.shape[0] == 2


def test_the_train_package_docstring_names_its_modules():
    """aspire.train's docstring listed a `models` module (DocumentModel's), which does not exist."""
    import importlib

    import aspire.train

    named = re.findall(r"^- `(\w+)`:", aspire.train.__doc__, flags=re.M)
    assert "document_model" in named
    for name in named:
        importlib.import_module(f"aspire.train.{name}")


def test_negatives_seeds_past_2_to_the_32_draw_as_their_residue_and_negative_seeds_are_refused_first():
    """`seed` is any int >= 0 (as train.seed): k-means (coverage) and the truncated SVD (svd) failed for a seed >=
    2**32 with scikit-learn's InvalidParameterError, after every paper was encoded, while `random` took it; now
    scikit-learn gets it mod 2**32 (equal below it). A negative seed is refused by the config check, before any
    encoding (it was numpy's or scikit-learn's error at the drawing)."""
    import numpy as np
    from scipy import sparse

    from aspire.data.negatives import HardNegativesConfig, check_config, kmeans_clusters, svd_vectors

    vectors = np.random.default_rng(0).normal(size=(12, 5)).astype(np.float32)
    big = 2**32 + 7
    assert (kmeans_clusters(vectors, 3, big) == kmeans_clusters(vectors, 3, 7)).all()
    matrix = sparse.csr_matrix(np.random.default_rng(1).integers(0, 2, size=(9, 9)).astype(np.float32))
    matrix = matrix + matrix.T
    a, _ = svd_vectors(matrix, 3, big)
    b, _ = svd_vectors(matrix, 3, 7)
    assert np.array_equal(a, b)
    for method in ("random", "coverage", "svd"):
        check_config(HardNegativesConfig(method=method, seed=big))
        with pytest.raises(ValueError, match="seed must be at least 0, got seed=-1"):
            check_config(HardNegativesConfig(method=method, seed=-1))


def test_hard_negatives_config_refuses_a_negative_seed_when_loaded():
    from aspire.config import ConfigError, load_config
    from aspire.data.negatives import HardNegativesConfig

    with pytest.raises(ConfigError, match="seed: must be >= 0, got -3"):
        load_config(HardNegativesConfig, None, ["method=random", "seed=-3"])


CROP_TASK = "{name: crop, sources: [cocite], benchmarks_dir: null, dev_share: 0.4, span_max: 2}"


def test_a_tasks_dev_batches_without_triples_are_named_by_the_task(tiny_model_dir, examples_dir, tmp_path,
                                                                   monkeypatch):
    """With tasks, dev_loss scores each task's dev split alone: one with no triples to score (every anchor without a
    negative) was refused as "the dev batches", naming no task."""
    from aspire.train.document_model import DocumentModel
    from aspire.train.tasks import build_tasks

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "r", "model.kind=max", "loss.kind=mnrl",
                      f"tasks=[{{name: cocite}}, {CROP_TASK}]", "mix.mode=alternating")
    trainer = Trainer(cfg, build_model(cfg), build_tasks(cfg, "train"), build_tasks(cfg, "dev"))
    assert trainer.dev_loss() > 0 and set(trainer.task_dev_loss) == {"cocite", "crop"}
    forward = DocumentModel.forward

    def no_crop_triples(self, batch):
        out = forward(self, batch)
        if batch.task == "crop":
            out["task_rows"] = torch.zeros_like(out["task_rows"])
        return out

    monkeypatch.setattr(DocumentModel, "forward", no_crop_triples)
    with pytest.raises(ValueError, match="task 'crop''s dev batches hold no triples"):
        trainer.dev_loss()
