"""Round 53: a crop pair's two sides never have the same text (the second span is redrawn, bounded, seeded by the
paper); an abstract with no two spans of different text gives no pair and is counted (`no_two_different_spans`)."""

from __future__ import annotations

import itertools

from aspire.data.papers import Paper
from aspire.train import tasks as tasks_mod
from aspire.train.config import TaskConfig
from aspire.train.tasks import crop_pairs, crop_task


def _sides(examples, crops):
    text = {c.paper_id: c.sentences for c in crops}
    return [(text[e.query_id], text[e.positive_id]) for e in examples]


def _spans(sentences, lo, hi):
    """Every contiguous run of lo..hi sentences (brute force)."""
    n = len(sentences)
    return {tuple(sentences[s:s + k]) for k in range(min(lo, n), min(hi, n) + 1) for s in range(n - k + 1)}


def test_two_sentence_papers_never_pair_one_text_twice():
    # old code: with span 1..3 a 2-sentence abstract gave the same text on both sides in about 1 pair of 3
    task = TaskConfig(name="crop", span_min=1, span_max=3, views=8)
    same = 0
    for i in range(200):
        paper = Paper(f"P{i}", "t", [f"first {i}.", f"second {i}."])
        examples, crops = crop_pairs(paper, task, 0)
        assert len(examples) == 8 and len(crops) == 16
        for a, b in _sides(examples, crops):
            assert tuple(a) in _spans(paper.sentences, 1, 3) and tuple(b) in _spans(paper.sentences, 1, 3)
            same += a == b
    assert same == 0


def test_every_different_pair_of_spans_is_still_drawn():
    # the redraw leaves the pair random: over many papers every ordered pair of different spans shows up
    task = TaskConfig(name="crop", span_min=1, span_max=2, views=4)
    seen = set()
    for i in range(300):
        sents = ["a.", "b.", "c."]
        examples, crops = crop_pairs(Paper(f"Q{i}", "t", sents), task, 0)
        seen.update((tuple(a), tuple(b)) for a, b in _sides(examples, crops))
    spans = _spans(["a.", "b.", "c."], 1, 2)
    assert seen == {(a, b) for a, b in itertools.permutations(spans, 2)}


def test_repeated_sentences_are_compared_by_text():
    # two spans at different places with one text are the same text: never a pair
    paper = Paper("R", "t", ["same.", "same.", "other."])
    examples, crops = crop_pairs(paper, TaskConfig(name="crop", span_min=1, span_max=1, views=20), 0)
    assert len(examples) == 20
    assert all(a != b for a, b in _sides(examples, crops))


def test_a_paper_with_one_span_text_only_gives_no_pair_and_is_counted(monkeypatch):
    papers = [Paper("two", "t", ["x.", "y."]),                  # span_min 2 >= 2 sentences: one span only
              Paper("alike", "t", ["z.", "z.", "z."]),          # every span of 2..3 of them: 2 texts, kept
              Paper("one", "t", ["only."]),                    # fewer than two sentences
              Paper("ok", "t", [f"s{k}." for k in range(5)])]
    assert crop_pairs(papers[0], TaskConfig(name="crop", span_min=2, span_max=3), 0) == ([], [])
    assert crop_pairs(Paper("same", "t", ["z.", "z."]), TaskConfig(name="crop", span_min=1, span_max=1), 0) == ([], [])
    monkeypatch.setattr(tasks_mod, "source_papers", lambda cfg, task, split, valid: (list(papers), {"in_split": 4}))
    data = crop_task(None, TaskConfig(name="crop", span_min=2, span_max=3, views=2), "train", 0)
    assert data.stats["fewer_than_two_sentences"] == 1
    assert data.stats["no_two_different_spans"] == 1
    assert sorted({e.source for e in data.examples}) == ["alike", "ok"]
    assert all(a != b for a, b in _sides(data.examples, data.papers.values()))
    # no such paper: no such key (the stats of a run without them are unchanged)
    monkeypatch.setattr(tasks_mod, "source_papers", lambda cfg, task, split, valid: (papers[2:], {"in_split": 2}))
    assert "no_two_different_spans" not in crop_task(None, TaskConfig(name="crop"), "train", 0).stats


def test_pairs_are_the_same_every_call_and_differ_by_paper_id():
    task = TaskConfig(name="crop", span_min=1, span_max=3, views=5)
    sents = [f"s{k}." for k in range(3)]
    first = crop_pairs(Paper("D1", "t", sents), task, 0)
    assert crop_pairs(Paper("D1", "t", list(sents)), task, 0) == first
    assert any(crop_pairs(Paper(f"D{i}", "t", sents), task, 0)[1] != [
        Paper(c.paper_id.replace("D1", f"D{i}"), "", c.sentences) for c in first[1]] for i in range(2, 6))


def test_the_redraw_fallback_picks_a_different_text(monkeypatch):
    # with no redraws left the second span comes from the spans of different text, deterministically
    monkeypatch.setattr(tasks_mod, "CROP_REDRAWS", 0)
    task = TaskConfig(name="crop", span_min=1, span_max=2, views=10)
    for i in range(50):
        paper = Paper(f"F{i}", "t", ["a.", "b."])
        examples, crops = crop_pairs(paper, task, 0)
        assert len(examples) == 10 and all(a != b for a, b in _sides(examples, crops))
        assert crop_pairs(paper, task, 0) == (examples, crops)
