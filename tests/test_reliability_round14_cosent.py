"""Round 14, CoSentBert, its sampler and the S2ORC-style reader checked against references: the symmetric loss against
a hand-written InfoNCE (sentence-transformers' per-direction form), dev retrieval against a brute-force rank with
ties counted against the model, batches without two sets sharing a co-cited pair (on the real co-citation data too),
and the S2ORC reader on the real co-citation records rewritten as full text, every sentence and citation counted."""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict

import pytest
import torch

from aspire.data.cocite.config import IngestConfig
from aspire.data.cocite.text import finish_marks, free_mark
from aspire.data.s2orc import RegexSentenceSplitter, mine_s2orc
from aspire.encoders.cosent_sampler import DistinctSetBatchSampler
from aspire.encoders.cosentbert import CoSentBertConfig, context_pairs, same_set_retrieval, train_cosentbert
from aspire.io import DataError
from tests.conftest import SHARED_DATA
from tests.test_cosentbert import _examples_dir, _write_groups
from tests.test_reliability_round10_cosent import GOOD_ABSTRACTS, _s2orc

COCITATIONS = SHARED_DATA / "cocite-acl" / "cocitations.jsonl"
needs_cocite = pytest.mark.skipif(not COCITATIONS.is_file(), reason=f"shared data not found at {COCITATIONS}")


# ---- the loss ------------------------------------------------------------------------------------------------------
class _Stop(Exception):
    pass


def _training_loss(monkeypatch, tmp_path, tiny_model_dir, **cfg):
    """The loss object `train_cosentbert` hands the trainer (the run stops there)."""
    from sentence_transformers import SentenceTransformerTrainer

    seen = {}

    def init(self, *args, **kwargs):
        seen["loss"] = kwargs["loss"]
        raise _Stop

    monkeypatch.setattr(SentenceTransformerTrainer, "__init__", init)
    with pytest.raises(_Stop):
        train_cosentbert(_examples_dir(tmp_path), tmp_path / "out",
                         CoSentBertConfig(base_model=str(tiny_model_dir), max_seq_length=16, **cfg))
    return seen["loss"]


def test_symmetric_loss_is_the_mean_of_the_two_directions(monkeypatch, tmp_path, tiny_model_dir):
    """symmetric=true put both directions in ONE softmax, the positive twice in its denominator: 10.117 where the
    symmetric InfoNCE (sentence-transformers' per_direction form) is 8.731 on the same batch, and a batch whose every
    pair is ranked first still lost log 2 = 0.693 instead of 0."""
    import torch.nn.functional as F

    loss = _training_loss(monkeypatch, tmp_path, tiny_model_dir, scale=20.0, symmetric=True)
    gen = torch.Generator().manual_seed(0)
    q, d = torch.randn(5, 8, generator=gen), torch.randn(5, 8, generator=gen)
    s = 20.0 * F.normalize(q, dim=-1) @ F.normalize(d, dim=-1).T  # (5, 5) scaled cosine
    target = torch.arange(5)
    reference = (F.cross_entropy(s, target) + F.cross_entropy(s.T, target)) / 2
    assert float(loss.compute_loss_from_embeddings([q, d], None)) == pytest.approx(float(reference), rel=1e-5)
    perfect = torch.eye(4)
    assert float(loss.compute_loss_from_embeddings([perfect, perfect], None)) == pytest.approx(0.0, abs=1e-6)

    one_way = _training_loss(monkeypatch, tmp_path / "b", tiny_model_dir, scale=20.0, symmetric=False)
    assert float(one_way.compute_loss_from_embeddings([q, d], None)) == pytest.approx(
        float(F.cross_entropy(s, target)), rel=1e-5)


