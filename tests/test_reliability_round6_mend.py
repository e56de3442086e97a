"""What the round-4/5 sweep saw and left, mended: one shared type name for messages, S2ORC ids under the papers
files' rule, and the rest named in each test."""
from __future__ import annotations

import copy

import pytest
from test_reliability_round3 import _run_into_closed_pipe, small_index  # noqa: F401, F811 (a fixture)
from test_reliability_round4_data import ABSTRACTS, PAPERS, _mine, _set

from aspire.io import DataError, type_name, unique_id


def test_type_name_says_null_for_none_as_json_does():
    assert type_name(None) == "null" and type_name([1]) == "list" and type_name("a") == "str"
    with pytest.raises(DataError, match=r"f:1: set_id must be a non-empty string, got null None"):
        unique_id(None, "set_id", "f:1", {})


@pytest.mark.parametrize("pid, message", [
    (" C1", r"pp\.jsonl:1: paper_id ' C1' holds whitespace"),
    ("C 1", r"pp\.jsonl:1: paper_id 'C 1' holds whitespace"),
    ("  ", r"pp\.jsonl:1: paper_id is empty"),
])
def test_s2orc_citing_ids_follow_the_papers_files_rule(tmp_path, pid, message):
    # ' C1' was taken as a paper distinct from 'C1'; 'C 1' split a TREC run's columns downstream
    with pytest.raises(DataError, match=message):
        _mine(tmp_path, papers=_set((0, "paper_id"), pid))


def test_s2orc_abstract_ids_follow_the_papers_files_rule(tmp_path):
    abstracts = copy.deepcopy(ABSTRACTS)
    abstracts[0]["paper_id"] = "P1\t"
    with pytest.raises(DataError, match=r"ab\.jsonl:1: paper_id 'P1\\t' holds whitespace"):
        _mine(tmp_path, papers=PAPERS, abstracts=abstracts)


def _acl_folder(root, titles: str):
    import gzip
    import json

    (root / "acl-anthology").mkdir(parents=True)
    path = root / "acl-anthology" / "papers.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        for pid in titles:
            handle.write(json.dumps({"paper_id": pid, "title": f"Title {pid}", "abstract": "x"}) + "\n")
    return path


def test_the_acl_file_must_be_the_one_the_formats_split_was_made_from(tmp_path):
    import json

    from aspire.benchmarks.acl_formats import checksum
    from aspire.benchmarks.heldout import format_titles
    from aspire.checksum import file_sha256
    from aspire.evaluate.probes import acl_index

    made_from = _acl_folder(tmp_path / "made", "abcd")
    other = _acl_folder(tmp_path / "other", "abce")
    body = {"venue_year": {"train": ["a"], "dev": ["b"], "test": ["c"]}, "same_author": {"test": ["d"]}}
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"splits": body, "checksum": checksum(body), "source_sha256": file_sha256(made_from)}))
    assert format_titles(tmp_path / "made", split) == {"titleb", "titlec", "titled"}
    assert set(acl_index(made_from.parent, split)[1]) == set("abcd")
    # the other dump has no 'd': its held-out title was silently missing from what training leaves out
    for call in (lambda: format_titles(tmp_path / "other", split), lambda: acl_index(other.parent, split)):
        with pytest.raises(ValueError, match=rf"{other} differs from the file the split {split} was made from"):
            call()


def test_the_committed_formats_split_was_made_from_the_shared_acl_file(shared_data):
    from aspire.benchmarks.acl_formats import ACL_FILE, check_source

    check_source(shared_data / "acl-anthology" / ACL_FILE)  # raises on a mismatch


def test_a_closed_stdout_ends_the_printing_not_the_run_file(small_index, tmp_path):  # noqa: F811
    # `aspire search --queries Q --run-out R | head` stopped at head's exit and wrote no run file
    from aspire.benchmarks.runs import read_run

    queries = tmp_path / "queries.txt"
    queries.write_text("".join(f"p{i}\n" for i in range(30)))
    run = tmp_path / "run.trec"
    proc = _run_into_closed_pipe(["search", "--index", str(small_index), "--queries", str(queries), "--k", "20",
                                  "--json", "--quiet", "--run-out", str(run)])
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert "stdout was closed: hits are no longer printed; the queries go on for --run-out" in proc.stderr
    ranked = read_run(run)
    assert list(ranked) == [f"p{i}" for i in range(30)] and all(len(r) == 20 for r in ranked.values())


