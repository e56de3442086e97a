"""Round 24, citation cleaning: runs of markers joined by ", and" (or "; and", ", &", "; &") collapse into one
placeholder as those joined by ",", ";", "and" or "&" do, and context2doc's twin rule (a train or dev sentence that
reads as a test query once its markers are removed) takes no query text without a word: "." of a sentence of
markers alone is no twin of another such sentence citing other papers."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from aspire.benchmarks import context2doc as c2d
from aspire.data.cocite.text import MARK, clean_citations, finish_marks

JOINERS = ("", ",", ";", "and", "&", ", and", "; and", ", &", "; &")  # what joins two markers of one run


def _brute_finish(text: str, placeholder: str) -> str:
    """Reference: split at the marks; a gap whose tokens (",", ";", "&", runs of other non-space characters) are one
    of `JOINERS`' merges its two marks, left to right."""
    tokens = lambda s: re.findall(r"[,;&]|[^\s,;&]+", s)  # noqa: E731
    joiners = [tokens(j) for j in JOINERS]
    pieces = text.split(MARK)
    out = [pieces[0]]
    for gap in pieces[1:]:
        if len(out) > 1 and tokens(out[-1]) in joiners:  # the previous gap was a joiner: drop it, the run continues
            out.pop()
        else:
            out.append(MARK)
        out.append(gap)
    text = "".join(out)
    text = re.sub(rf"\(\s*{MARK}\s*\)|\[\s*{MARK}\s*\]", MARK, text)
    return re.sub(r"\s+", " ", text).strip().replace(MARK, placeholder)


@pytest.mark.parametrize("joiner", [", and", "; and", ", &", "; &", ",and", " , and ", ";  &"])
def test_finish_marks_collapses_a_comma_or_semicolon_then_and(joiner):
    assert finish_marks(f"as in {MARK}{joiner} {MARK}.", "[CIT]") == "as in [CIT]."
    assert finish_marks(f"as in {MARK}, {MARK}{joiner} {MARK} too", "[CIT]") == "as in [CIT] too"


def test_clean_citations_collapses_a_narrative_list_ending_in_comma_and():
    """Real context L66: five narrative markers, the last after ", and"; was "... of [CIT], and [CIT]."."""
    text = ("Most previous dependency parsing models have focused on projective trees, including the work of Eisner "
            "(1996), Collins et al (1999), Yamada and Matsumoto (2003), Nivre and Scholz (2004), and McDonald et al "
            "(2005).")
    assert clean_citations(text) == ("Most previous dependency parsing models have focused on projective trees, "
                                     "including the work of [CIT].")
    assert c2d.query_text("(Ng and Low, 2004), (Jiang et al., 2008a), and (Kruengkrai et al., 2009).") == "."


@pytest.mark.parametrize("text", [f"{MARK}, andrew {MARK}", f"{MARK}, and so {MARK}", f"{MARK}, or {MARK}",
                                  f"{MARK} and, {MARK}", f"{MARK}, and, {MARK}"])
def test_finish_marks_keeps_words_that_are_no_joiner(text):
    """A word after ", and", "or", or a comma after "and": two markers, as before."""
    assert finish_marks(text, "[CIT]").count("[CIT]") == 2


def test_finish_marks_against_a_brute_force_reference():
    rng = random.Random(24)
    fillers = JOINERS + (" ", "  ", ", or", "and so", "as well as", "(", ")", "[", "]", "word", ".", ",,")
    for _ in range(3000):
        parts = [rng.choice(("the", "", "x (", "["))]
        for _ in range(rng.randint(1, 5)):
            parts += [MARK, rng.choice(fillers) + rng.choice(("", " "))]
        text = "".join(parts)
        assert finish_marks(text, "[CIT]") == _brute_finish(text, "[CIT]"), repr(text)


