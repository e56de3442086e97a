"""Bad input to S2ORC co-citation mining, hard-negative mining and the alignment plots is named, never
dropped or drawn wrong in silence."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from aspire.batch import DocBatch  # noqa: E402
from aspire.data.cocite.config import IngestConfig  # noqa: E402
from aspire.data.negatives import HardNegativesConfig, mine_hard_negatives, nearest_negatives, read_groups  # noqa: E402
from aspire.data.s2orc import mine_s2orc  # noqa: E402
from aspire.io import DataError  # noqa: E402
from aspire.viz import pair_alignment, plot_distances, plot_plan  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "s2orc_mini"
PAPERS = [json.loads(line) for line in (FIXTURE / "pdf_parses.jsonl").read_text().splitlines() if line.strip()]
ABSTRACTS = [json.loads(line) for line in (FIXTURE / "abstracts.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _mine(tmp_path: Path, papers=PAPERS, abstracts=ABSTRACTS, **cfg) -> dict:
    return mine_s2orc(_jsonl(tmp_path / "pp.jsonl", papers), _jsonl(tmp_path / "ab.jsonl", abstracts), tmp_path / "out",
                      IngestConfig(splitter="regex", **cfg), held_out=set())


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _set(path: tuple, value):
    """A copy of the fixture's papers with the field at `path` (paper, key, ...) set to `value`."""
    papers = copy.deepcopy(PAPERS)
    node = papers
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return papers


# --------------------------------------------------------------------------- S2ORC full text and abstracts

@pytest.mark.parametrize("path, value, message", [
    ((0, "body_text", 0, "text"), 5, r"body_text\[0\]\.text must be a string, got int"),
    ((0, "body_text", 0, "cite_spans"), None, r"body_text\[0\]\.cite_spans must be a list, got null"),
    ((0, "body_text", 0, "cite_spans", 0, "start"), "41", r"cite_spans\[0\]: start and end must be integers"),
    ((0, "body_text", 0, "cite_spans", 0, "ref_id"), ["BIBREF0"], r"cite_spans\[0\]: ref_id must be a string or null"),
    ((0, "bib_entries", "BIBREF0"), "P1", r"bib_entries\['BIBREF0'\] must be an object, got str"),
    ((0, "bib_entries", "BIBREF0", "link"), {"id": "P1"}, r"bib_entries\['BIBREF0'\]\.link must be a string or an int"),
    ((0, "body_text", 0, "cite_spans", 0, "end"), 9999, r"cite_spans\[0\]: span \(41, 9999\) is not inside"),
    ((0, "body_text", 0, "cite_spans", 0, "end"), 40, r"cite_spans\[0\]: span \(41, 40\) is not inside"),
])
def test_s2orc_wrongly_typed_or_placed_fulltext_fields_are_named(tmp_path, path, value, message):
    with pytest.raises(DataError, match=r"pp\.jsonl:1: paper 'C1': .*" + message):
        _mine(tmp_path, papers=_set(path, value))


def test_s2orc_bad_paper_is_skipped_and_counted_when_asked(tmp_path):
    report = _mine(tmp_path, papers=_set((0, "body_text", 0, "text"), None), on_error="skip")
    assert report["bad_lines"] == 1 and "pp.jsonl:1: paper 'C1'" in report["bad_line_messages"][0]
    assert report["counts"]["papers"] == 2


def test_s2orc_repeated_citing_paper_is_named(tmp_path):
    with pytest.raises(DataError, match=r"pp\.jsonl:4: duplicate paper_id 'C1', first seen on line 1"):
        _mine(tmp_path, papers=PAPERS + [PAPERS[0]])


def test_s2orc_repeated_abstract_is_named_and_written_once_when_skipped(tmp_path):
    twice = ABSTRACTS + [{**ABSTRACTS[0], "abstract": ["Another text."]}]
    with pytest.raises(DataError, match=rf"ab\.jsonl:{len(twice)}: duplicate paper_id 'P1', first seen on line 1"):
        _mine(tmp_path, abstracts=twice)
    report = _mine(tmp_path, abstracts=twice, on_error="skip")
    written = _read(tmp_path / "out" / "abstracts.jsonl")
    assert [p["paper_id"] for p in written].count("P1") == 1 and report["bad_lines"] == 1
    assert next(p for p in written if p["paper_id"] == "P1")["abstract"] == ABSTRACTS[0]["abstract"]


@pytest.mark.parametrize("field, value, message", [
    ("abstract", 42, r"abstract must be a list of sentences, a string or null, got int"),
    ("abstract", ["One.", 2], r"abstract\[1\] must be a string, got int"),
    ("title", ["a title"], r"title must be a string, got list"),
    ("paper_id", ["P1"], r"paper_id must be a string or an integer, got list"),
])
def test_s2orc_wrongly_typed_abstracts_are_named(tmp_path, field, value, message):
    abstracts = copy.deepcopy(ABSTRACTS)
    abstracts[0][field] = value
    with pytest.raises(DataError, match=r"ab\.jsonl:1: (paper 'P1': )?" + message):
        _mine(tmp_path, abstracts=abstracts)


