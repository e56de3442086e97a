"""Round 41, training tasks: a co-citation dev-only paper came back into the train pairs through the ACL source; the
author and crop pairs against brute-force loops; the dev/train split by hash disjoint and stable."""

from __future__ import annotations

import json
import random

from aspire.benchmarks.same_author import author_key
from aspire.config import from_dict
from aspire.data.papers import Paper
from aspire.train.config import TaskConfig
from aspire.train.data import split_paper_ids
from aspire.train.tasks import _in_dev, author_pairs, crop_pairs, source_papers
from tests.test_train import tiny_config


def test_a_cocite_dev_only_paper_stays_out_of_the_acl_source(tiny_model_dir, examples_dir, tmp_path):
    """`sources: [cocite, acl]`: a paper only the co-citation dev split names is kept out of the cocite source (its
    dev loss is taken on it), but its ACL record was used, so the train crops held the dev paper; now left out and
    counted (`acl.in_cocite_dev_split`)."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run")
    dev_only = sorted(split_paper_ids(cfg.data, "dev") - split_paper_ids(cfg.data, "train"))
    assert dev_only
    path = tmp_path / "acl.jsonl"
    rows = [{"paper_id": pid, "title": f"acl title {i}", "abstract": ["a model.", "the data.", "results."]}
            for i, pid in enumerate([dev_only[0], "A1"])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = f"{{name: crop, sources: [cocite, acl], acl_path: {path}, benchmarks_dir: null, dev_share: 0.0}}"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", f"tasks=[{task}]")
    papers, stats = source_papers(cfg, cfg.tasks[0], "train", ("cocite", "acl"))
    ids = {p.paper_id for p in papers}
    assert dev_only[0] not in ids and "A1" in ids
    assert stats["acl"]["in_cocite_dev_split"] == 1
    assert stats["in_split"] == stats["cocite"]["used"] + 1
    acl_only = f"{{name: crop, sources: [acl], acl_path: {path}, benchmarks_dir: null, dev_share: 0.0}}"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", f"tasks=[{acl_only}]")
    papers, stats = source_papers(cfg, cfg.tasks[0], "train", ("cocite", "acl"))  # ACL alone: the file as it is
    assert {p.paper_id for p in papers} == {dev_only[0], "A1"} and "in_cocite_dev_split" not in stats["acl"]


def _task(**keys) -> TaskConfig:
    return from_dict(TaskConfig, {"name": "author", "sources": ["acl"], **keys})


def test_author_pairs_match_a_brute_force_count_of_shared_linking_authors():
    rng = random.Random(3)
    names = ["Ann Lee", "ann  lee", "Bo Chen", "Cy Diaz", "Dee Eve", "Özateş", "O\u0308zates\u0327", "Fay Gu"]
    papers = [Paper(f"P{i}", f"t{i}", ["s."], extra={"authors": rng.sample(names, rng.randint(0, 4))})
              for i in range(14)]
    for min_shared, cap, views in [(1, 100, 3), (2, 100, 2), (1, 4, 1), (2, 5, 5)]:
        task = _task(min_shared_authors=min_shared, max_author_papers=cap, views=views)
        examples, stats = author_pairs(papers, task, 0)
        keys = [{author_key(n) for n in p.extra["authors"]} for p in papers]
        count = {}
        for k in set().union(*keys):
            count[k] = sum(k in ks for ks in keys)
        linking = {k for k, n in count.items() if 2 <= n <= cap}
        assert stats["authors"] == len(count) and stats["authors_linking"] == len(linking)
        assert stats["authors_over_max"] == sum(n > cap for n in count.values())
        lonely = 0
        for i, p in enumerate(papers):
            partners = {papers[j].paper_id for j in range(len(papers))
                        if j != i and len(keys[i] & keys[j] & linking) >= min_shared}
            mine = [e for e in examples if e.query_id == p.paper_id]
            lonely += not partners
            assert len(mine) == min(views, len(partners))
            assert {e.positive_id for e in mine} <= partners and len({e.positive_id for e in mine}) == len(mine)
            sharing = {papers[j].paper_id for j in range(len(papers)) if j != i and keys[i] & keys[j] & linking}
            assert all(set(e.members) == {p.paper_id} | sharing for e in mine)
        assert stats["papers_without_partner"] == lonely


def test_crop_spans_are_contiguous_runs_of_the_abstract_within_the_span_bounds():
    for n in range(1, 8):
        paper = Paper(f"C{n}", "t", [f"sentence {k}." for k in range(n)])
        for lo, hi in [(1, 3), (2, 2), (3, 9)]:
            task = from_dict(TaskConfig, {"name": "crop", "span_min": lo, "span_max": hi, "views": 3})
            examples, crops = crop_pairs(paper, task, 0)
            if n < 2 or lo >= n:  # one span only (the whole abstract): no pair of two texts (round 53)
                assert examples == [] and crops == []
                continue
            assert len(examples) == 3 and len(crops) == 6
            assert all(crops[i].sentences != crops[i + 1].sentences for i in range(0, 6, 2))
            for c in crops:
                k = len(c.sentences)
                assert min(lo, n) <= k <= min(hi, n)
                start = int(c.sentences[0].split()[1].rstrip("."))
                assert c.sentences == paper.sentences[start:start + k]
            assert crops == crop_pairs(paper, task, 0)[1]  # the same draws every call


def test_dev_assignment_by_hash_is_stable_and_grows_with_the_share():
    ids = [f"W{i}" for i in range(2000)]
    for share in (0.0, 0.05, 0.3):
        dev = {p for p in ids if _in_dev(p, share)}
        assert dev == {p for p in ids if _in_dev(p, share)}
        assert abs(len(dev) / len(ids) - share) < 0.04
    assert {p for p in ids if _in_dev(p, 0.05)} <= {p for p in ids if _in_dev(p, 0.3)}
