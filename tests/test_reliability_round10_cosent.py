"""Round 10, CoSentBert and the data readers: every pair trained in every epoch, warmup as a share of the steps at
1.0, dev retrieval not scored on a text's own copy, no sentence of invisible characters, S2ORC citation marks that
keep the text, S2ORC abstract sentences checked where read, the align teacher's input length restored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aspire.data.align import AlignConfig, align_examples
from aspire.data.cocite.config import IngestConfig
from aspire.data.papers import read_papers
from aspire.data.s2orc import mine_s2orc
from aspire.data.sentences import get_splitter
from aspire.encoders.cosentbert import CoSentBertConfig, evaluate_contexts, load_sentence_model, train_cosentbert
from aspire.io import DataError
from tests.test_align import _examples_dir as _align_examples_dir
from tests.test_align import _HashTeacher
from tests.test_cosentbert import _examples_dir, _group, _write_groups


def _record_training(monkeypatch) -> tuple[list[int], list[float]]:
    """(rows of each trained batch, learning rate of each logged step) of the next CoSentBert training run."""
    from sentence_transformers import SentenceTransformerTrainer

    rows: list[int] = []
    rates: list[float] = []
    step, log = SentenceTransformerTrainer.training_step, SentenceTransformerTrainer.log

    def training_step(self, model, inputs, *args, **kwargs):
        rows.append(next(v.shape[0] for k, v in inputs.items() if k.endswith("input_ids")))
        return step(self, model, inputs, *args, **kwargs)

    def logged(self, logs, *args, **kwargs):
        if "learning_rate" in logs:
            rates.append(float(logs["learning_rate"]))
        return log(self, logs, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformerTrainer, "training_step", training_step)
    monkeypatch.setattr(SentenceTransformerTrainer, "log", logged)
    return rows, rates


def test_every_pair_is_trained_in_every_epoch(tmp_path, tiny_model_dir, monkeypatch):
    """With seed 9 the 24 pairs pack into 5 batches in the first epoch and 6 in the second; the trainer sized every
    epoch by the first and left the second epoch's last batch (a pair) untrained: 47 rows of 48."""
    d = _examples_dir(tmp_path)
    rows, _ = _record_training(monkeypatch)
    cfg = CoSentBertConfig(base_model=str(tiny_model_dir), epochs=2, batch_size=5, max_seq_length=16, seed=9)
    report = train_cosentbert(d, tmp_path / "out", cfg)
    assert report["train_pairs"] == 24
    assert sum(rows) == 2 * 24 and report["steps"] == len(rows)


def test_warmup_of_one_warms_up_over_every_step(tmp_path, tiny_model_dir, monkeypatch):
    """`warmup` is a share of the steps; at 1.0 the trainer read it as one step and decayed from step 2."""
    d = _examples_dir(tmp_path)
    _, rates = _record_training(monkeypatch)
    cfg = CoSentBertConfig(base_model=str(tiny_model_dir), epochs=1, batch_size=4, max_seq_length=16, warmup=1.0,
                           logging_steps=1)
    report = train_cosentbert(d, tmp_path / "out", cfg)
    assert report["steps"] >= 5 and len(rates) == report["steps"]
    assert all(a < b for a, b in zip(rates, rates[1:])), rates


def test_dev_retrieval_counts_a_repeated_text_once(tmp_path, tiny_model_dir):
    """A text twice in one set was its own nearest row: a hit for each copy, inflating acc@1 (training pairs
    already take a set's texts once)."""
    path = _write_groups(tmp_path / "groups.dev.jsonl",
                         [_group("A|B", ["the model text", "the model text"]), _group("C|D", ["the paper", "a task"])])
    report = evaluate_contexts(load_sentence_model(tiny_model_dir), path)
    assert report["contexts"] == 3 and report["queries"] == 2


@pytest.mark.parametrize("name", ["pysbd_rule_guarded", "spacy_sentencizer"])
def test_no_sentence_of_invisible_characters(name):
    """Real ACL abstracts (2021.ranlp-1.17, 2025.bea-1.82, L06-1090) end in a stray U+FEFF or U+0094 after the last
    full stop: it was a sentence of its own, and the papers reader rejected the whole paper for it."""
    splitter = get_splitter(name)
    text = "Our method is simple. It outperforms baselines in terms of BLEU score. \ufeff"
    assert splitter.split(text) == ["Our method is simple.", "It outperforms baselines in terms of BLEU score. \ufeff"]
    assert splitter.split("\ufeff We start here. Then we go on.") == ["\ufeff We start here.", "Then we go on."]
    assert splitter.split("  \x94  ") == ["\x94"]  # nothing visible at all: one piece, for the reader to name