def test_s2orc_integer_ids_match_string_links_and_nulls_read_as_empty(tmp_path):
    abstracts = copy.deepcopy(ABSTRACTS)
    assert abstracts[0]["paper_id"] == "P1"
    abstracts[0]["paper_id"], abstracts[0]["title"] = 101, None  # an integer id; a null title
    papers = copy.deepcopy(PAPERS)
    for paper in papers:
        for entry in paper["bib_entries"].values():
            if entry["link"] == "P1":
                entry["link"] = "101"
        for para in paper["body_text"]:
            para["section"] = None
    (tmp_path / "ref").mkdir()
    _mine(tmp_path / "ref")
    _mine(tmp_path, papers=papers, abstracts=abstracts)
    expected = [c["cited_ids"] for c in _read(tmp_path / "ref" / "out" / "contexts.jsonl")]
    contexts = _read(tmp_path / "out" / "contexts.jsonl")
    assert [sorted("P1" if p == "101" else p for p in c["cited_ids"]) for c in contexts] == expected
    assert {c["source"] for c in contexts} == {"s2orc:"}
    written = {p["paper_id"]: p for p in _read(tmp_path / "out" / "abstracts.jsonl")}
    assert written["101"]["title"] == ""


# --------------------------------------------------------------------------- hard negatives

IDS = ["A", "B", "C", "D"]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nearest_negatives_name_papers_with_non_finite_vectors(bad):
    vectors = np.eye(4, dtype=np.float32)
    vectors[2, 1] = bad
    with pytest.raises(ValueError, match=r"1 paper vector\(s\) hold NaN or infinity: \['C'\]"):
        nearest_negatives(vectors, {}, IDS, k=2)


def _examples(root: Path, groups: list[dict]) -> Path:
    root.mkdir()
    _jsonl(root / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": [f"about {p}."]} for p in IDS])
    _jsonl(root / "groups.train.jsonl", groups)
    return root


@pytest.mark.parametrize("method", ["nearest", "coverage"])
def test_hard_negatives_name_papers_whose_encoded_vector_is_not_finite(tmp_path, method):
    examples = _examples(tmp_path / "e", [{"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["X#1"]}])

    def encode(papers):
        vectors = torch.eye(4)
        vectors[3, 0] = float("nan")
        return vectors

    cfg = HardNegativesConfig(method=method, clusters=2) if method == "coverage" else HardNegativesConfig(method=method)
    with pytest.raises(ValueError, match=r"hold NaN or infinity: \['D'\]"):
        mine_hard_negatives(examples, tmp_path / "o", cfg, encode)


@pytest.mark.parametrize("key, value", [("paper_ids", "AB"), ("context_ids", "X#1"), ("paper_ids", ["A", 2])])
def test_read_groups_names_a_set_whose_ids_are_not_a_list_of_strings(tmp_path, key, value):
    group = {"set_id": "A|B", "paper_ids": ["A", "B"], "context_ids": ["X#1"], key: value}
    examples = _examples(tmp_path / "e", [group])
    with pytest.raises(DataError, match=rf"groups\.train\.jsonl:1: co-cited set 'A\|B': {key} must be a list of strings"):
        read_groups(examples)


# --------------------------------------------------------------------------- alignment plots

def _batches():
    g = torch.Generator().manual_seed(0)
    q = DocBatch.from_list([torch.randn(3, 5, generator=g)], ["Q"], [["q0", "q1", "q2"]])
    c = DocBatch.from_list([torch.randn(3, 5, generator=g)], ["C"], [["c0", "c1", "c2"]])
    return q, c


def test_pair_alignment_refuses_a_candidate_sentence_selection():
    q, c = _batches()
    with pytest.raises(ValueError, match=r"candidate C selects only sentences \[1, 2\] of its 3"):
        pair_alignment(q, c.select_sentences([[1, 2]]))
    no_texts = DocBatch(c.emb, c.mask, ["C"]).select_sentences([[0, 2]])
    with pytest.raises(ValueError, match=r"candidate C selects only sentences \[0, 2\] of its 3"):
        pair_alignment(q, no_texts)
    al = pair_alignment(q, DocBatch(c.emb, c.mask, ["C"]))  # every sentence, no texts: all three drawn
    assert al.cost.shape == (3, 3) and al.cand_texts == ["sentence 0", "sentence 1", "sentence 2"]


def test_plots_name_rows_pairs_and_masks_outside_the_matrix():
    texts = ["a", "b", "c"]
    plan = np.full((3, 3), 1 / 9)
    with pytest.raises(ValueError, match=r"rows \[-1\] are not query sentences of the 3x3 matrix"):
        plot_plan(plan, texts, texts, rows=[-1])
    with pytest.raises(ValueError, match=r"rows \[3\] are not query sentences"):
        plot_plan(plan, texts, texts, rows=[0, 3])
    with pytest.raises(ValueError, match=r"pair \(3, 0\) is not a cell of the 3x3 distance matrix"):
        plot_distances(plan, texts, texts, pair=(3, 0))
    with pytest.raises(ValueError, match=r"query_mask has 2 entries for the matrix's 3 query sentences"):
        plot_distances(plan, texts, texts, query_mask=[True, False])


def test_s2orc_keeps_a_nul_of_the_text_and_marks_only_citations(tmp_path):
    """NUL was the citation marker while cleaning, so a NUL of the sentence itself came out as a second [CIT]."""
    papers = json.loads(json.dumps(PAPERS))
    para = papers[0]["body_text"][0]
    para["text"] = para["text"].replace("studied", "stu\0ied", 1)  # same length: the spans still fit
    _mine(tmp_path, papers)
    first = json.loads((tmp_path / "out" / "contexts.jsonl").read_text().splitlines()[0])
    assert first["text_clean"] == "Neural retrieval has been stu\0ied widely [CIT]."