# ---- dev retrieval -------------------------------------------------------------------------------------------------
def _brute_retrieval(emb: torch.Tensor, labels: list[str]) -> dict:
    """Rank of the first same-label row, every other-label row at least as similar ranked before it."""
    unit = torch.nn.functional.normalize(emb.double(), dim=-1)
    ranks = []
    for i in range(len(labels)):
        partners = [j for j in range(len(labels)) if j != i and labels[j] == labels[i]]
        if not partners:
            continue
        best = max(float(unit[i] @ unit[j]) for j in partners)
        ranks.append(1 + sum(float(unit[i] @ unit[j]) >= best - 1e-9 for j in range(len(labels))
                             if j != i and labels[j] != labels[i]))
    return {"queries": len(ranks), "acc@1": sum(r == 1 for r in ranks) / len(ranks),
            "mrr": sum(1 / r for r in ranks) / len(ranks)}


def test_a_collapsed_model_does_not_score_a_perfect_retrieval():
    """Ties went to the model: every text on one vector (a collapsed encoder) scored acc@1 1.0 and mrr 1.0."""
    labels = list("aabbcc")
    for emb in (torch.ones(6, 4), torch.zeros(6, 4)):
        got = same_set_retrieval(emb, labels)
        assert got["acc@1"] == 0.0 and got["mrr"] == pytest.approx(1 / 5)


def test_same_set_retrieval_matches_a_brute_force_rank_with_ties():
    gen = torch.Generator().manual_seed(4)
    for trial in range(20):
        palette = torch.randn(4, 3, generator=gen)
        emb = palette[torch.randint(0, 4, (12,), generator=gen)]  # rows on 4 vectors: many exact ties
        labels = [f"s{int(k)}" for k in torch.randint(0, 5, (12,), generator=gen)]
        got, want = same_set_retrieval(emb, labels), _brute_retrieval(emb, labels)
        assert got["queries"] == want["queries"]
        assert got["acc@1"] == pytest.approx(want["acc@1"]) and got["mrr"] == pytest.approx(want["mrr"]), trial


def test_a_non_finite_vector_is_refused_naming_its_row():
    """A NaN vector compared as never greater: every row holding one was a hit (acc@1 1.0)."""
    emb = torch.randn(4, 3)
    emb[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"emb row 2 \(label 'b'\) is not finite"):
        same_set_retrieval(emb, ["a", "a", "b", "b"])


# ---- the sampler ---------------------------------------------------------------------------------------------------
def _check_batches(batches: list[list[int]], groups: list[str], anchors: list[str], positives: list[str],
                   passes: int = 1) -> None:
    assert sorted(i for b in batches for i in b) == sorted(list(range(len(groups))) * passes)  # each row once a pass
    for b in batches:
        for i, j in itertools.combinations(b, 2):
            assert groups[i] != groups[j]
            assert len(set(groups[i].split("|")) & set(groups[j].split("|"))) < 2, (groups[i], groups[j])
            assert not {anchors[i], positives[i]} & {anchors[j], positives[j]}


def test_sets_sharing_a_co_cited_pair_never_share_a_batch():
    """{A,B} and {A,B,C} are two set ids, but both cite A and B together (one example, A|B, holds the contexts of
    both): with seed 0 the two rows below went into one batch, each one's positive the other's negative."""
    from datasets import Dataset

    groups = ["A|B", "A|B|C", "C|D", "E|F"]
    anchors, positives = ["a1", "b1", "c1", "d1"], ["a2", "b2", "c2", "d2"]
    data = Dataset.from_dict({"anchor": anchors, "positive": positives})
    for seed in range(10):
        sampler = DistinctSetBatchSampler(data, batch_size=4, drop_last=False, seed=seed, groups=groups)
        batches = list(sampler)
        _check_batches(batches, groups, anchors, positives)
        assert len(sampler) == len(batches)


