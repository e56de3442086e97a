"""Round 35: the ACL Anthology reader (`aspire.data.acl`) and the papers guards (`aspire.data.guards`), checked by
hand loops and on the real file: an integer paper id's abstract is split by the one splitter and cached like any
other; the split cache's key changes with the visible-character rule the splitter cuts by (`guards.has_visible`);
a `HeldOut` member that could match no paper (not a string, a title not normalised, an abstract that is no key) is
refused; `normalise_title` keeps ASCII letters and digits only after Unicode folding (accents dropped, not folded),
which moves no match of the committed SciRepEval split (round 75)."""

from __future__ import annotations

import gzip
import json
import unicodedata
from pathlib import Path

import pytest

from aspire.data import acl, sentences
from aspire.data.acl import HeldOut, abstract_key, normalise_title, read_acl, split_cache_path, splitter_version
from aspire.data.guards import has_visible, id_in_head, invisible_text_reason
from tests.test_reliability_round28_acl import _write

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def by_hand(t):
    """The documented title key, a character at a time: NFC, letters and digits, NFKC, case folding, ASCII [0-9a-z]."""
    kept = "".join(c for c in unicodedata.normalize("NFC", t) if c.isalnum())
    folded = unicodedata.normalize("NFKC", kept).casefold()
    return "".join(c for c in folded if c in "0123456789abcdefghijklmnopqrstuvwxyz")


def test_an_integer_paper_id_is_split_by_the_one_splitter_and_cached(fresh, monkeypatch):
    """A record whose paper_id is an integer skipped the split cache (`isinstance(pid, str)`), so its abstract was
    split by a new splitter built for that record alone (about 0.1 s each: 114 ms against 0.4 ms a text reused) and
    by every later run again: three integer ids built three splitters, and the cache held none of them."""
    built = []
    make = sentences.SPLITTERS[sentences.DEFAULT_SPLITTER]

    def counting():
        built.append(1)
        return make()

    monkeypatch.setitem(sentences.SPLITTERS, sentences.DEFAULT_SPLITTER, counting)
    texts = ["First sentence here. Second sentence there.", "Alpha beta is good. Gamma delta is not.",
             "One more text. And its end."]
    rows = [{"paper_id": 7 + i, "title": f"T {i}", "abstract": t} for i, t in enumerate(texts)]
    path = _write(fresh / "ints.jsonl", rows)
    papers, stats = read_acl(path, frozenset(), 0)
    assert len(built) == 1  # the one splitter of the run
    by_hand = make()
    assert [(p.paper_id, p.sentences) for p in papers] == [(str(7 + i), by_hand.split(t)) for i, t in enumerate(texts)]
    assert stats["used"] == 3 and stats["rejected"] == {}
    cached = json.loads(split_cache_path(path, sentences.DEFAULT_SPLITTER).read_text())
    assert sorted(cached) == ["7", "8", "9"]
    read_acl.cache_clear()
    again, _ = read_acl(path, frozenset(), 0)
    assert len(built) == 1 and [p.sentences for p in again] == [p.sentences for p in papers]  # all from the cache


def test_the_split_cache_key_follows_the_visible_character_rule(tmp_path, monkeypatch):
    """`SentenceSplitter.spans` merges a piece without a visible character (`guards.has_visible`) into its
    neighbour, so the cuts depend on guards.py; `splitter_version` hashed sentences.py alone, so a changed rule kept
    serving the old cuts from the cache."""
    from aspire.data import guards

    before = splitter_version()
    changed = tmp_path / "guards.py"
    changed.write_bytes(Path(guards.__file__).read_bytes() + b"\n# a changed rule\n")
    monkeypatch.setattr(guards, "__file__", str(changed))
    assert splitter_version() != before
    monkeypatch.setattr(guards, "__file__", str(Path(acl.__file__).with_name("guards.py")))
    assert splitter_version() == before


@pytest.mark.parametrize("field, value", [("paper_ids", 123), ("titles", None), ("abstracts", 5)])
def test_a_held_out_member_that_is_not_a_string_is_a_type_error(field, value):
    """`HeldOut(paper_ids={123})` was accepted and held out nothing: the record's id 123 is matched as "123"."""
    with pytest.raises(TypeError, match=f"HeldOut.{field} must be a collection of strings, holds "
                                        f"{type(value).__name__} {value!r}"):
        HeldOut(**{field: frozenset({value, "ok"})})


