"""Co-citation training data: ingest -> filter -> group -> split -> examples.

Every stage reads the previous stage's directory, writes JSONL files plus a `report.json` of
counts, and writes each file atomically (a temp file, then a rename; `report.json` last, so its
presence marks a finished stage). `python -m aspire.data STAGE ...` runs one stage;
`run_all` (CLI `run-all`) chains them for co-citation records (input A) on embedded defaults.

Inputs
------
A. Co-citation records (`../shared/data/cocite-acl/cocitations.jsonl`): one a line,
   `{citing_paper_id, context, source, all_links_confirmed, cited: [{paper_id, title, abstract}]}`, the ids
   non-empty strings (a number is refused, naming the line)
   -> `ingest_records`.
B. S2ORC-style full text + a table of abstracts -> `aspire.data.s2orc.mine_s2orc` (same output).

Formats (all JSONL, one object a line, UTF-8)
----------------------------------------------
`contexts.jsonl` (ingest, filter): one citing sentence
    {"context_id": str (unique), "citing_paper_id": str, "text": raw sentence,
     "text_clean": the sentence with citation markers replaced by `placeholder` ("[CIT]"),
     "cited_ids": sorted distinct cited paper ids (never the citing paper's own), "source": str,
     "links_confirmed": bool}
`abstracts.jsonl` (ingest, filter, examples): the `Paper` JSONL format
    {"paper_id": str, "title": str, "abstract": [sentences]}
`groups.jsonl` (group) and `groups.{train,dev}.jsonl` (split): one co-cited set
    {"set_id": "|".join(paper_ids), "paper_ids": sorted ids, "context_ids": [...],
     "contexts": [raw texts], "contexts_clean": [cleaned texts]}
`examples.{train,dev}.jsonl` (examples): one unordered co-cited pair (p, p') of a split
    {"example_id": "p|p'", "split": "train"|"dev", "query_id": p, "positive_id": p' (p < p'),
     "negative_ids": [n, ...] (seeded; never a paper co-cited with p or p' in either split, nor
     another version of p, p' or such a paper: `aspire.data.acl.same_work_groups`),
     "set_ids": sets holding the pair, "context_ids", "contexts", "contexts_clean": every
     context of the split citing both p and p'}
    The examples directory also holds `abstracts.jsonl` for every paper the examples name and a
    copy of `groups.{train,dev}.jsonl`, so it is self-contained. `aspire.data.align` (CLI
    `align`) writes the same files with each example's `cc_align` / `abs_align` added.

Tokens (for the length filters) are counted by a named tokenizer from `TOKENIZERS`:
`regex` (default: words, whole numbers and hyphen/apostrophe compounds are one token, so is a
bracketed upper-case tag such as the placeholder "[CIT]", each other non-space character is one
token, so a decimal "95.2" is three, where spaCy keeps it whole; otherwise close to spaCy's English
tokenizer), `whitespace`, or `spacy_blank` (spaCy's rule-based
English tokenizer, no model; it splits "[CIT]" into three tokens). Context lengths are counted on
`text_clean` by default (`filter.count_on`), so a citation marker like "(Brants, 2000)" counts
as one token rather than five.

Citation markers (`clean_citations`) are found by regular expressions tuned on ACL-style text:
parentheses or brackets holding a year ("(Brants, 2000)", "(Lin, 1998; Lin and Pantel, 2002)"),
numeric brackets ("[12]", "[3, 4]"), and narrative citations ("Petrov et al (2012)",
"Dale and Reiter (1995)"). It is best-effort: the raw text is always kept beside it.

Stage folders: a stage reads only its predecessor's output (the stage its `report.json` names) and writes
only into a new or empty folder or one it wrote before; an output that leaves the later stages nothing (every
context filtered out, no train example) is an error, its files kept (`stages`).

Modules: `config` (the settings), `text` (tokenizers, citation markers), `ingest` (stages 1-2),
`sets` (stages 3-5), `stages` (stage folders); `run_all` here chains them. JSONL reading and atomic writing are
`aspire.io`'s (re-exported here, with the names the stages have always used).
"""

from __future__ import annotations

import shutil
from collections.abc import Collection
from pathlib import Path

