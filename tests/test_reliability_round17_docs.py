"""The user documentation in docs/ says what the code does: every file it names exists, every `aspire.*` name it
cites resolves, every option of a command line it quotes is that command's (and a quoted choice is one of the
option's choices), the evaluator options docs/evaluation.md places on each benchmark command are there, and the
figures it quotes are those of the data and of the known answers it rests on."""

from __future__ import annotations

import argparse
import importlib
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))


def text_of(doc: Path) -> str:
    """The doc's text without its fenced blocks (a ``` fence pairs with no inline backtick)."""
    return re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.M | re.S)


def spans(doc: Path) -> list[str]:
    """Every inline code span of `doc`, its line breaks and indents joined to single spaces."""
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", text_of(doc))]


def test_the_docs_are_there():
    assert {d.name for d in DOCS} >= {"architecture.md", "evaluation.md", "guarantees.md", "task_formats.md"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_file_and_link_a_doc_names_exists(doc):
    text = doc.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w./-])((?:tests|experiments|configs|aspire)/[\w./*-]*\w)", text))
    named = {p for p in named if "NAME" not in p}  # the recipes' placeholders (aspire/losses/NAME.py)
    assert named, doc
    missing = sorted(p for p in named if not list(REPO.glob(p)))
    links = re.findall(r"\]\(([^)#]+)\)", text)
    missing += sorted(link for link in links if not (doc.parent / link).exists())
    assert missing == [], f"{doc.name} names files that do not exist"


def resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(dotted)


def test_every_aspire_name_the_docs_cite_resolves():
    names = {n for d in DOCS for s in spans(d) for n in re.findall(r"\baspire(?:\.[A-Za-z_]\w*)+", s)}
    assert len(names) >= 20
    unresolved = []
    for name in sorted(names):
        try:
            resolve(name)
        except (ImportError, AttributeError) as err:
            unresolved.append(f"{name}: {err}")
    assert unresolved == []


class Parsed(Exception):
    """Raised, holding its options, by the parser that would read a command's own options."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.actions = dict(parser._option_string_actions)


def options_of(command: list[str], monkeypatch) -> dict[str, argparse.Action]:
    """`{option string: action}` of the parser that reads `aspire COMMAND [SUBCOMMAND]`'s options."""
    from aspire.cli import main as aspire_main

    original = argparse.ArgumentParser.parse_known_args

    def stop_at_the_command(self, args=None, namespace=None):
        leaf = not any(isinstance(a, argparse._SubParsersAction) for a in self._actions)
        if self.prog.startswith("aspire ") and leaf:
            raise Parsed(self)
        return original(self, args, namespace)

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_known_args", stop_at_the_command)
        try:
            aspire_main(command)
        except Parsed as parsed:
            return parsed.actions
    raise AssertionError(f"aspire {' '.join(command)} reached no parser of its own")


def quoted_command_lines() -> list[tuple[str, list[str], str]]:
    """(doc, the command words, the rest of the line) of every quoted `aspire ...` / `python -m aspire.X` line;
    `a|b|c` alternatives give one line each."""
    from aspire.cli import COMMANDS

    by_module = {module: name for name, (module, _) in COMMANDS.items()}
    found = []
    for doc in DOCS:
        for span in spans(doc):
            m = re.match(r"python -m (aspire(?:\.\w+)+)(.*)$", span)
            if m:
                if m.group(1) in by_module:
                    found.append((doc.name, [by_module[m.group(1)]], m.group(2)))
                continue
            m = re.match(r"aspire ([a-z][\w-]*)((?: [a-z][\w|-]*)?)(.*)$", span)
            if not m or m.group(1) not in COMMANDS:
                continue
            subs = m.group(2).split()
            for sub in (subs[0].split("|") if subs else [None]):
                found.append((doc.name, [m.group(1)] + ([sub] if sub else []), m.group(3)))
    return found


def test_every_option_of_a_quoted_command_line_is_the_command_s(monkeypatch):
    lines = quoted_command_lines()
    assert sum(any(w.startswith("--") for w in rest.split()) for _, _, rest in lines) >= 8
    wrong = []
    for doc, command, rest in lines:
        words = rest.split()
        if not any(w.startswith("--") for w in words):
            continue  # a command named, no option (`aspire data`, `aspire index build`)
        actions = options_of(command, monkeypatch)
        for i, word in enumerate(words):
            if not word.startswith("--"):
                continue
            flag = word.split("=")[0]
            if flag not in actions:
                wrong.append(f"{doc}: aspire {' '.join(command)} has no {flag}")
                continue
            value = words[i + 1] if i + 1 < len(words) else ""
            choices = actions[flag].choices
            if choices and value.islower() and value not in choices:
                wrong.append(f"{doc}: aspire {' '.join(command)} {flag} {value}: not one of {list(choices)}")
    assert wrong == []


# Where docs/evaluation.md places the evaluator options: (commands, options). Its first paragraph once said every
# evaluator shares `--ensemble FILE` and the control-code options; `--ensemble` is the suite's alone, and
# `--facet-code`/`--doc-code` are CSFCube's and the pools', the others taking `--code`.
PLACED = [
    (["suite"], ["--ensemble"]),
    (["csfcube", "context2doc", "reviewers"],
     ["--bm25", "--bm25-alpha", "--rerank", "--rerank-top", "--rerank-weight"]),
    (["csfcube", "pools"], ["--facet-code", "--doc-code", "--query-text", "--cand-sentences"]),
    (["context2doc", "reviewers", "suite"], ["--code"]),
    (["context2doc"], ["--split"]),
    (["csfcube"], ["--k1", "--b", "--ranked"]),
    (["reviewers"], ["--scorer"]),
]
NOT_PLACED = [(["csfcube", "pools", "context2doc", "reviewers"], ["--ensemble"]),
              (["context2doc", "reviewers", "suite"], ["--facet-code", "--doc-code"])]


def test_the_evaluator_options_are_where_evaluation_md_places_them(monkeypatch):
    text = (REPO / "docs" / "evaluation.md").read_text(encoding="utf-8")
    for _commands, flags in PLACED + NOT_PLACED:
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"evaluation.md no longer names {flag}"
    for commands, flags in PLACED:
        for name in commands:
            actions = options_of(["evaluate", name], monkeypatch)
            assert [f for f in flags if f not in actions] == [], name
    for commands, flags in NOT_PLACED:
        for name in commands:
            actions = options_of(["evaluate", name], monkeypatch)
            assert [f for f in flags if f in actions] == [], name
    first = text.split("\n\n")[1]
    assert "every evaluator shares" not in first.lower()


def test_the_known_figures_evaluation_md_quotes_are_the_committed_known_answers():
    text = " ".join((REPO / "docs" / "evaluation.md").read_text(encoding="utf-8").split())
    rows = json.loads((REPO / "experiments" / "results" / "known_answers.json").read_text(encoding="utf-8"))["rows"]
    expected = {(r["check"], r["figure"]): r["expected"] for r in rows}
    pools = (expected[("SPECTER CSFCube pools", "MAP")], expected[("SPECTER CSFCube pools", "NDCG%20")])
    assert f"re-score to exactly {pools[0]:.2f} / {pools[1]:.2f}" in text
    losses = [expected[("reviewer set, published predictions", f"{name} loss")] for name in ("specter", "elmo")]
    assert f"re-score to {losses[0]:.4f} and {losses[1]:.4f}" in text


def test_the_context2doc_split_counts_evaluation_md_quotes_are_the_committed_split():
    text = " ".join((REPO / "docs" / "evaluation.md").read_text(encoding="utf-8").split())
    split = json.loads((REPO / "aspire" / "benchmarks" / "splits" / "context2doc.json").read_text(encoding="utf-8"))
    n = {name: split["splits"][name]["n_queries"] for name in ("train", "dev", "test")}
    assert f"train {n['train']:,} / dev {n['dev']:,} / test {n['test']:,} queries" in text
    words = {1: "One", 2: "Two", 3: "Three", 4: "Four"}
    assert f"{words[len(split['excluded_queries'])]} train / dev sentences read as a test query" in text


def test_the_data_counts_evaluation_md_quotes_are_the_data_s(shared_data):
    from aspire.benchmarks.csfcube import load_csfcube
    from aspire.benchmarks.reviewers import load_reviewer_set

    text = " ".join((REPO / "docs" / "evaluation.md").read_text(encoding="utf-8").split())
    csfcube = len(load_csfcube(shared_data / "csfcube").paper_ids())
    assert f"over the {csfcube:,} CSFCube papers" in text
    rset = load_reviewer_set(shared_data / "reviewer-matching")
    papers = {p for d in rset.draws for p in d.submissions}
    papers |= {rec[0] for d in rset.draws for recs in d.archives.values() for rec in recs}
    assert f"IDF over the set's {len(papers):,} papers" in text
    assert f"over the {len(rset.ratings)} reviewers" in text and len(rset.draws) == 10 and "(ten draws" in text
    cited = set()
    with open(shared_data / "cocite-acl" / "cocitations.jsonl", encoding="utf-8") as f:
        for line in f:
            cited |= {c["paper_id"] for c in json.loads(line)["cited"]}
    assert f"all {len(cited)} cited abstracts are candidates" in text