@needs_cocite
def test_sampler_on_the_real_co_citation_sets(tmp_path):
    """The real contexts grouped by their exact cited set, as `aspire.data` groups them: 2 passes, every pair once a
    pass, no batch with two rows of one set, of two sets sharing a pair, or sharing a text; the same seed gives the
    same batches and `len` counts them."""
    from datasets import Dataset

    groups: dict[str, list[str]] = defaultdict(list)
    for line in COCITATIONS.open(encoding="utf-8"):
        rec = json.loads(line)
        ids = sorted({c["paper_id"] for c in rec["cited"]} - {rec["citing_paper_id"]})
        if len(ids) >= 2:
            groups["|".join(ids)].append(rec["context"])
    assert sum(map(len, groups.values())) >= 2500
    path = _write_groups(tmp_path / "groups.train.jsonl",
                         [{"set_id": sid, "contexts": texts, "contexts_clean": texts} for sid, texts in groups.items()])
    pairs = context_pairs(path, "contexts_clean", max_pairs_per_set=10, seed=13)
    sets = [g for *_, g in pairs]
    anchors, positives = [a for a, _, _ in pairs], [p for _, p, _ in pairs]
    overlapping = sum(len(set(a.split("|")) & set(b.split("|"))) >= 2
                      for a, b in itertools.combinations(sorted(set(sets)), 2))
    assert len(pairs) > 500 and overlapping > 10  # the real data has sets sharing a pair
    data = Dataset.from_dict({"anchor": anchors, "positive": positives})
    sampler = DistinctSetBatchSampler(data, batch_size=32, drop_last=False, seed=13, groups=sets, passes=2)
    batches = list(sampler)
    _check_batches(batches, sets, anchors, positives, passes=2)
    assert len(sampler) == len(batches)
    assert sum(len(b) == 32 for b in batches) >= 0.8 * len(batches)  # the constraint still fills most batches
    again = DistinctSetBatchSampler(data, batch_size=32, drop_last=False, seed=13, groups=sets, passes=2)
    assert list(again) == batches
    other = DistinctSetBatchSampler(data, batch_size=32, drop_last=False, seed=14, groups=sets, passes=2)
    assert list(other) != batches


# ---- the S2ORC reader ----------------------------------------------------------------------------------------------
def test_s2orc_cited_id_with_a_bar_is_refused_at_its_line(tmp_path):
    """An abstract id 'P|1' passed ingest and filter, then the group stage refused contexts.jsonl:1 of the filter's
    folder, stages later and away from the input line (input A refuses it at ingest)."""
    abstracts = [{"paper_id": "P|1", "title": "t", "abstract": ["One."]}, GOOD_ABSTRACTS[1]]
    full, abs_path = _s2orc(tmp_path, [(22, 32, "B0"), (34, 42, "B1")], abstracts)
    paper = json.loads(full.read_text())
    paper["bib_entries"]["B0"]["link"] = "P|1"
    full.write_text(json.dumps(paper) + "\n")
    with pytest.raises(DataError, match=r"abs\.jsonl:1: paper_id 'P\|1' holds '\|'"):
        mine_s2orc(full, abs_path, tmp_path / "out", IngestConfig(splitter="regex"), held_out=set())
    report = mine_s2orc(full, abs_path, tmp_path / "skip", IngestConfig(splitter="regex", on_error="skip"),
                        held_out=set())
    assert report["bad_lines"] == 1 and report["counts"]["contexts"] == 0


def test_s2orc_string_abstract_without_a_visible_character_is_refused_at_its_line(tmp_path):
    """A string abstract of zero-width spaces was one sentence of no visible character in the written abstracts,
    which the papers reader refuses stages later (a list abstract's sentence is refused where read)."""
    abstracts = [{"paper_id": "P1", "title": "t", "abstract": "\u200b\u200b"}, GOOD_ABSTRACTS[1]]
    full, abs_path = _s2orc(tmp_path, [(22, 32, "B0"), (34, 42, "B1")], abstracts)
    with pytest.raises(DataError, match=r"abs\.jsonl:1: paper 'P1': abstract has no visible character"):
        mine_s2orc(full, abs_path, tmp_path / "out", IngestConfig(splitter="regex"), held_out=set())
    abs_path.write_text("".join(json.dumps(a) + "\n" for a in [{**abstracts[0], "abstract": "  "}, abstracts[1]]))
    report = mine_s2orc(full, abs_path, tmp_path / "blank", IngestConfig(splitter="regex"), held_out=set())
    assert report["bad_lines"] == 0 and report["papers_with_abstract"] == 1  # blank: no abstract, as before


