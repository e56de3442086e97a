"""Sentence splitters: registry, no lost text, the guard rules, the default on scientific hard cases."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aspire.data.sentences import (
    DEFAULT_SPLITTER,
    SPLITTERS,
    GuardedSplitter,
    SentenceSplitter,
    get_splitter,
    resolve_splitter,
)

# (text, the split the default must give): scientific abbreviations, numbers and statistics.
HARD_CASES = [
    (
        "We build on the model of Smith et al. (2020) and extend it to graphs. It works well.",
        ["We build on the model of Smith et al. (2020) and extend it to graphs.", "It works well."],
    ),
    (
        "As shown by Lee et al. the method scales. We confirm this.",
        ["As shown by Lee et al. the method scales.", "We confirm this."],
    ),
    (
        "We study tasks such as parsing, e.g. dependency parsing, at scale. Results follow.",
        ["We study tasks such as parsing, e.g. dependency parsing, at scale.", "Results follow."],
    ),
    (
        "We use a small model, i.e. a two-layer network. It trains fast.",
        ["We use a small model, i.e. a two-layer network.", "It trains fast."],
    ),
    (
        "The gains are shown in Fig. 2 for all datasets. They are large.",
        ["The gains are shown in Fig. 2 for all datasets.", "They are large."],
    ),
    (
        "The difference is significant (p < 0.05) on both sets. We discuss why.",
        ["The difference is significant (p < 0.05) on both sets.", "We discuss why."],
    ),
    (
        "Accuracy rose by 3.2 points (95% CI 1.1-5.3). The effect is robust.",
        ["Accuracy rose by 3.2 points (95% CI 1.1-5.3).", "The effect is robust."],
    ),
    (
        "This matches earlier reports, cf. Table 3 for details. We extend them.",
        ["This matches earlier reports, cf. Table 3 for details.", "We extend them."],
    ),
    (
        "We compare BERT vs. GPT on ten tasks. BERT wins on seven.",
        ["We compare BERT vs. GPT on ten tasks.", "BERT wins on seven."],
    ),
    (
        "The loss in Eq. 3 is convex. We minimise it with SGD.",
        ["The loss in Eq. 3 is convex.", "We minimise it with SGD."],
    ),
    (
        "The corpus has approx. 1.3M abstracts. We use all of them.",
        ["The corpus has approx. 1.3M abstracts.", "We use all of them."],
    ),
    (
        "Can sentence vectors capture aspects? We show that they can!  Finally, we conclude.",
        ["Can sentence vectors capture aspects?", "We show that they can!", "Finally, we conclude."],
    ),
    (
        "This is confirmed by industrial experience.When modelling variability we use trees.",
        ["This is confirmed by industrial experience.", "When modelling variability we use trees."],
    ),
]

CHEAP = ["pysbd", "scispacy_rule", "spacy_sentencizer", DEFAULT_SPLITTER]


@pytest.fixture(scope="module")
def splitters() -> dict[str, SentenceSplitter]:
    return {name: get_splitter(name) for name in dict.fromkeys(CHEAP)}


def assert_lossless(text: str, spans: list[tuple[int, int]]) -> None:
    """Spans are ordered, disjoint, stripped, non-empty, and only whitespace lies outside them."""
    pos = 0
    for a, b in spans:
        assert pos <= a < b <= len(text)
        assert text[pos:a].strip() == ""
        assert text[a:b] == text[a:b].strip()
        pos = b
    assert text[pos:].strip() == ""


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_splitter("nltk_punkt")
    for name in SPLITTERS:
        assert name in str(err.value)


def test_registry_gives_fresh_instances_named_as_registered():
    for name in ("pysbd", "spacy_sentencizer", "pysbd_rule_guarded"):
        a, b = get_splitter(name), get_splitter(name)
        assert a is not b
        assert a.name == name
    assert DEFAULT_SPLITTER in SPLITTERS


def test_resolve_splitter_accepts_names_and_instances():
    instance = get_splitter("spacy_sentencizer")
    assert resolve_splitter(instance) is instance
    assert resolve_splitter("pysbd").name == "pysbd"
    with pytest.raises(TypeError):
        resolve_splitter(3)


def test_pipelines_load_lazily_and_are_cached_per_instance():
    splitter = get_splitter("spacy_sentencizer")
    assert splitter._nlp is None
    splitter.split("One. Two.")
    nlp = splitter._nlp
    assert nlp is not None
    splitter.split("Three. Four.")
    assert splitter._nlp is nlp
    assert get_splitter("spacy_sentencizer")._nlp is None


class _FixedStarts(SentenceSplitter):
    """A splitter proposing given offsets (any, even out of range or inside whitespace)."""

    name = "fixed"

    def __init__(self, starts: list[int]) -> None:
        self._starts = starts

    def starts(self, text: str) -> list[int]:
        return self._starts


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="ab .!?\n\t()é", max_size=60),
    starts=st.lists(st.integers(min_value=-5, max_value=70), max_size=12),
)
def test_cutting_at_any_offsets_never_loses_text(text, starts):
    spans = _FixedStarts(starts).spans(text)
    assert_lossless(text, spans)
    if text.strip():
        assert spans, "non-blank text gives at least one sentence"


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet="Ab1 .!?\n()\"e.g", max_size=80))
def test_real_splitters_never_lose_text(splitters, text):
    for splitter in splitters.values():
        spans = splitter.spans(text)
        assert_lossless(text, spans)
        assert splitter.split(text) == [text[a:b] for a, b in spans]


def test_blank_text_has_no_sentences(splitters):
    for splitter in splitters.values():
        assert splitter.split("") == []
        assert splitter.split(" \n\t ") == []


def test_non_string_text_is_a_type_error(splitters):
    with pytest.raises(TypeError):
        splitters["pysbd"].split(["a list"])


@pytest.mark.parametrize("text, expected", HARD_CASES, ids=[t[:24] for t, _ in HARD_CASES])
def test_default_splitter_on_scientific_hard_cases(splitters, text, expected):
    assert splitters[DEFAULT_SPLITTER].split(text) == expected


class _CutEverywhere(SentenceSplitter):
    """Proposes a cut at every non-space character that follows a space."""

    name = "everywhere"

    def starts(self, text: str) -> list[int]:
        return [i for i in range(1, len(text)) if text[i - 1] == " " and text[i] != " "]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Words such as e.g. these stay. New one.", ["Words such as e.g. these stay.", "New one."]),
        ("See Fig. 3 here. Next.", ["See Fig. 3 here.", "Next."]),
        ("By Wu et al. (2019) it is. Next.", ["By Wu et al. (2019) it is.", "Next."]),
        ("As in Wu et al. Then more.", ["As in Wu et al.", "Then more."]),
        ('He said "stop." Then (ii) went. Ok!', ['He said "stop."', "Then (ii) went.", "Ok!"]),
    ],
)
def test_guard_rules(text, expected):
    guarded = GuardedSplitter("guarded", _CutEverywhere())
    assert guarded.split(text) == expected


def test_guard_needs_a_base():
    with pytest.raises(ValueError):
        GuardedSplitter("empty")


def test_long_sentence_and_long_abstract(splitters):
    splitter = splitters[DEFAULT_SPLITTER]
    long_sentence = ("token " * 1700).strip() + "."
    assert len(long_sentence) > 10_000
    assert splitter.split(long_sentence) == [long_sentence]
    many = [f"Sentence number {i} reports a result." for i in range(200)]
    assert splitter.split(" ".join(many)) == many


@pytest.mark.slow
def test_all_registered_splitters_load_and_split():
    text = "We propose a method. It works well on three tasks."
    for name in SPLITTERS:
        out = get_splitter(name).split(text)
        assert out == ["We propose a method.", "It works well on three tasks."], name


@pytest.mark.slow
def test_default_splitter_on_real_csfcube_abstracts(shared_data):
    """Boundary F1 of the default against CSFCube's gold split of the first 300 abstracts."""
    path = shared_data / "csfcube" / "abstracts-csfcube-preds.jsonl"
    splitter = get_splitter(DEFAULT_SPLITTER)
    tp = n_pred = n_gold = 0
    with path.open(encoding="utf-8") as f:
        for _, line in zip(range(300), f):
            gold = [s.strip() for s in json.loads(line)["abstract"] if s.strip()]
            text = " ".join(gold)
            gold_starts = {sum(len(s) + 1 for s in gold[:i]) for i in range(1, len(gold))}
            spans = splitter.spans(text)
            assert_lossless(text, spans)
            pred_starts = {a for a, _ in spans[1:]}
            tp += len(pred_starts & gold_starts)
            n_pred += len(pred_starts)
            n_gold += len(gold_starts)
    precision, recall = tp / n_pred, tp / n_gold
    assert 2 * precision * recall / (precision + recall) > 0.97


def test_the_scispacy_tokenizer_builds_without_the_regex_future_warning():
    """scispacy's infix pattern makes `re` warn "Possible set union" at compile time; building the splitter keeps
    that from library users (the command line already silences spaCy's warnings)."""
    import re
    import warnings

    from aspire.data.sentences import _blank_english

    re.purge()  # compiled patterns are cached: compile again, as a fresh process would
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp = _blank_english(scispacy_tokenizer=True)
    assert [str(w.message) for w in caught if "Possible set union" in str(w.message)] == []
    assert [t.text for t in nlp("IL-2 (p<0.05).")][:2] == ["IL-2", "("]
