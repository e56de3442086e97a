"""Round 10, items earlier sweeps saw and left: padded costs that are not finite, ..."""

import importlib
import json
import math
import warnings
from pathlib import Path

import pytest
import torch

from aspire.scoring.sinkhorn import sinkhorn


def _padded_problems(dtype=torch.float64):
    torch.manual_seed(0)
    B, N, M = 16, 7, 9
    cost = torch.rand(B, N, M, dtype=dtype)
    a, b = torch.rand(B, N, dtype=dtype), torch.rand(B, M, dtype=dtype)
    a[:8, 5:] = 0  # half the problems have padded rows, every other one padded columns
    b[::2, 6:] = 0
    a, b = a / a.sum(1, keepdim=True), b / b.sum(1, keepdim=True)
    pad = (a <= 0)[:, :, None] | (b <= 0)[:, None, :]
    return cost, a, b, pad


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), -float("inf")])
def test_sinkhorn_reads_non_finite_costs_on_padding_as_zero(fill):
    cost, a, b, pad = _padded_problems()
    ref = sinkhorn(cost, a, b, 0.05)
    got = sinkhorn(cost.masked_fill(pad, fill), a, b, 0.05)  # was NaN for every padded problem
    assert torch.equal(got.value, ref.value) and torch.equal(got.plan, ref.plan)
    assert torch.equal(got.f, ref.f) and bool(got.converged.all())
    half = sinkhorn(cost.masked_fill(pad, fill).half(), a.half(), b.half(), 0.05)
    assert torch.allclose(half.value.double(), ref.value, atol=1e-3)


@pytest.mark.parametrize("grad", ["autograd", "implicit"])
def test_sinkhorn_gradients_stay_finite_with_non_finite_padded_costs(grad):
    cost, a, b, pad = _padded_problems()
    clean = cost.clone().requires_grad_()
    sinkhorn(clean, a, b, 0.05, grad=grad).value.sum().backward()
    dirty = cost.masked_fill(pad, float("nan")).requires_grad_()
    value = sinkhorn(dirty, a, b, 0.05, grad=grad).value
    value.sum().backward()
    assert torch.isfinite(value).all() and torch.isfinite(dirty.grad).all()
    assert torch.equal(dirty.grad, clean.grad) and float(dirty.grad[pad].abs().max()) == 0.0


def test_sinkhorn_a_non_finite_cost_between_real_sentences_stays_nan():
    cost, a, b, _ = _padded_problems()
    cost[1, 0, 0] = float("nan")  # a real row and column of problem 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = sinkhorn(cost, a, b, 0.05).value
    assert torch.isnan(value[1]) and torch.isfinite(value[torch.arange(16) != 1]).all()


@pytest.mark.parametrize("spent", [0, 5])
def test_batched_solve_keeps_max_iter_for_a_problem_newton_gave_up_on(spent, monkeypatch):
    # the batched path (other devices than a CPU) handed a problem Newton gave up on back to a
    # lockstep chunk of check_every iterations, past max_iter
    sk = importlib.import_module("aspire.scoring.sinkhorn")  # the module (the package re-exports the function)

    def gives_up(cost, a, b, F, G, eps, tol, max_steps):  # spends all but `spent` of its budget, then gives up
        n = len(a)
        return F, G, torch.ones(n, dtype=F.dtype), torch.full((n,), max_steps - spent), torch.zeros(n, dtype=torch.bool)

    monkeypatch.setattr(sk, "_newton_tail", gives_up)
    torch.manual_seed(1)
    cost = torch.rand(3, 6, 5, dtype=torch.float64)
    a, b = torch.full((3, 6), 1 / 6, dtype=torch.float64), torch.full((3, 5), 1 / 5, dtype=torch.float64)
    with torch.no_grad():
        batched = sk._solve_batched(cost, a, b, 0.05, 1e-14, 40, 10, 2)
        compiled = sk._solve_cpu(cost, a, b, 0.05, 1e-14, 40, 10, 2)
    assert batched[2].tolist() == [40, 40, 40]  # was 45 and 50: 2 Sinkhorn, 38 - spent Newton, then 10 more
    assert compiled[2].tolist() == [40, 40, 40] and not batched[3].any()


