"""Round 12: benchmark papers leave every training source by paper id and abstract text as well as by title. The
co-citation file gives J05-1004, C04-1073 and C04-1100 (cited by context2doc test sentences) an empty title, and the
title rule drops "", so the `crop` / `title` tasks' co-citation source kept them; an ACL record with an empty (or
Chinese) title and a benchmark abstract was kept the same way."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_train import tiny_config, write_examples_dir

THREE = ("J05-1004", "C04-1073", "C04-1100")
CSF = "10010426"  # a CSFCube paper whose first sentence is under 200 normalised characters


def _cited(shared_data: Path) -> dict[str, dict]:
    """The co-citation file's cited papers by id, as the file gives them (first citation)."""
    out: dict[str, dict] = {}
    for line in open(shared_data / "cocite-acl" / "cocitations.jsonl", encoding="utf-8"):
        for c in json.loads(line)["cited"]:
            out.setdefault(c["paper_id"], c)
    return out


def _csfcube_abstract(shared_data: Path) -> list[str]:
    for line in open(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8"):
        record = json.loads(line)
        if record["paper_id"] == CSF:
            return record["abstract"]
    raise AssertionError(f"CSFCube paper {CSF} not found")


def _source(tiny_model_dir, examples, tmp_path, shared_data, sources="[cocite]", *more):
    from aspire.train.tasks import source_papers

    task = f"{{name: crop, sources: {sources}, benchmarks_dir: {shared_data}, dev_share: 0.0{''.join(more)}}}"
    cfg = tiny_config(tiny_model_dir, examples, tmp_path / "run", f"tasks=[{task}]", "data.max_sentences=1")
    return source_papers(cfg, cfg.tasks[0], "train", ("cocite", "acl"))


@pytest.mark.slow
def test_the_three_empty_title_context2doc_test_papers_leave_the_cocite_source(tiny_model_dir, tmp_path, shared_data):
    """The three real records (title "") and a paper with an empty title and CSFCube 10010426's abstract, in the
    co-citation train split: all four were kept; now removed (three by id, one by abstract, read whole though
    data.max_sentences=1 cuts it to a sentence shorter than the 200-character key), the others kept, and the
    counts say which rule removed what."""
    cited = _cited(shared_data)
    assert all(cited[pid]["title"] == "" for pid in THREE)  # the file's own records
    examples = write_examples_dir(tmp_path / "examples")
    added = [{"paper_id": pid, "title": "", "abstract": cited[pid]["abstract"]} for pid in THREE]
    added.append({"paper_id": "Z9", "title": "", "abstract": _csfcube_abstract(shared_data)})
    with open(examples / "abstracts.jsonl", "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(p) + "\n" for p in added)
    members = sorted(p["paper_id"] for p in added)
    lines = [{"example_id": f"{a}|{b}", "query_id": a, "positive_id": b, "negative_ids": [],
              "set_ids": ["|".join(members)], "cc_align": [0, 0], "abs_align": [0, 0]}
             for i, a in enumerate(members) for b in members[i + 1:]]
    with open(examples / "examples.train.jsonl", "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(x) + "\n" for x in lines)

    papers, stats = _source(tiny_model_dir, examples, tmp_path, shared_data)
    ids = {p.paper_id for p in papers}
    assert not ids & set(members), sorted(ids & set(members))
    assert len(ids) == stats["cocite"]["used"] == stats["cocite"]["read"] - stats["cocite"]["not_in_train_split"] - 4
    assert stats["cocite"]["removed_benchmark"] == 4
    assert stats["cocite"]["removed_benchmark_by"] == {"title": 0, "paper_id": 3, "abstract": 1, "containment": 0}
    from aspire.benchmarks.heldout import excluded_papers

    held, counts = excluded_papers(str(shared_data), "test")
    assert stats["benchmark_titles"] == counts
    assert counts["paper_ids"] == len(held.paper_ids) >= 1370 + 3 and counts["abstracts"] == len(held.abstracts) > 0
    assert all(held.reason(pid, "", None) == "paper_id" for pid in THREE)
    assert all(held.reason("another id", "", cited[pid]["abstract"]) == "abstract" for pid in THREE)  # either rule


def test_the_real_cocite_pipeline_s_train_split_loses_j05_1004_and_c04_1100(tiny_model_dir, tmp_path, shared_data):
    """`aspire data run-all` on the real co-citation file (its context2doc test sentences left out, as the command
    does): J05-1004 and C04-1100 are in the train split, cited by training sentences, with an empty title; the
    `crop` / `title` source kept them (C04-1073's contexts are filtered out by the default settings)."""
    from aspire.benchmarks.context2doc import held_out_for
    from aspire.data.cocite import run_all
    from aspire.train.data import split_paper_ids

    records = shared_data / "cocite-acl" / "cocitations.jsonl"
    examples = run_all(records, tmp_path / "cocite", held_out=held_out_for(records, shared_data))
    papers, stats = _source(tiny_model_dir, examples, tmp_path, shared_data)
    cfg = tiny_config(tiny_model_dir, examples, tmp_path / "run")
    train = split_paper_ids(cfg.data, "train")
    assert {"J05-1004", "C04-1100"} <= train and "C04-1073" not in train
    ids = {p.paper_id for p in papers}
    assert not ids & set(THREE)
    assert stats["cocite"]["removed_benchmark_by"]["paper_id"] == 2  # 355 by title, as before, and these two
    assert stats["cocite"]["removed_benchmark"] == sum(stats["cocite"]["removed_benchmark_by"].values())


def _acl_file(tmp_path: Path, shared_data: Path) -> tuple[Path, str]:
    """An ACL file of five records: four benchmark papers a title cannot name, and one other paper (K1)."""
    from aspire.benchmarks.acl_formats import heldout_ids

    csf = " ".join(_csfcube_abstract(shared_data))
    fmt = sorted(heldout_ids())[0]
    rows = [{"paper_id": "X1", "title": "", "abstract": csf},
            {"paper_id": "X2", "title": "基于中文的标题", "abstract": csf.rsplit(" ", 1)[0] + " changed."},
            {"paper_id": "J05-1004", "title": "", "abstract": "Another text. Of two sentences."},
            {"paper_id": fmt, "title": "", "abstract": "A format paper. Of two sentences."},
            {"paper_id": "K1", "title": "Kept paper", "abstract": "Nothing held out here. Two sentences."}]
    path = tmp_path / "acl.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path, fmt


def test_an_acl_paper_with_an_empty_title_and_a_benchmark_abstract_is_removed(tiny_model_dir, tmp_path, shared_data,
                                                                              monkeypatch):
    """The ACL source of the tasks (and so the teacher's and distill's sample, which read it the same way): two
    papers with an empty or Chinese title (normalised "") carrying a CSFCube abstract (one reworded past the key),
    and two with a held-out id and an empty title, were all kept."""
    from aspire.data.acl import read_acl

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    read_acl.cache_clear()
    path, fmt = _acl_file(tmp_path, shared_data)
    papers, stats = _source(tiny_model_dir, write_examples_dir(tmp_path / "examples"), tmp_path, shared_data,
                            "[acl]", f", acl_path: {path}")
    assert [p.paper_id for p in papers] == ["K1"]
    assert stats["acl"]["removed_benchmark"] == 4
    assert stats["acl"]["removed_benchmark_by"] == {"title": 0, "paper_id": 2, "abstract": 2, "containment": 0}
    from aspire.benchmarks.heldout import excluded_papers

    held, _ = excluded_papers(str(shared_data), "test")
    assert [p.paper_id for p in read_acl(path, held, 0)[0]] == ["K1"]  # what the teacher reads
    by_title = read_acl(path, held.titles, 0)  # a set of titles: the title rule alone, counted as before
    assert [p.paper_id for p in by_title[0]] == ["X1", "X2", "J05-1004", fmt, "K1"]
    assert "removed_benchmark_by" not in by_title[1]


def test_self_training_acl_queries_leave_out_a_benchmark_paper_without_a_title(tmp_path, shared_data, monkeypatch):
    from aspire.data.acl import read_acl
    from aspire.data.papers import Paper
    from aspire.train.self_training import SelfTrainingConfig, add_acl_queries

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    read_acl.cache_clear()
    path, _ = _acl_file(tmp_path, shared_data)
    bench = SimpleNamespace(queries={"q": "a citing sentence"}, candidates=[Paper("c1", "Kept paper", ["x."])])
    stats = add_acl_queries(bench, SelfTrainingConfig(acl_queries=5, acl_path=str(path),
                                                      benchmarks_dir=str(shared_data)))
    assert list(bench.queries) == ["q"]  # K1 is a candidate's title; the other four are benchmark papers
    assert stats["removed_benchmark_by"] == {"title": 1, "paper_id": 2, "abstract": 2, "containment": 0}
    assert stats["excluded_titles"]["candidates"] == 1 and stats["excluded_titles"]["paper_ids"] > 0


def test_held_out_names_nothing_by_an_empty_field():
    from aspire.data.acl import HeldOut, abstract_key

    held = HeldOut(titles=frozenset({"", "atitle"}), paper_ids=frozenset({"", "P1"}),
                   abstracts=frozenset({"", abstract_key(["One text.", "Two."])}))
    assert "" not in held.titles | held.paper_ids | held.abstracts
    assert held.reason("P2", "", "") is None and held.reason("P2", "中文", ["中文。"]) is None
    assert held.reason("P2", None, None) is None and held.reason(None, 5, 7) is None
    assert held.reason("P2", "A title!", "x") == "title" and held.reason("P1", "", "x") == "paper_id"
    assert held.reason("P2", "", "one text two") == "abstract"  # a list or a string: one key
    assert HeldOut(titles=frozenset({"t"})).by_title_only and not held.by_title_only


@pytest.mark.parametrize("field", ["paper_ids", "abstracts"])
def test_read_acl_keeps_separate_results_for_exclusions_that_differ_only_in_ids_or_abstracts(tmp_path, monkeypatch,
                                                                                           field):
    """`read_acl` caches by its exclusion: two that differ in ids or abstracts alone must not share a result."""
    from aspire.data.acl import HeldOut, abstract_key, read_acl

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    read_acl.cache_clear()
    path = tmp_path / "acl.jsonl"
    path.write_text(json.dumps({"paper_id": "P1", "title": "T", "abstract": "One text. Two."}) + "\n")
    assert len(read_acl(path, HeldOut(), 0)[0]) == 1
    value = {"paper_ids": frozenset({"P1"}), "abstracts": frozenset({abstract_key("One text. Two.")})}[field]
    assert read_acl(path, HeldOut(**{field: value}), 0)[0] == []
