"""Round 75: `aspire.data.acl.normalise_title`, the key by which benchmark papers leave the training data by title,
is Unicode-aware: NFC, cut to letters and digits, then NFKC and case folding before the ASCII [0-9a-z] rule, so a
copy written with a ligature, full-width letters, a combining accent, a superscript digit or "ß" is held out by
its plain copy (the ASCII-only key kept it). On the real data the new key moves no match: the held-out sets of
every training source, the 409 CSFCube and 371 reviewer-set papers found in the ACL file, and the committed
SciRepEval split are what they were (the split's rebuild is `test_reliability_round34_aclformats`)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from aspire.data.acl import HeldOut, abstract_key, normalise_title, read_acl
from tests.test_reliability_round28_acl import _norm as ascii_only_key
from tests.test_reliability_round28_acl import _write

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"

# (the benchmark's copy, the training source's copy of the same title): the ASCII-only key gave each pair two keys
COPIES = [
    ("Fine-tuning BERT for Ranking", "Ｆｉｎｅ－ｔｕｎｉｎｇ ＢＥＲＴ ｆｏｒ Ｒａｎｋｉｎｇ"),  # full-width
    ("Efficient fine-tuning of parsers", "Efﬁcient ﬁne-tuning of parsers"),  # the "fi" ligature U+FB01
    ("Poincaré Embeddings for Nouns", "Poincare\u0301 Embeddings for Nouns"),  # e + combining acute U+0301
    ("CAMERA3: Ad Text Generation", "CAMERA³: Ad Text Generation"),  # superscript three
    ("Beste Grüsse from Emails", "Beste Grüße from Emails"),  # sharp s
]


@pytest.mark.parametrize("bench, copy", COPIES)
def test_a_title_written_with_unicode_variants_is_held_out_by_its_plain_copy(fresh, bench, copy):
    """The ASCII-only key dropped "ﬁ", "Ｆ", "³" and "ß" and kept the "e" of "e\\u0301" (while dropping "é"), so the
    training copy of a benchmark paper's title kept its place in the training data."""
    assert ascii_only_key(bench) != ascii_only_key(copy)  # the pair the old key split
    assert normalise_title(copy) == normalise_title(bench)
    held = HeldOut(titles=frozenset({normalise_title(bench)}))
    assert held.reason("T1", copy, ["An abstract."]) == "title"
    rows = [{"paper_id": "T1", "title": copy, "abstract": ["One sentence here."]},
            {"paper_id": "T2", "title": "Another paper", "abstract": ["Two sentences here."]}]
    papers, stats = read_acl(_write(fresh / "a.jsonl", rows), held, 0)
    assert [p.paper_id for p in papers] == ["T2"]
    assert stats["removed_benchmark"] == 1


def test_an_abstract_written_full_width_has_its_plain_copys_key():
    """`abstract_key` is the normalised text's head, so the folding names an abstract's copies too."""
    plain = "We present a parser. It is fast and it is accurate on every treebank we tried."
    wide = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in plain)  # ASCII -> full-width forms
    assert ascii_only_key(wide) == ""
    assert abstract_key(wide) == abstract_key(plain) == ascii_only_key(plain)[:200]


def test_what_the_folding_leaves_alone():
    """Punctuation, symbols and spaces still go (a symbol before NFKC: the mojibake "â€™" of "’" would else give
    "tm" and split a copy from its clean one, as the co-citation file's W11-1902 title is written), accents are
    dropped, not folded (documented), a title of no Latin letter or digit names nothing, and a key is its own key
    (`HeldOut` accepts it)."""
    assert normalise_title("Stanfordâ€™s Multi-Pass Sieve") == normalise_title("Stanford’s Multi-Pass Sieve") == \
        "stanfordsmultipasssieve"
    assert normalise_title("BERT: Pre-training\tof  Deep_Nets!") == "bertpretrainingofdeepnets"
    assert normalise_title("Poincaré") == "poincar" != normalise_title("Poincar\\'e")
    assert normalise_title("中文标题") == normalise_title("☔ — “ ” ‘ ’") == ""
    for title in [b for pair in COPIES for b in pair] + ["Stanfordâ€™s", "Erdős–Rényi", "½ and Ⅳ"]:
        key = normalise_title(title)
        assert key.isascii() and key == normalise_title(key), title
        HeldOut(titles=frozenset({key}))


def _real_titles() -> dict[str, list[tuple[str, str]]]:
    """(id, title) of every paper of the real sources whose title the held-out sets match: the ACL file, the
    co-citation file's cited papers, CSFCube's papers and the reviewer set's submissions and archive papers."""
    from aspire.benchmarks.reviewers import load_reviewer_set

    with gzip.open(SHARED / "acl-anthology" / "papers.jsonl.gz", "rt", encoding="utf-8") as fh:
        acl = [(r["paper_id"], r.get("title") or "") for r in map(json.loads, fh)]
    cocite = [(c["paper_id"], c.get("title") or "")
              for line in open(SHARED / "cocite-acl" / "cocitations.jsonl", encoding="utf-8") if line.strip()
              for c in json.loads(line)["cited"]]
    csfcube = [(str(r["paper_id"]), r["title"]) for r in map(json.loads, open(
        SHARED / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8"))]
    reviewer = []
    for draw in load_reviewer_set(SHARED / "reviewer-matching").draws:
        reviewer += [(pid, t) for pid, (t, _) in draw.submissions.items()]
        reviewer += [(p[0], p[1]) for papers in draw.archives.values() for p in papers]
    return {"acl": acl, "cocite": cocite, "csfcube": csfcube, "reviewer": reviewer}


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "acl-anthology" / "papers.jsonl.gz").is_file(), reason="shared ACL data absent")
def test_on_the_real_data_the_new_key_moves_no_title_match():
    """Every training title (ACL, co-citation) against every benchmark's titles (CSFCube, the reviewer set, the
    co-citation set the SciRepEval split leaves out): the same papers match under the new key as under the
    ASCII-only one, 409 and 371 in the ACL file; the key changes on six ACL titles and one reviewer-set title,
    none of which any other paper's title shares."""
    sources = _real_titles()
    for bench in ("csfcube", "reviewer", "cocite"):
        for train in ("acl", "cocite"):
            matched = {}
            for key in (ascii_only_key, normalise_title):
                keys = {key(t) for _, t in sources[bench]} - {""}
                matched[key] = {pid for pid, t in sources[train] if key(t) in keys}
            assert matched[ascii_only_key] == matched[normalise_title], (bench, train)
            if train == "acl" and bench != "cocite":
                assert len(matched[normalise_title]) == {"csfcube": 409, "reviewer": 371}[bench]
    changed = {name: sorted({pid for pid, t in papers if normalise_title(t) != ascii_only_key(t)})
               for name, papers in sources.items()}
    assert changed == {"acl": ["2022.computel-1.4", "2022.lrec-1.79", "2023.jlcl-1.7", "2024.lrec-main.242",
                               "2025.semeval-1.314", "L14-1662"],  # "²", "ß", "ß", "³", "²", "³"
                       "cocite": [], "csfcube": [], "reviewer": ["d34712c217046ccf8063efe083fbb1e6cbfc0340"]}  # "ﬁ"
    everyone = [normalise_title(t) for papers in sources.values() for _, t in {*papers}]
    for name, ids in changed.items():
        for pid, title in {(pid, t) for pid, t in sources[name] if pid in ids}:
            assert everyone.count(normalise_title(title)) == 1, (name, pid)  # no other paper's title