def test_papers_reader_keeps_a_paper_whose_abstract_ends_in_a_stray_mark(tmp_path):
    path = tmp_path / "papers.jsonl"
    path.write_text(json.dumps({"paper_id": "L06-1090", "title": "Word spaces", "abstract":
                                "We ask \x93how good is a word space?\x94 We answer it. \x94"}) + "\n")
    result = read_papers(path, skip_bad=True)
    assert not result.rejected
    (paper,) = result.papers
    assert paper.sentences[-1].endswith("We answer it. \x94")


def _s2orc(tmp_path: Path, cite_spans: list[tuple[int, int, str]], abstracts: list[dict]) -> tuple[Path, Path]:
    text = "We follow prior work (Smith 2019; Lee 2020) closely and add more words here."
    spans = [{"start": text.index(s), "end": text.index(s) + len(s), "ref_id": ref} for s, ref in
             ((text[a:b], ref) for a, b, ref in cite_spans)]
    paper = {"paper_id": "C1", "bib_entries": {"B0": {"title": "x", "link": "P1"}, "B1": {"title": "y", "link": "P2"}},
             "body_text": [{"text": text, "section": "Intro", "cite_spans": spans}]}
    full, abs_path = tmp_path / "full.jsonl", tmp_path / "abs.jsonl"
    full.write_text(json.dumps(paper) + "\n")
    abs_path.write_text("".join(json.dumps(a) + "\n" for a in abstracts))
    return full, abs_path


GOOD_ABSTRACTS = [{"paper_id": "P1", "title": "t", "abstract": ["One."]},
                  {"paper_id": "P2", "title": "t", "abstract": ["Two."]}]


def test_s2orc_citation_listed_twice_keeps_the_text(tmp_path):
    """Two cite spans over the same characters were each replaced from the end of the sentence: the second cut the
    text ("...work ([CIT]ely and add...")."""
    smith, lee = (22, 32), (34, 42)
    full, abs_path = _s2orc(tmp_path, [(*smith, "B0"), (*smith, "B0"), (*lee, "B1")], GOOD_ABSTRACTS)
    mine_s2orc(full, abs_path, tmp_path / "out", IngestConfig(splitter="regex"), held_out=set())
    (ctx,) = [json.loads(line) for line in (tmp_path / "out" / "contexts.jsonl").read_text().splitlines()]
    assert ctx["text_clean"] == "We follow prior work [CIT] closely and add more words here."
    assert ctx["cited_ids"] == ["P1", "P2"]


def test_s2orc_abstract_sentence_without_text_is_named_at_its_line(tmp_path):
    """A blank abstract sentence passed ingest and the filter and was refused by the papers reader stages later, in
    an intermediate abstracts file; input A refuses it where it is read."""
    abstracts = [GOOD_ABSTRACTS[0], {"paper_id": "P2", "title": "t", "abstract": ["Two.", "  "]}]
    full, abs_path = _s2orc(tmp_path, [(22, 32, "B0"), (34, 42, "B1")], abstracts)
    with pytest.raises(DataError, match=r"abs\.jsonl:2: paper 'P2': abstract\[1\] is empty"):
        mine_s2orc(full, abs_path, tmp_path / "out", IngestConfig(splitter="regex"), held_out=set())
    abs_path.write_text(json.dumps(GOOD_ABSTRACTS[0]) + "\n" + json.dumps(
        {"paper_id": "P2", "title": "t", "abstract": ["Two.", "\ufeff"]}) + "\n")
    report = mine_s2orc(full, abs_path, tmp_path / "skip", IngestConfig(splitter="regex", on_error="skip"),
                        held_out=set())
    assert report["bad_lines"] == 1 and "abstract[1] has no visible character" in report["bad_line_messages"][0]
    assert report["counts"]["contexts"] == 0  # P2 has no abstract: the sentence cites one paper with one


def test_align_restores_the_teachers_input_length(tmp_path):
    teacher = _HashTeacher()
    teacher.max_seq_length = 256
    align_examples(_align_examples_dir(tmp_path), teacher, tmp_path / "out", AlignConfig(max_seq_length=32))
    assert teacher.max_seq_length == 256