def test_a_raw_title_or_abstract_in_held_out_is_a_value_error(fresh):
    """A title given as written ("T one") or an abstract as text matched nothing (the rules compare normalised
    forms), so the paper was trained on without a word."""
    row = {"paper_id": "X", "title": "T one", "abstract": "Alpha beta. Gamma delta."}
    path = _write(fresh / "a.jsonl", [row])
    with pytest.raises(ValueError, match=r"HeldOut.titles holds 'T one', not a normalised title \(`normalise_title` "
                                         r"gives 'tone'\)"):
        read_acl(path, frozenset({"T one"}), 0)
    with pytest.raises(ValueError, match="HeldOut.abstracts holds 'Alpha beta. Gamma delta.', not an abstract key"):
        HeldOut(abstracts=frozenset({row["abstract"]}))
    with pytest.raises(ValueError, match="not an abstract key"):  # normalised, but longer than a key
        HeldOut(abstracts=frozenset({"a" * (acl.ABSTRACT_KEY_CHARS + 1)}))
    held = HeldOut(titles=frozenset({normalise_title(row["title"])}), abstracts=frozenset({abstract_key("a b")}))
    assert held.reason("X", row["title"], row["abstract"]) == "title"
    assert read_acl(path, held, 0)[1]["removed_benchmark"] == 1
    assert HeldOut(titles=frozenset({"", "tone"})).titles == {"tone"}  # "" still names nothing


def test_normalise_title_and_abstract_key_by_hand():
    """Lower case, ASCII [0-9a-z] only after Unicode folding: other letters are dropped (documented), a list of
    sentences joined first."""
    for title in ["BERT: Pre-training", "Poincaré Embeddings", "Poincar\\'e Embeddings", "中文标题", "",
                  "Erdős–Rényi", "ＡＢＣ 123", "naïve  NAÏVE", "Straße"]:
        assert normalise_title(title) == by_hand(title), title
    assert normalise_title("Poincaré") == "poincar" and normalise_title("Poincar\\'e") == "poincare"
    text = "We study X. " * 40
    assert abstract_key(text) == by_hand(text)[:200] == abstract_key(text.split(". "))
    assert abstract_key(None) == abstract_key(7) == abstract_key(["中文。"]) == ""


def test_guards_by_hand():
    """`has_visible` / `invisible_text_reason` against the categories the docstring names; `id_in_head` on heads."""
    assert not has_visible(" \t\u200b\ufffd\u0301") and has_visible("\ufffd.") and has_visible("☔")
    assert invisible_text_reason("a\ud800b") == "holds a lone surrogate U+D800 at character 1 (not Unicode text)"
    assert invisible_text_reason("\u200b") == "has no visible character ('\\u200b')"
    assert invisible_text_reason("ok") is None
    assert id_in_head(b'{"paper_id": "P19-1316", "abstract": "xxxx') == "P19-1316"
    assert id_in_head(b'{"paper_id": 12, "title"') == "12"
    for head in (b'{"paper_id": 12.5, "t', b'{"paper_id": 1e5, "t', b'{"paper_id": "', b'{"paper_id": "\\ud800", "t',
                 b'{"title": "x", "abs'):
        assert id_in_head(head) is None, head


@pytest.mark.skipif(not (SHARED / "acl-anthology" / "papers.jsonl.gz").is_file(), reason="shared ACL data absent")
def test_real_acl_titles_keys_and_held_out_members():
    """On the real file: every title and abstract key is the hand rule's, and the real P19-1316 ("Poincaré") and
    CSFCube's 174776087 ("Poincar\\'e") differ by title (the known leftover, documented, not folded)."""
    seen = 0
    with gzip.open(SHARED / "acl-anthology" / "papers.jsonl.gz", "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i % 50:
                continue
            r = json.loads(line)
            assert normalise_title(r["title"]) == by_hand(r["title"])
            assert abstract_key(r["abstract"]) == by_hand(r["abstract"])[:200]
            HeldOut(titles=frozenset({normalise_title(r["title"])}), paper_ids=frozenset({r["paper_id"]}),
                    abstracts=frozenset({abstract_key(r["abstract"])}))  # what callers build is accepted
            seen += 1
    assert seen > 1000
    assert normalise_title("On the Compositionality Prediction of Noun Phrases using Poincaré Embeddings") != \
        normalise_title("On the Compositionality Prediction of Noun Phrases using Poincar\\'e Embeddings")
