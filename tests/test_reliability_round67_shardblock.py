"""The README's search block beyond one index, run as written (round 67): 400 ACL abstracts split, encoded in 48
shards by `torchrun ... encode-shard`, merged (flat, and IVF-PQ by configs/index-million.yaml with
index.ivf_nlist=0), then searched. The merged flat index answered 20 queries under seven pipelines with the same top
10 as `aspire index build` of the same papers. Two things read wrong on the way:

- a search asking for BM25 on the index-million merge (`index.store_bm25: false`) logged that the index was "saved
  before aspire kept it; rebuild or re-save it to store one", when it was built that day and a rebuild with that
  config stores none again; the `--search-pipeline` run's in-memory index read the same;
- the README's `aspire evaluate context2doc --model minilm --search-pipeline stages=ann,bm25 rerank=minl2` printed
  two "note: override 'stages=ann,bm25' is read as 'search.stages=ann,bm25' ... the old form will go" lines: the
  README, and `aspire evaluate`'s own examples, help and errors, taught the form the command deprecates.
"""

from __future__ import annotations

import logging
import shlex

import pytest
from test_index import random_corpus
from test_index_stream import cfg, write_shards
from test_readme import readme_commands

from aspire.index import SentenceIndex
from aspire.index.stream import merge_streaming
from aspire.search import Searcher


def bm25_reason(caplog, index: SentenceIndex) -> str:
    """The log line of the first BM25 search of `index`: why it builds one at query time."""
    searcher = Searcher(index)
    with caplog.at_level(logging.INFO, logger="aspire.index.lexical"):
        hits = searcher.search(searcher.query_from_index(index.paper_ids[0]), stages="bm25", k=3)
    assert len(hits) == 3
    lines = [r.getMessage() for r in caplog.records if r.name == "aspire.index.lexical"]
    assert len(lines) == 1 and lines[0].startswith("building BM25 (k1=1.25, b=0.75)"), lines
    return lines[0]


def test_a_merge_without_stored_bm25_names_the_setting_not_an_old_save(tmp_path, caplog):
    merge_streaming(write_shards(tmp_path), tmp_path / "idx", cfg(kind="flat", store_bm25=False))  # index-million's
    reason = bm25_reason(caplog, SentenceIndex.load(tmp_path / "idx"))
    assert "index.store_bm25 false" in reason and "saved before" not in reason, reason


def test_an_index_not_yet_saved_is_not_said_to_be_an_old_save_alone(caplog):
    reason = bm25_reason(caplog, SentenceIndex.build(random_corpus(8, seed=1), cfg(kind="flat"), "fp"))
    assert "not saved yet" in reason, reason


def search_override_keys(argv: list[str]) -> list[str]:
    """The overrides given to `--search-pipeline` in `argv` (every item after it up to the next option)."""
    if "--search-pipeline" not in argv:
        return []
    rest = argv[argv.index("--search-pipeline") + 1:]
    return rest[:next((i for i, x in enumerate(rest) if x.startswith("-")), len(rest))]


def bare(argv: list[str]) -> list[str]:
    """The `--search-pipeline` items not written section.key=value (read with a deprecation note)."""
    return [item for item in search_override_keys(argv) if not item.startswith("search.")]


def test_readme_search_pipeline_lines_write_overrides_as_section_key_value():
    lines = [(line, argv) for line, argv in readme_commands() if "--search-pipeline" in argv]
    assert lines, "the README has a --search-pipeline line"
    assert [(line, bare(argv)) for line, argv in lines if bare(argv)] == []


def test_evaluate_examples_write_search_overrides_as_section_key_value():
    from aspire.cli.evaluate import COMMANDS

    lines = [shlex.split(line) for command in COMMANDS.values()
             for line in command.examples.replace("\\\n", " ").splitlines()]
    pipelines = [argv for argv in lines if "--search-pipeline" in argv]
    assert len(pipelines) >= 2 and all(search_override_keys(argv) for argv in pipelines)
    assert [argv for argv in pipelines if bare(argv)] == []


@pytest.mark.parametrize("command", ["csfcube", "reviewers", "context2doc"])
def test_evaluate_help_and_errors_write_search_overrides_as_section_key_value(command, capsys):
    from aspire.cli.evaluate import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "--search-pipeline" in helptext and "(e.g. search." in helptext
    with pytest.raises(SystemExit):  # refused before any model loads: the error names the form to write
        main([command, "--model", "minilm", "--bm25", "--search-pipeline", "search.rerank=none", "--out", "o"])
    assert "(search.stages=, search.rerank=, search.fuse=)" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a model-run option beside it: the error names the search keys to give instead
        main([command, "--model", "minilm", "--tau", "5", "--search-pipeline", "search.rerank=ot", "--out", "o"])
    assert "e.g. search.bm25_k1=, search.ot_tau=" in capsys.readouterr().err
