"""Round 11, training data and tasks checked against references: the batches' groups and hard-negative rows
against the co-cited sets brute-forced from the examples folder, the tasks' pairs against their docstrings
(no co-citation dev paper among the crop / title abstracts, no in-batch negative cited by the same text), the
union of the tasks' papers, and the multi-task sampler against its definition."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict

import pytest
import torch

from aspire.benchmarks.context2doc import Context2Doc
from aspire.data.papers import Paper
from aspire.losses import in_batch_negative_mask
from aspire.train.config import Config, DataConfig, TaskConfig
from aspire.train.data import EpochBatchSampler, Example, TripletCollator, load_split
from aspire.train.mixing import MixSampler, split_batch
from aspire.train.tasks import MultiTaskData, TaskData, context2doc_task, crop_task, title_task


def _cocited(examples_dir, split: str) -> dict[str, set[str]]:
    """Brute force: paper -> every paper of every set of `split` holding it (itself included)."""
    out: dict[str, set[str]] = defaultdict(set)
    for line in open(examples_dir / f"examples.{split}.jsonl"):
        for sid in json.loads(line)["set_ids"]:
            for pid in sid.split("|"):
                out[pid] |= set(sid.split("|"))
    return out


def _named(examples_dir, split: str) -> set[str]:
    return {pid for line in open(examples_dir / f"examples.{split}.jsonl")
            for sid in json.loads(line)["set_ids"] for pid in sid.split("|")}


def test_groups_and_hard_rows_match_the_cocited_sets_brute_forced(examples_dir, tmp_path):
    """Every batch of an epoch: row r's group marks exactly the papers co-cited with its anchor in the split, the
    in-batch mask allows exactly the other positives not co-cited with it, and each hard negative sits on its own
    anchor's row; the epoch's batches hold each example at most once, the whole epoch but the tail."""
    root = tmp_path / "ex"
    shutil.copytree(examples_dir, root)
    lines = [json.loads(x) for x in open(root / "examples.train.jsonl")]
    hard = {}  # a hard negative for every other anchor: the first paper of a set that is not its own
    sets = [sid.split("|") for x in lines for sid in x["set_ids"]]
    co = _cocited(root, "train")
    for x in lines[::2]:
        hard[x["query_id"]] = [next(p for s in sets for p in s if p not in co[x["query_id"]])]
    path = tmp_path / "hard.jsonl"
    path.write_text("".join(json.dumps({"paper_id": k, "negatives": v}) + "\n" for k, v in hard.items()))
    data = load_split(DataConfig(examples_dir=str(root), hard_negatives=str(path)), "train")
    collate = TripletCollator(lambda papers, tasks: papers, data.papers)
    for B in (3, 5):
        sampler = EpochBatchSampler(len(data), B, seed=4, epoch=1)
        seen = [i for batch in sampler for i in batch]
        assert len(seen) == len(set(seen)) == len(data) // B * B
        for batch in sampler:
            ex = [data[i] for i in batch]
            tb = collate(ex)
            allowed = in_batch_negative_mask(tb.group_ids, tb.pos_ids)
            for r, e in enumerate(ex):
                assert set(e.members) == co[e.query_id]
                assert [tb.inputs[r].paper_id, tb.inputs[B + r].paper_id] == [e.query_id, e.positive_id]
                assert allowed[r].tolist() == [f.positive_id not in co[e.query_id] for f in ex]
                if e.query_id in hard:
                    assert e.negative == hard[e.query_id][0]
                    assert tb.inputs[2 * B + int(tb.hard_rows[r])].paper_id == e.negative
                else:
                    assert int(tb.hard_rows[r]) == -1


def test_a_cocited_set_naming_a_paper_without_abstract_is_refused_at_load(examples_dir, tmp_path):
    """A set naming a paper absent from abstracts.jsonl loaded, then the first batch holding one of its papers
    failed mid-training with KeyError: 'ghost' (its integer group id did not exist)."""
    root = tmp_path / "ex"
    shutil.copytree(examples_dir, root)
    lines = [json.loads(x) for x in open(root / "examples.train.jsonl")]
    lines[-1]["set_ids"] = [lines[-1]["set_ids"][0] + "|zz_ghost"]
    (root / "examples.train.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(ValueError, match=rf"examples\.train\.jsonl:{len(lines)}: paper 'zz_ghost' has no abstract in "
                                         r"abstracts\.jsonl \(a paper of the co-cited set '.*\|zz_ghost'\)"):
        load_split(DataConfig(examples_dir=str(root), max_examples=2), "train")


def _sampled(examples_dir, name: str) -> Config:
    return Config(data=DataConfig(examples_dir=str(examples_dir)),
                  tasks=[TaskConfig(name=name, sources=["cocite"], benchmarks_dir=None, dev_share=0.0)])


@pytest.mark.parametrize("build", [crop_task, title_task])
def test_crop_and_title_leave_out_the_papers_only_the_cocite_dev_split_names(build, examples_dir):
    """`sources: [cocite]` read every abstract of the examples folder: the papers of the dev sets (whose dev loss
    selects the model) were trained on as crop / title pairs. Now the train split's papers alone, counted."""
    cfg = _sampled(examples_dir, build.__name__[:-5])
    data = build(cfg, cfg.tasks[0], "train", 0)
    train, dev = _named(examples_dir, "train"), _named(examples_dir, "dev")
    assert dev - train  # the fixture has papers only its dev split names
    used = {e.source for e in data.examples}
    assert used and used <= train
    assert data.stats["cocite"]["not_in_train_split"] == len(dev - train)
    assert data.stats["cocite"]["used"] == len(train)


