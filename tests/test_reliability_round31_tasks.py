"""Round 31, multi-task training pieces: the distill task's `views` and `neighbours` against what it can give (a
request it cannot meet was met short, unsaid), and the mixing sampler's DDP shards against a brute-force union."""

from __future__ import annotations

from collections import Counter

import pytest

from aspire.train.mixing import MixSampler
from aspire.train.tasks import build_tasks
from tests.test_distill import _distill_config, acl_file, teacher_dir  # noqa: F401  (fixtures: 30 ACL papers, teacher)

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")


def _distill(tiny_model_dir, examples_dir, acl_file, teacher_dir, tmp_path, **keys):  # noqa: F811
    cfg = _distill_config(tiny_model_dir, examples_dir, tmp_path / "run", acl_file, teacher_dir)
    for key, value in keys.items():
        setattr(cfg.tasks[1], key, value)
    return cfg


# ---- distill: views and neighbours -------------------------------------------------------------------------------
def test_distill_refuses_more_views_than_neighbours(tiny_model_dir, examples_dir, acl_file, teacher_dir,  # noqa: F811
                                                    tmp_path):
    """views=4 of neighbours=3: each paper got 3 pairs, not the 4 asked for, said nowhere."""
    cfg = _distill(tiny_model_dir, examples_dir, acl_file, teacher_dir, tmp_path, views=4, neighbours=3)
    with pytest.raises(ValueError, match=r"distill task: views=4 > neighbours=3"):
        build_tasks(cfg, "train")
    cfg = _distill(tiny_model_dir, examples_dir, acl_file, teacher_dir, tmp_path, views=3, neighbours=3)
    part = build_tasks(cfg, "train").parts[1]  # views == neighbours: every neighbour, once
    assert Counter(e.query_id for e in part.examples) == Counter({pid: 3 for pid in part.papers})
    assert "fewer_neighbours_than_views" not in part.stats and "without_near_negative" not in part.stats


def test_distill_refuses_near_negatives_with_one_neighbour(tiny_model_dir, examples_dir, acl_file,  # noqa: F811
                                                           teacher_dir, tmp_path):  # noqa: F811
    """near_negatives with neighbours=1: the one neighbour is the partner, so every pair's negative was None; the
    option was accepted and did nothing."""
    cfg = _distill(tiny_model_dir, examples_dir, acl_file, teacher_dir, tmp_path, views=1, neighbours=1,
                   near_negatives=True)
    with pytest.raises(ValueError, match=r"near_negatives needs neighbours >= 2.*got neighbours=1"):
        build_tasks(cfg, "train")


def test_distill_counts_papers_of_a_small_split_short_of_views(tiny_model_dir, examples_dir, acl_file,  # noqa: F811
                                                               teacher_dir, tmp_path):  # noqa: F811
    """The dev split (dev_share 0.3 of 30 papers) holds fewer papers than views + 1: each of its papers has only the
    split's other papers as neighbours and got fewer pairs than `views`; now counted, as a loop over the papers gives."""
    cfg = _distill(tiny_model_dir, examples_dir, acl_file, teacher_dir, tmp_path, views=12, neighbours=12,
                   near_negatives=True)
    for split in ("train", "dev"):
        part = build_tasks(cfg, split).parts[1]
        n = len(part.papers)
        pairs = Counter(e.query_id for e in part.examples)
        assert all(pairs[pid] == min(12, n - 1) for pid in part.papers)  # every other paper, up to views
        short = sum(pairs[pid] < 12 for pid in part.papers)
        assert part.stats.get("fewer_neighbours_than_views", 0) == short
        assert part.stats.get("without_near_negative", 0) == sum(e.negative is None for e in part.examples)
        if split == "dev":
            assert 2 <= n < 13 and short == n  # the case in point: every dev paper is short


# ---- mixing: DDP shards ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["mixed", "alternating"])
def test_ddp_ranks_split_each_micro_batch_of_one_rank_run(mode):
    """Two ranks' micro-batches are disjoint, and each task's examples over an epoch are drawn once a pass: the union
    of both ranks' task-t indices over a pass is that many distinct examples of task t's own range."""
    sizes, offsets = [40, 24], [0, 40]
    ranks = [list(MixSampler(sizes, offsets, mode, [3, 1], 4, seed=9, epoch=0, rank=r, world_size=2)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == sum(sizes) // 8
    for a, b in zip(*ranks):
        assert not set(a) & set(b) and len(a) == len(b) == 4
    tasks = Counter()
    for t, (size, offset) in enumerate(zip(sizes, offsets)):
        own = [i for rank in ranks for batch in rank for i in batch if offset <= i < offset + size]
        tasks[t] = len(own)
        chunk = 2 * ({"mixed": [3, 1], "alternating": [4, 4]}[mode][t])  # both ranks' pairs of one micro-batch
        assert len(set(own)) == min(len(own), size - size % chunk)  # no example twice within a pass
    expected = {"mixed": {0: 3 * 8 * 2, 1: 1 * 8 * 2}, "alternating": {0: 6 * 8, 1: 2 * 8}}[mode]
    assert dict(tasks) == expected  # 8 micro-batches: mixed 3 + 1 pairs a rank each; alternating 6 of task 0, 2 of 1