def test_include_title_encoder_reads_a_blank_title_as_no_sentence(tiny_model_dir):
    # a plain abstract string has a blank title: an include_title encoder made it sentence 0, which has no word
    # piece, and refused every such paper (plain strings, context2doc's citing-sentence queries, title tasks)
    from aspire.data.papers import Paper
    from aspire.encoders import load_encoder
    from aspire.encoders.contextual import paper_sentences, title_is_sentence

    titled, plain = load_encoder(tiny_model_dir, include_title=True), load_encoder(tiny_model_dir)
    abstract = "We propose a model. It is new."
    got = titled.encode([abstract, {"paper_id": "t", "title": "A title", "abstract": abstract}], progress=False)
    assert got.sentences == [["We propose a model.", "It is new."], ["A title", "We propose a model.", "It is new."]]
    want = plain.encode([abstract], progress=False)
    torch.testing.assert_close(got.emb[0, :2], want.emb[0, :2])  # the same encoding as without include_title
    assert got.lengths.tolist() == [2, 3]
    assert titled.encode_independent(["One here. Two there."]).lengths.tolist() == [2]
    blank = Paper("b", "  ", ["One."])
    assert not title_is_sentence(blank, True) and paper_sentences(blank, True) == ["One."]
    assert title_is_sentence(Paper("n", "Only a title", []), False)  # a paper without sentences: its title


def test_training_alignment_skips_the_title_only_where_it_is_a_sentence(tiny_model_dir):
    # the aligned pair's positions were shifted past a title sentence in every row of an include_title run,
    # so a blank-titled anchor (a citing sentence, a title task's body) was aligned one sentence off
    from types import SimpleNamespace

    from aspire.data.papers import Paper
    from aspire.encoders import load_encoder
    from aspire.train.document_model import _align_lookup

    titled = load_encoder(tiny_model_dir, include_title=True)
    anchors = [Paper("a0", "", ["First one.", "Second one."]), Paper("a1", "A title", ["First one.", "Second."])]
    positives = [Paper("p0", "T", ["Alpha.", "Beta."]), Paper("p1", "", ["Alpha.", "Beta.", "Gamma."])]
    inputs = titled.tokenize(anchors + positives)
    assert inputs.titled == [False, True, True, False]
    docs = titled.forward(inputs)
    batch = SimpleNamespace(inputs=inputs, align=torch.tensor([[1, 1], [1, 2]]))
    a_idx, a_ok, p_idx, p_ok = _align_lookup(titled, batch, docs.index(torch.arange(2)), docs.index(torch.arange(2, 4)))
    assert a_idx.tolist() == [1, 2] and p_idx.tolist() == [2, 2]  # was [2, 2] and [2, 3]
    assert a_ok.all() and p_ok.all()
    assert [docs.sentences[i][j] for i, j in zip((0, 1), a_idx.tolist())] == ["Second one.", "Second."]


@pytest.mark.parametrize("title, first", [("A title", 1), ("", 0)])
def test_search_re_encodes_an_indexed_paper_from_its_stored_sentences_after_a_title_only_if_stored(title, first):
    # an indexed paper re-encoded (--query-side, a facet code) lost its first abstract sentence where the
    # include_title encoder stored no title sentence (a blank title)
    from types import SimpleNamespace

    from aspire.cli.search import QueryMaker

    sents = ["One here.", "Two there."]
    stored = [title, *sents] if first else sents
    index = SimpleNamespace(titles=[title], sentences=[stored], labels=[None], position=lambda pid: 0)
    searcher = SimpleNamespace(index=index, encoder=SimpleNamespace(include_title=True))
    maker = QueryMaker(searcher, SimpleNamespace(facet_code="none", query_side=True, device=None))
    maker.from_paper = lambda paper, sentences: SimpleNamespace(paper=paper)
    assert maker.from_id("p", None).paper.sentences == sents


def test_search_refuses_a_shortlist_no_re_ranker_reads(tiny_model_dir, tmp_path, capsys):
    # with rerank none the first stage's k best are the answer: --shortlist was taken and read by nothing
    from serve_support import PAPERS, build_index

    from aspire.cli.search import main as search_main
    from aspire.encoders import load_encoder

    index = build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path / "index", "tiny")
    query = ["--index", str(index), "--query-id", PAPERS[0].paper_id, "--k", "2", "--json", "--quiet"]
    assert search_main([*query, "--rerank", "none", "--shortlist", "5"]) == 2
    assert "--shortlist 5" in capsys.readouterr().err
    assert search_main([*query, "--rerank", "minl2", "--shortlist", "5"]) == 0
    assert len(json.loads(capsys.readouterr().out)["hits"]) == 2