def test_two_tasks_giving_one_paper_two_texts_are_refused():
    """MultiTaskData kept the last task's text of an id silently: the other task's pairs (and its alignment
    positions) read another abstract. One text for both is fine."""
    def part(name: str, sentences: list[str]) -> TaskData:
        papers = {"A": Paper("A", "t", sentences), "B": Paper("B", "u", ["b."])}
        return TaskData(name, [Example("A", "B", ("A", "B"), None, (1, 0))], papers)

    tasks = [TaskConfig(name="cocite"), TaskConfig(name="context2doc")]
    same = MultiTaskData([part("cocite", ["a.", "b."]), part("context2doc", ["a.", "b."])], tasks)
    assert same.papers["A"].sentences == ["a.", "b."]
    with pytest.raises(ValueError, match=r"paper 'A' has one text in task 'cocite' and another in task "
                                         r"'context2doc' .*2 / 3 sentences"):
        MultiTaskData([part("cocite", ["a.", "b."]), part("context2doc", ["a.", "c.", "b."])], tasks)


def test_context2doc_queries_of_one_text_keep_each_others_papers_out_of_their_negatives(monkeypatch):
    """Two citing sentences of one text (after marker removal; 3 such groups in the real train split) citing other
    papers: each one's positives were the other's in-batch negatives, the same anchor text pulled and pushed."""
    import aspire.benchmarks.context2doc as c2d

    cands = [Paper(p, p, [f"{p}."]) for p in ("P1", "P2", "P3", "P4")]
    queries = {"L1": "we use syntactic features.", "L2": "we use syntactic features.", "L3": "other text."}
    qrels = {"L1": {"P1": 1, "P2": 1}, "L2": {"P1": 1, "P3": 1}, "L3": {"P4": 1}}
    bench = Context2Doc("train", queries, qrels, cands, {q: "X" for q in queries}, left_out=["L9"])
    monkeypatch.setattr(c2d, "load_context2doc", lambda data_dir, split: bench)
    cfg = Config(tasks=[TaskConfig(name="context2doc")])
    data = context2doc_task(cfg, cfg.tasks[0], "train", 0)
    pairs = [(e.query_id, e.positive_id) for e in data.examples]
    assert pairs == [("ctx:L1", "P1"), ("ctx:L1", "P2"), ("ctx:L2", "P1"), ("ctx:L2", "P3"), ("ctx:L3", "P4")]
    collate = TripletCollator(lambda papers, tasks: papers, data.papers)
    batch = collate(data.examples)
    allowed = in_batch_negative_mask(batch.group_ids, batch.pos_ids)
    cited = {"ctx:L1": {"P1", "P2", "P3"}, "ctx:L2": {"P1", "P2", "P3"}, "ctx:L3": {"P4"}}  # by text
    for r, e in enumerate(data.examples):
        assert allowed[r].tolist() == [f.positive_id not in cited[e.query_id] for f in data.examples]
    assert data.stats == {"queries": 3, "left_out_test_twins": 1, "queries_repeating_a_text": 1}