def test_s2orc_cite_span_naming_no_bib_entry_is_counted(tmp_path):
    """A ref_id missing from bib_entries linked no paper with nothing in the report to say so."""
    full, abs_path = _s2orc(tmp_path, [(22, 32, "B0"), (34, 42, "B9")], GOOD_ABSTRACTS)
    report = mine_s2orc(full, abs_path, tmp_path / "out", IngestConfig(splitter="regex"), held_out=set())
    counts = report["counts"]
    assert counts["cite_spans"] == 2 and counts["cite_spans_without_bib_entry"] == 1
    assert counts["dropped_fewer_than_2_linked"] == 1 and counts.get("contexts", 0) == 0


_MARKER = re.compile(r"\([^()]*\b(?:19|20)\d\d[a-z]?\b[^()]*\)")  # "(Brants, 2000)", "(Lin, 1998; Lin, 2002)"


@needs_cocite
def test_s2orc_reader_on_the_real_co_citation_records(tmp_path):
    """The 2,600 real records rewritten as S2ORC full text: a citing paper a line, each record's sentence a
    paragraph, its cited papers as bib entries whose cite spans sit on the sentence's parenthesised citations (in
    turn); the cited abstracts as the abstracts table. Every paragraph and cite span is counted, every sentence falls
    in exactly one bucket, and a one-sentence paragraph is kept exactly when it cites two papers other than its own
    (brute force over the records)."""
    records = [json.loads(line) for line in COCITATIONS.open(encoding="utf-8")]
    papers: dict[str, dict] = {}
    abstracts: dict[str, dict] = {}
    expected: dict[str, list[str]] = {}  # context_id -> cited ids, for the one-sentence paragraphs
    clean: dict[str, str] = {}  # context_id -> the text with each marker holding a cite span replaced
    one_sentence, n_spans = 0, 0
    splitter = RegexSentenceSplitter()
    for rec in records:
        pid, text = rec["citing_paper_id"], rec["context"]
        paper = papers.setdefault(pid, {"paper_id": pid, "body_text": [], "bib_entries": {}})
        marks = [m.span() for m in _MARKER.finditer(text)]
        spans = []
        for j, cited in enumerate(rec["cited"]):
            paper["bib_entries"][f"R{cited['paper_id']}"] = {"title": cited["title"], "link": cited["paper_id"]}
            abstracts.setdefault(cited["paper_id"], {"paper_id": cited["paper_id"], "title": cited["title"],
                                                     "abstract": cited["abstract"]})
            if marks:
                start, end = marks[j % len(marks)]
                spans.append({"start": start, "end": end, "text": text[start:end], "ref_id": f"R{cited['paper_id']}"})
        n_spans += len(spans)
        p_idx = len(paper["body_text"])
        paper["body_text"].append({"text": text, "section": rec["source"], "cite_spans": spans})
        if len(splitter.spans(text)) == 1:
            one_sentence += 1
            linked = {c["paper_id"] for c in rec["cited"]} - {pid} if marks else set()
            linked = {p for p in linked if abstracts[p]["abstract"]}
            if len(linked) >= 2:
                expected[f"{pid}#p{p_idx}s0"] = sorted(linked)
                used = sorted({marks[j % len(marks)] for j in range(len(rec["cited"]))}, reverse=True)
                marked, mark = text, free_mark(text)  # some real texts hold NUL (PDF extraction)
                for start, end in used:
                    marked = marked[:start] + mark + marked[end:]
                clean[f"{pid}#p{p_idx}s0"] = finish_marks(marked.strip(), "[CIT]", mark)
    full, abs_path = tmp_path / "pdf_parses.jsonl", tmp_path / "abstracts.jsonl"
    full.write_text("".join(json.dumps(p) + "\n" for p in papers.values()), encoding="utf-8")
    abs_path.write_text("".join(json.dumps(a) + "\n" for a in abstracts.values()), encoding="utf-8")

    report = mine_s2orc(full, abs_path, tmp_path / "out", IngestConfig(splitter="regex"), held_out=set())
    counts = report["counts"]
    assert report["bad_lines"] == 0
    assert counts["papers"] == len(papers) and counts["paragraphs"] == len(records) == 2600
    assert counts["cite_spans"] == n_spans > 4000 and counts.get("cite_spans_outside_sentences", 0) == 0
    buckets = ("sentences_without_citations", "dropped_fewer_than_2_linked", "dropped_fewer_than_2_with_abstract",
               "dropped_benchmark_test", "contexts")
    assert counts["sentences"] == sum(counts.get(k, 0) for k in buckets)
    contexts = [json.loads(line) for line in (tmp_path / "out" / "contexts.jsonl").read_text().splitlines()]
    assert len(contexts) == counts["contexts"] and len({c["context_id"] for c in contexts}) == len(contexts)
    assert one_sentence > 2000 and len(expected) > 1500
    got = {c["context_id"]: c["cited_ids"] for c in contexts if len(splitter.spans(_paragraph(papers, c))) == 1}
    assert got == expected  # one-sentence paragraphs: kept exactly when expected, with exactly the expected papers
    for c in contexts:
        assert len(c["cited_ids"]) >= 2 and c["citing_paper_id"] not in c["cited_ids"]
        assert c["text"] in _paragraph(papers, c) and "[CIT]" in c["text_clean"]
        if c["context_id"] in expected:  # the markers given a cite span are replaced, the others kept as written
            assert c["text_clean"] == clean[c["context_id"]]
    written = [json.loads(line) for line in (tmp_path / "out" / "abstracts.jsonl").read_text().splitlines()]
    assert {a["paper_id"] for a in written} == {p for c in contexts for p in c["cited_ids"]}
    assert counts["papers_cited"] == len(written)
    for a in written:
        assert a["abstract"] == abstracts[a["paper_id"]]["abstract"] and a["title"] == abstracts[a["paper_id"]]["title"]