@pytest.mark.parametrize("override", ["encode.backend=onnx", "encode.max_sentences=5", "encode.quantize=bf16"])
def test_index_merge_refuses_encoding_settings_the_shards_record(tmp_path, capsys, override):
    # a merge replaces these by the shards' record of their encoding: given, they were taken and read by nothing
    from aspire.index.__main__ import main as index_main

    (tmp_path / "shards").mkdir()
    assert index_main(["merge", "--shards", str(tmp_path / "shards"), "--out", str(tmp_path / "idx"), override]) == 2
    assert override.split("=")[0] in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()


def test_growing_an_index_with_papers_without_whole_vectors_is_refused_not_dropped_for_all():
    # the index dropped every paper's whole-abstract vectors, and the whole stage then blamed an old build
    import numpy as np

    from aspire.index.config import IndexBuildConfig, IndexConfig
    from aspire.index.corpus import EncodedCorpus
    from aspire.index.store import SentenceIndex

    def corpus(ids, whole):
        rng = np.random.default_rng(len(ids))
        vectors, offsets = rng.standard_normal((2 * len(ids), 4)).astype(np.float32), np.arange(0, 2 * len(ids) + 1, 2)
        return EncodedCorpus(vectors, offsets, ids, [f"t {i}" for i in ids], [["one.", "two."] for _ in ids],
                             whole=rng.standard_normal((len(ids), 4)).astype(np.float32) if whole else None)

    flat = IndexBuildConfig(index=IndexConfig(kind="flat"))
    index = SentenceIndex.build(corpus(["a", "b"], whole=True), flat, "fp")
    with pytest.raises(ValueError, match=r"whole-abstract vectors.*e\.g\. c"):
        index.add(corpus(["c"], whole=False), "fp")
    assert index.n_papers == 2 and index.whole is not None and len(index.whole) == 2
    index.add(corpus(["a"], whole=False), "fp")  # only a duplicate: nothing added, nothing lost
    assert index.n_papers == 2 and len(index.whole) == 2
    plain = SentenceIndex.build(corpus(["a"], whole=False), flat, "fp").add(corpus(["d"], whole=False), "fp")
    assert plain.whole is None and plain.n_papers == 2


def test_a_paper_repeated_across_shards_is_rejected_with_the_reason_one_build_gives(tmp_path):
    # merged shards (streamed, or joined in RAM) said "duplicate paper_id" where one build of the same corpus says
    # "duplicate paper_id (again in this corpus)": four twins of one rule, now `first_occurrences`
    from test_index_stream import cfg, write_shards

    from aspire.index.corpus import EncodedCorpus
    from aspire.index.shards import load_shards
    from aspire.index.store import SentenceIndex
    from aspire.index.stream import merge_streaming

    shards = write_shards(tmp_path)  # shard 2 repeats paper p3 of shard 0
    merge_streaming(shards, tmp_path / "streamed", cfg(kind="flat"))
    joined, _ = load_shards(shards)
    one = SentenceIndex.build(EncodedCorpus.concat([joined, joined.subset([3])]), cfg(kind="flat"), "fp")
    want = {"paper_id": "p3", "reason": "duplicate paper_id (again in this corpus)"}
    assert want in SentenceIndex.load(tmp_path / "streamed").rejected and want in joined.rejected
    repeats = [r for r in one.rejected if r["paper_id"] == "p3"]  # the shards' repeat, and the added part's
    assert len(repeats) >= 2 and all(r == want for r in repeats)