from aspire.config import to_dict
from aspire.data.cocite.config import (
    REPORT,
    SPLITS,
    CociteConfig,
    ExamplesConfig,
    FilterConfig,
    IngestConfig,
    SplitConfig,
    load_cocite_config,
)
from aspire.data.cocite.ingest import filter_contexts, ingest_records
from aspire.data.cocite.sets import (
    build_examples,
    group_contexts,
    iter_examples,
    pair_components,
    pairs_of,
    set_id,
    split_groups,
)
from aspire.data.cocite.stages import (
    NEEDS,
    PIPELINE,
    PIPELINE_REPORT,
    STAGE_DIRS,
    check_run_all_out,
    check_something_left,
    check_stage_input,
    check_stage_out,
    nothing_left,
    remove_temporaries,
    stage_of,
)
from aspire.data.cocite.text import MARK, TOKENIZERS, clean_citations, finish_marks, get_tokenizer
from aspire.io import AtomicJsonl, DataError, iter_jsonl, require, write_json

__all__ = [
    "REPORT", "SPLITS", "STAGE_DIRS", "CociteConfig", "IngestConfig", "FilterConfig", "SplitConfig", "ExamplesConfig",
    "load_cocite_config", "ingest_records", "filter_contexts", "group_contexts", "split_groups", "build_examples",
    "run_all", "iter_examples", "NEEDS", "PIPELINE", "PIPELINE_REPORT", "stage_of", "check_stage_input",
    "check_stage_out", "check_run_all_out", "check_something_left", "nothing_left", "set_id", "pairs_of", "pair_components",
    "MARK", "TOKENIZERS", "get_tokenizer", "clean_citations", "finish_marks",
    "DataError", "AtomicJsonl", "iter_jsonl", "require", "write_json",
]


def run_all(records_path: str | Path, out_dir: str | Path, cfg: CociteConfig | None = None,
            held_out: Collection[str] | None = None, held_out_papers=None) -> Path:
    """Input A end to end: `out_dir/{1_ingest,...,5_examples}` and `out_dir/pipeline_report.json`.

    Returns the examples directory (`examples.{train,dev}.jsonl`, `abstracts.jsonl`,
    `groups.{train,dev}.jsonl`); `python -m aspire.data align` adds the sentence alignments.
    `held_out`: the benchmark test sentences the ingest stage leaves out; `held_out_papers`: the benchmark papers
    (CSFCube's and the reviewer set's, a `HeldOut`) it takes out of the records citing them (`ingest_records`).
    `out_dir` must be new, empty or an earlier run's (`check_run_all_out`), whose `pipeline_report.json` (it
    stands for a finished run), its temporary files (a run killed while writing it) and stage folders (each checked
    to be its stage's output) go first: a run that stops leaves no earlier run's later stages behind, which a later
    stage or training would read as this run's (examples built without the benchmark papers taken out, say). A
    stage that leaves nothing for the next (`nothing_left`) stops the run with a ValueError, its folder and the
    earlier ones kept.
    """
    cfg = cfg or CociteConfig()
    out_dir = Path(out_dir)
    check_run_all_out(out_dir)
    (out_dir / PIPELINE_REPORT).unlink(missing_ok=True)
    if out_dir.is_dir():  # a run killed while writing its report left the report's temporary file
        remove_temporaries(out_dir, {PIPELINE_REPORT})
    dirs = [out_dir / name for name in STAGE_DIRS]
    for folder in dirs:  # an earlier run's stage outputs only (check_run_all_out)
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
    steps = [
        lambda: ingest_records(records_path, dirs[0], cfg.ingest, held_out, held_out_papers),
        lambda: filter_contexts(dirs[0], dirs[1], cfg.filter),
        lambda: group_contexts(dirs[1], dirs[2]),
        lambda: split_groups(dirs[2], dirs[3], cfg.split),
        lambda: build_examples(dirs[3], dirs[4], cfg.examples),
    ]
    reports = {}
    for stage, folder, step in zip(PIPELINE, dirs, steps):
        reports[stage] = step()
        check_something_left(reports[stage], folder)
    write_json(out_dir / PIPELINE_REPORT, {"config": to_dict(cfg), "stages": reports})
    return dirs[4]
