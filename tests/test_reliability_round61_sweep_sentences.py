"""Round 61: pySBD's abbreviation pass (the `pysbd` splitter's, so the default's) rewrote a whole line once for each
word there that starts like an abbreviation, a cost that grew with the square of the line's length (CSFCube abstracts
joined on one 256,000-character line: 16.9 s, against 6.1 s now); it now rewrites a line once per spelling, with the
same sentences as pySBD itself."""

from __future__ import annotations

import json

import pysbd
import pytest
from pysbd import abbreviation_replacer

from aspire.data.sentences import PysbdSplitter

# Every abbreviation branch of pySBD (prepositive "Fig", number "No"/"pp", plain "al"/"e.g"), upper-case words after
# them, and spellings that differ only in case or in what pySBD's unescaped "." matches ("eig" for "e.g").
TRICKY = [
    "Smith et al. 2 did it. Lee et al. (3) too. Al. Ko et Al. Then AL. Ends. Fig. 2 and fig. 3. See Fig. A here.",
    "We use e.g. BERT and E.G. GPT, i.e. transformers. The eig. value. No. 5 and no. 6. Also pp. 3-4. Pp. 5.",
    "Mr. Smith met Dr. Lee vs. Prof. Ng in the U.S. They talked. St. Louis is a city. Ph.D. students came.",
    "It is in Sec. 3. We also see all of it. Also, it works. al. al. al. AL. Al. aL. The end.",
]


def _plain_pysbd(text: str) -> list[str]:
    """pySBD's own English sentences (the rules the splitter must keep)."""
    return pysbd.Segmenter(language="en", clean=False, char_span=False).processor(text).process()


def _ours(text: str) -> list[str]:
    return PysbdSplitter()._load().processor(text).process()


def _count_line_rewrites(monkeypatch) -> dict[str, int]:
    """Count the calls of pySBD's three whole-line abbreviation rewrites."""
    calls = {"n": 0}

    def counted(fn):
        def wrapper(*args, **kwargs):
            calls["n"] += 1
            return fn(*args, **kwargs)
        return wrapper

    for name in ("replace_pre_number_abbr", "replace_prepositive_abbr"):
        monkeypatch.setattr(abbreviation_replacer, name, counted(getattr(abbreviation_replacer, name)))
    cls = abbreviation_replacer.AbbreviationReplacer
    monkeypatch.setattr(cls, "replace_period_of_abbr", counted(cls.replace_period_of_abbr))
    return calls


def test_abbreviation_pass_rewrites_a_line_once_per_spelling_not_once_per_word(monkeypatch):
    """200 repeats of a sentence on one line cost as many whole-line rewrites as 2 repeats (it was 100 times as
    many: pySBD ran the same substitution over the whole line again for each "al", "Fig", "No" or "also")."""
    calls = _count_line_rewrites(monkeypatch)
    splitter = PysbdSplitter()
    unit = "As Smith et al. 2 and Fig. 3 show, No. 5 is also fine, e.g. here, all of it. "
    counts = []
    for repeats in (2, 200):
        calls["n"] = 0
        text = unit * repeats
        starts = splitter.starts(text)
        counts.append(calls["n"])
        assert len(starts) == repeats  # one sentence a repeat: the rules still ran
    assert counts[0] > 0
    assert counts[1] == counts[0], f"whole-line rewrites for 2 and 200 repeats: {counts}"


@pytest.mark.parametrize("text", TRICKY + [" ".join(TRICKY) * 5, "\n".join(TRICKY * 3)])
def test_same_sentences_as_pysbd_itself(text):
    assert _ours(text) == _plain_pysbd(text)


def test_other_pysbd_versions_run_unchanged(monkeypatch):
    """The speed-up reads pySBD 0.3.4's code; another version keeps pySBD's own English rules."""
    monkeypatch.setattr(pysbd, "__version__", "0.4.0")
    assert PysbdSplitter()._load().language_module is pysbd.Segmenter(language="en").language_module


@pytest.mark.slow
def test_same_sentences_as_pysbd_on_real_abstracts_and_a_long_real_line(shared_data):
    """Every 10th CSFCube abstract, and the first 24,000 characters of them all joined on one line."""
    with open(shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl", encoding="utf-8") as f:
        abstracts = [" ".join(json.loads(line)["abstract"]) for line in f]
    for text in abstracts[::10]:
        assert _ours(text) == _plain_pysbd(text), text[:80]
    long_line = " ".join(abstracts)[:24000]
    assert _ours(long_line) == _plain_pysbd(long_line)