def test_negatives_devloss_reads_zero_dev_batches_as_all_of_them(tiny_model_dir, examples_dir, tmp_path, monkeypatch):
    # --dev-batches 0 (the trainer's "all") scored no batch and divided by zero
    import sys

    import yaml
    from test_train import tiny_config

    from aspire.config import to_dict
    from aspire.train.trainer import build_model

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    import negatives_devloss

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    build_model(cfg).save_pretrained(tmp_path / "model")
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["negatives_devloss.py", "--config", str(tmp_path / "config.yaml"), "--model",
                                      str(tmp_path / "model"), "--examples", str(examples_dir), "--dev-batches", "0",
                                      "--out", str(out), "none"])
    negatives_devloss.main()
    row = json.loads(out.read_text())["rows"][0]
    assert row["file"] == "none" and math.isfinite(row["dev_loss"]) and row["dev_loss"] > 0


@pytest.mark.parametrize("cls, override, key", [
    ("negatives", "margin=.nan", "margin"), ("negatives", "batch_size=0", "batch_size"),
    ("negatives", "max_length=-3", "max_length"), ("align", "chunk=0", "chunk"),
    ("align", "encode_batch_size=-1", "encode_batch_size"), ("align", "max_seq_length=0", "max_seq_length")])
def test_data_stage_configs_refuse_values_out_of_range(cls, override, key):
    # accepted before: a NaN margin switched the nearest-negatives guard off unsaid, a batch of 0 failed deep inside
    from aspire.config import ConfigError, load_config
    from aspire.data.align import AlignConfig
    from aspire.data.negatives import HardNegativesConfig

    config = {"negatives": HardNegativesConfig, "align": AlignConfig}[cls]
    with pytest.raises(ConfigError, match=key):
        load_config(config, None, [override])
    assert load_config(config, None, []) == config()  # the defaults are within range


def test_search_says_a_config_override_of_a_stage_it_does_not_run(tiny_model_dir, tmp_path, caplog):
    # search.passage_window=3 with --rerank ot was taken and read by nothing, without a word
    from serve_support import PAPERS, build_index

    from aspire.cli.search import main as search_main
    from aspire.encoders import load_encoder

    index = build_index(load_encoder(tiny_model_dir), PAPERS, tmp_path / "index", "tiny")
    query = ["--index", str(index), "--query-id", PAPERS[0].paper_id, "--k", "2", "--json", "--quiet"]
    caplog.set_level("WARNING", logger="aspire.cli.search")
    assert search_main([*query, "--rerank", "ot", "search.passage_window=3", "search.ot_tau=2"]) == 0
    assert "search.passage_window (read only by rerank maxpassage" in caplog.text and "ot_tau" not in caplog.text


def test_context2doc_records_the_encoding_the_abstract_scorer_ran_with(tmp_path, tiny_model_dir):
    # results.json said encoding "contextual" for --scorer abstract, which encodes whole abstracts
    from test_benchmarks import tiny_context2doc

    from aspire.evaluate.context2doc_run import run_context2doc

    bench = tiny_context2doc(tmp_path)
    run_context2doc(bench, tmp_path / "abs", "abs", str(tiny_model_dir), "abstract")
    assert json.loads((tmp_path / "abs" / "results.json").read_text())["encoding"] == "abstract"


def test_a_blank_title_adds_no_joiner_to_the_abstract_text():
    # a title of spaces was kept and joined: "   [SEP] a b." where an empty title gives "a b."
    from aspire.data.papers import abstract_text

    assert abstract_text("   ", ["a b."], " [SEP] ") == abstract_text("", ["a b."], " [SEP] ") == "a b."
    assert abstract_text("T", ["a b."], " [SEP] ") == "T [SEP] a b."


def test_csfcube_search_pipeline_checks_its_keys_before_the_model_and_records_the_config(small_csfcube, tmp_path,
                                                                                          tiny_model_dir):
    # a key of a stage not run was found only after the model loaded, and results.json held the overrides alone
    from aspire.evaluate.csfcube import run_csfcube_search

    with pytest.raises(ValueError, match="ot_tau"):
        run_csfcube_search(small_csfcube, "/no/such/model", ["rerank=minl2", "ot_tau=2"], tmp_path / "bad")
    results = run_csfcube_search(small_csfcube, str(tiny_model_dir), ["rerank=ot", "ot_tau=2"], tmp_path / "ok")
    config = results["search"]["config"]
    assert config["rerank"] == "ot" and config["ot_tau"] == 2.0 and config["k"] == "pool size"
    assert json.loads((tmp_path / "ok" / "results.json").read_text())["search"]["config"] == config