def test_real_contexts_keep_no_comma_and_between_two_markers(shared_data):
    """68 of the 2,600 real contexts kept "[CIT], and [CIT]" (L32, L44, L66, ...; L417 twice); none does now."""
    path = shared_data / "cocite-acl" / "cocitations.jsonl"
    contexts = [json.loads(line)["context"] for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(contexts) == 2600
    left = [c for c in map(clean_citations, contexts) if re.search(r"\[CIT\]\s*[,;]\s*(?:and|&)\s*\[CIT\]", c)]
    assert left == []


def _markers_only_file(tmp_path: Path) -> tuple[Path, Path]:
    """Citing paper c10 hashes to test, c0 and c1 to train, c17 to dev (as in round 7's twin file): the test
    sentence and both train sentences are citation markers alone, citing other papers."""
    def rec(citing, context, cited):
        return {"citing_paper_id": citing, "context": context, "source": "x",
                "cited": [{"paper_id": p, "title": f"paper {p}", "abstract": [f"about {p}."]} for p in cited]}

    recs = [rec("c10", "(Ng and Low, 2004), (Jiang et al., 2008a), and (Kruengkrai et al., 2009).", ["a", "b"]),
            rec("c0", "(1999), Riezler et al. (2002), and Och and Ney (2002).", ["c", "d"]),
            rec("c1", "(Palmer et al., 2005; Meyers et al., 2004).", ["e", "f"]),
            rec("c17", "Taggers (Brants, 2000) are accurate.", ["a", "e"])]
    source = tmp_path / "cc" / "cocitations.jsonl"
    source.parent.mkdir(parents=True)
    source.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    split = tmp_path / "split.json"
    split.write_text(json.dumps(c2d.make_split(source)))
    return source, split


def test_a_query_text_without_a_word_is_no_twin(tmp_path):
    """Before: L2 read ", and." as test L1 did and was left out (and held out of training); after the ", and" fix
    all three read ".", and neither train sentence may be taken for the test one. The test sentence is still held out."""
    source, split = _markers_only_file(tmp_path)
    meta = c2d.load_split(split, source)
    assert meta["splits"]["test"]["queries"] == ["L1"] and meta["splits"]["train"]["queries"] == ["L2", "L3"]
    test = c2d.load_context2doc(source.parent, "test", split)
    train = c2d.load_context2doc(source.parent, "train", split)
    assert test.queries == {"L1": "."} and train.queries == {"L2": ".", "L3": "."}
    assert train.left_out == [] and train.qrels == {"L2": {"c": 1, "d": 1}, "L3": {"e": 1, "f": 1}}
    raw = [rec["context"] for _, rec in c2d.read_records(source)]
    assert c2d.held_out_sentences(source.parent, split) == {raw[0]}


def test_real_split_l1623_is_no_twin_of_l2541_and_the_committed_split_stands(shared_data):
    """Test L2541 and train L1623 (other citing papers, other cited papers) read ", and." before the fix; now "."
    as train L2250, L2285, L2287 and L2480 do. None of them is left out, L2541's sentence is still held out, L1623's
    is not; the committed split (queries, exclusions, checksum) is what `make_split` gives."""
    data = shared_data / "cocite-acl"
    source = data / "cocitations.jsonl"
    committed = c2d.load_split(source=source)
    made = c2d.make_split(source)
    assert made["splits"] == committed["splits"] and made["checksum"] == committed["checksum"]
    assert made["excluded_queries"] == committed["excluded_queries"]
    test = c2d.load_context2doc(data, "test")
    train = c2d.load_context2doc(data, "train")
    assert test.queries["L2541"] == "." and sorted(test.qrels["L2541"]) == ["P09-1058", "W04-3236"]
    assert train.left_out == ["L1838"] and len(train.queries) == 1870
    assert {q for q, t in train.queries.items() if t == "."} == {"L1623", "L2250", "L2285", "L2287", "L2480"}
    assert sorted(train.qrels["L1623"]) == ["P02-1035", "P02-1038"]
    raw = {qid: rec["context"].strip() for qid, rec in c2d.read_records(source)}
    held = c2d.held_out_sentences(data)
    assert raw["L2541"] in held and raw["L1623"] not in held and len(held) == 465
    assert {raw[q] for q in committed["splits"]["test"]["queries"]} <= held