def _paragraph(papers: dict[str, dict], context: dict) -> str:
    """The text of the paragraph a written context comes from (its id is CITING#pPARAGRAPHsSENTENCE)."""
    paragraph = int(context["context_id"].rsplit("#p", 1)[1].split("s")[0])
    return papers[context["citing_paper_id"]]["body_text"][paragraph]["text"]


# ---- the groups file -----------------------------------------------------------------------------------------------
def test_a_groups_line_of_the_wrong_shape_is_named(tmp_path, tiny_model_dir):
    """A set whose contexts_clean was one string trained on pairs of its characters ('a', 'b'); a line without the
    text field stopped on a bare KeyError."""
    from aspire.encoders.cosentbert import evaluate_contexts, load_sentence_model

    path = tmp_path / "groups.train.jsonl"
    path.write_text(json.dumps({"set_id": "A|B", "contexts_clean": "ab"}) + "\n")
    with pytest.raises(DataError, match=r"groups\.train\.jsonl:1: co-cited set 'A\|B': contexts_clean must be a list"):
        context_pairs(path)
    path.write_text(json.dumps({"set_id": "A|B", "contexts_clean": ["a b", 3]}) + "\n")
    with pytest.raises(DataError, match=r"jsonl:1: co-cited set 'A\|B': contexts_clean\[1\] must be a string"):
        context_pairs(path)
    path.write_text(json.dumps({"set_id": "A|B", "contexts": ["a b", "c d"]}) + "\n")
    with pytest.raises(DataError, match=r"jsonl:1: missing key\(s\) \['contexts_clean'\]"):
        evaluate_contexts(load_sentence_model(tiny_model_dir), path)