def _reference_chunk(sizes, offsets, seed, t, j, size, world, rank):
    """The documented stream of task t: chunk j of seeded permutations, one a pass, cut into chunks, sharded."""
    per_pass = sizes[t] // (size * world)
    gen = torch.Generator().manual_seed((seed * 1_000_003 + t) * 1_000_003 + j // per_pass)
    perm = torch.randperm(sizes[t], generator=gen)
    lo = (j % per_pass) * size * world + rank * size
    return (perm[lo : lo + size] + offsets[t]).tolist()


def test_mixed_batches_follow_the_definition_and_draw_each_permutation_once_a_pass(monkeypatch):
    """A mixed batch reads every task's stream, and the sampler kept one permutation in all: it drew each task's
    permutation again for every batch (0.1 s a task a batch at 2.6M pairs). The batches are the documented ones,
    exact per-task shares in every batch, each pass of a task's examples without repeats, and resumable."""
    sizes, ratios, B, W = [40, 23, 91], [1.0, 0.5, 2.0], 7, 2
    offsets = [0, 40, 63]
    calls = Counter()
    real = torch.randperm

    def counting(n, *args, **kwargs):
        calls[n] += 1
        return real(n, *args, **kwargs)

    samplers = [MixSampler(sizes, offsets, "mixed", ratios, B, seed=3, epoch=2, rank=r, world_size=W) for r in range(W)]
    shares = split_batch(B, ratios)
    assert samplers[0].shares == shares == [2, 1, 4]
    monkeypatch.setattr(torch, "randperm", counting)
    batches = [list(s) for s in samplers]
    monkeypatch.setattr(torch, "randperm", real)
    n = samplers[0].num_batches
    passes = {t: (3 * n) // (sizes[t] // (shares[t] * W)) + 1 for t in range(3)}  # epoch 2: g from 2n to 3n
    assert all(calls[sizes[t]] <= W * (passes[t] + 1) for t in range(3)), calls
    task = lambda i: max(t for t, o in enumerate(offsets) if i >= o)  # noqa: E731
    for k in range(n):
        for r in range(W):
            want = [i for t in range(3) for i in _reference_chunk(sizes, offsets, 3, t, 2 * n + k, shares[t], W, r)]
            assert batches[r][k] == want
            assert Counter(task(i) for i in batches[r][k]) == {t: shares[t] for t in range(3)}
    resumed = list(MixSampler(sizes, offsets, "mixed", ratios, B, seed=3, epoch=2, start=5, rank=1, world_size=W))
    assert resumed == batches[1][5:]


def test_alternating_batches_meet_the_cycle_counts_exactly():
    """Over whole cycles each task gets exactly its largest-remainder share of the 60 slots, and every batch is one
    task's chunk of the full batch size, the stream of each task the documented one."""
    sizes, offsets, ratios = [50, 30], [0, 50], [2.0, 1.0]
    sampler = MixSampler(sizes, offsets, "alternating", ratios, 5, seed=1, epoch=0)
    got = [sampler.batch(g) for g in range(120)]
    tasks = [0 if max(b) < 50 else 1 for b in got]
    assert all(all((i < 50) == (tasks[g] == 0) for i in b) and len(b) == 5 for g, b in enumerate(got))
    assert Counter(tasks) == {0: 80, 1: 40}
    seen = defaultdict(int)
    for g, b in enumerate(got):
        t = tasks[g]
        assert b == _reference_chunk(sizes, offsets, 1, t, seen[t], 5, 1, 0)
        seen[t] += 1