def test_fuse_runs_replaces_a_fused_folder_written_before_it_recorded_its_experiment(tmp_path, capsys):
    import json

    from test_eval_fusion import RUN, _folder

    from aspire.cli.evaluate import main

    a, b = _folder(tmp_path / "a", RUN), _folder(tmp_path / "b", RUN)
    out = tmp_path / "fused"
    assert main(["fuse-runs", str(a), str(b), "--out", str(out)]) == 0
    old = json.loads((out / "results.json").read_text())
    del old["experiment"]  # what fuse-runs wrote before it recorded "experiment": "fused"
    (out / "results.json").write_text(json.dumps(old))
    assert main(["fuse-runs", str(a), str(b), "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["experiment"] == "fused"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "results.json").write_text(json.dumps({"benchmark": "relish", "experiment": "bm25"}))
    capsys.readouterr()
    assert main(["fuse-runs", str(a), str(b), "--out", str(tmp_path / "other")]) == 2  # another run's folder
    assert "holds another run's results (experiment 'bm25')" in capsys.readouterr().err


@pytest.mark.slow
def test_a_model_that_encodes_the_title_as_a_sentence_is_scored_on_csfcube(small_csfcube, tmp_path, tiny_model_dir):
    # include_title=True (a training option) put the title at sentence 0, and every facet pool refused the model:
    # "N labels for N+1 encoded sentences"
    import json

    import torch

    from aspire.batch import DocBatch
    from aspire.cli.evaluate import main
    from aspire.data.papers import Paper
    from aspire.encoders import load_encoder
    from aspire.evaluate.facets import facet_candidates, facet_queries

    titled = tmp_path / "titled"
    load_encoder(tiny_model_dir, include_title=True).save_pretrained(titled)
    common = ["csfcube", "--data", str(small_csfcube), "--model", str(titled), "--cache-dir", str(tmp_path / "cache"),
              "--batch-size", "16"]
    for extra in (["--scorer", "minl2"], ["--scorer", "ot", "--tau", "1", "--cand-sentences", "facet"]):
        out = tmp_path / extra[1]
        assert main([*common, *extra, "--exp", extra[1], "--out", str(out)]) == 0
        assert set(json.loads((out / "results.json").read_text())["test"]) >= {"background", "method", "result"}
    # the facet's sentences, one past their label's position; the title is of no facet
    paper = Paper("p", "A title", ["We study x.", "We use y.", "It works."], labels=["background_label",
                                                                                    "method_label", "result_label"])
    bare = Paper("q", "Only a title", [], labels=[])
    batch = DocBatch.from_list([torch.ones(4, 2), torch.ones(1, 2)], ["p", "q"],
                               [["A title", *paper.sentences], ["Only a title"]])
    facet = {"method_label": "method"}
    assert facet_queries(batch.index([0]), {"p": paper}, "method", facet).mask.tolist() == [[False, False, True, False]]
    narrowed, whole = facet_candidates(batch, {"p": paper, "q": bare}, "method", facet)
    assert whole == ["q"] and narrowed.mask[1].tolist() == batch.mask[1].tolist()


@pytest.mark.parametrize("mode", ["mixed", "alternating"])
def test_a_task_key_the_mix_does_not_read_is_refused_when_the_config_loads(mode):
    # a task's steps were silently unread outside the sequential mix
    from aspire.config import ConfigError, load_config
    from aspire.train.config import Config, MixConfig, TaskConfig

    message = rf"tasks\[0\]\.steps=200 is not read by mix\.mode {mode}"

    with pytest.raises(ConfigError, match=message):
        load_config(Config, "configs/multitask_sequential.yaml", [f"mix.mode={mode}"])
    load_config(Config, "configs/multitask_sequential.yaml")  # sequential reads them
    with pytest.raises(ConfigError, match=r"tasks\[1\]\.ratio=3\.0 is not read by mix\.mode sequential"):
        Config(tasks=[TaskConfig(steps=5), TaskConfig(name="crop", ratio=3.0, steps=5)], mix=MixConfig("sequential"))


def test_fuse_runs_at_a_threshold_leaves_out_queries_with_nothing_that_high(tmp_path):
    # scored 0 by trec_eval's -l2 and averaged in, where the pools evaluator leaves them out (or refuses them)
    from test_eval_fusion import RUN

    from aspire.benchmarks.runs import write_qrels, write_run
    from aspire.evaluate.fuse import fuse_run_files

    folders = []
    for name in ("a", "b"):
        folder = tmp_path / name
        write_run(folder / "run.trec", RUN, "x")
        write_qrels(folder / "qrels.trec", {"q1": {"a": 2, "b": 1}, "q2": {"c": 1, "b": 1}})  # q2: nothing at 2
        (folder / "results.json").write_text('{"dataset": "relish", "relevance_threshold": 2}')
        folders.append(folder)
    res = fuse_run_files(folders, tmp_path / "fused", metrics=["MAP"])
    assert res["skipped_no_relevant"] == ["q2"] and res["metrics"]["MAP-l2"] == pytest.approx(1.0)  # q1's a first


def test_a_cpu_backend_from_the_environment_with_a_gpu_device_names_the_variable(monkeypatch):
    # the error said "--backend openvino", an option the user never typed
    from aspire.encoders.choice import resolve_backend

    monkeypatch.setenv("ASPIRE_BACKEND", "openvino")
    with pytest.raises(ValueError, match=r"^\$ASPIRE_BACKEND=openvino encodes on the CPU; got --device cuda"):
        resolve_backend(None, None, "minilm", "cuda")
    assert resolve_backend(None, None, "minilm", "cpu")[0] == "openvino"


def test_a_ranking_that_holds_its_own_query_says_so():
    # CSFCube's upstream ranked files may rank the query paper itself; "outside the pool" alone read as a wrong id
    from aspire.benchmarks.metrics import evaluate_rankings

    with pytest.raises(ValueError, match=r"query q: ranking holds 1 ids outside the pool: \['q'\]; the query itself "
                                         r"is no candidate of its own pool: leave it out"):
        evaluate_rankings({"q": {"a": 1, "b": 0}}, {"q": ["q", "a", "b"]}, ["map"])
