"""Round 55: the stage-started marker (`STAGE_MARKER`) for the stage writers that did not write it: input B's ingest
(`mine_s2orc`), `align` and `hard-negatives`. Before, a run killed after its first file and before its report left a
folder without a report and without a marker: a rerun into it was refused as a hand-built folder, and a later stage
read the half-written folder as hand-built input."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import aspire.data.align as align_mod
import aspire.data.negatives as negatives_mod
import aspire.data.s2orc as s2orc_mod
from aspire.data.align import AlignConfig, align_examples
from aspire.data.cocite import IngestConfig, check_stage_input, check_stage_out
from aspire.data.cocite.stages import STAGE_MARKER, started_stage
from aspire.data.negatives import HardNegativesConfig, mine_hard_negatives
from aspire.data.s2orc import mine_s2orc
from tests.test_align import _HashTeacher

PLAIN = IngestConfig(splitter="regex", exclude_benchmark_test=False, exclude_benchmark_papers=False)
TEXT = "We use A [1] here. B [2] and C [3] agree."
BIB = {"B1": {"title": "t", "link": "P1"}, "B2": {"title": "t", "link": "P2"}, "B3": {"title": "t", "link": "P3"}}


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cite(marker: str, ref: str) -> dict:
    start = TEXT.index(marker)
    return {"start": start, "end": start + len(marker), "text": marker, "ref_id": ref}


def _s2orc_inputs(tmp_path: Path) -> tuple[Path, Path]:
    paper = {"paper_id": "C", "bib_entries": BIB, "body_text": [
        {"text": TEXT, "section": "I", "cite_spans": [_cite("[1]", "B1"), _cite("[2]", "B2"), _cite("[3]", "B3")]}]}
    abstracts = [{"paper_id": p, "title": p, "abstract": ["One sentence.", "Two sentences."]}
                 for p in ("P1", "P2", "P3")]
    return _write(tmp_path / "f.jsonl", [paper]), _write(tmp_path / "a.jsonl", abstracts)




def _examples_dir(tmp_path: Path) -> Path:
    papers = {"P": ["P zero.", "P one."], "Q": ["Q zero.", "Q one."], "N": ["N zero."]}
    example = {"example_id": "P|Q", "query_id": "P", "positive_id": "Q", "negative_ids": ["N"],
               "contexts_clean": ["P one.", "Q zero."]}
    d = tmp_path / "examples"
    d.mkdir(exist_ok=True)
    _write(d / "abstracts.jsonl", [{"paper_id": k, "title": k, "abstract": v} for k, v in papers.items()])
    _write(d / "examples.train.jsonl", [example])
    _write(d / "examples.dev.jsonl", [example])
    _write(d / "groups.train.jsonl", [{"set_id": "P|Q", "paper_ids": ["P", "Q"], "context_ids": ["X#L1"]}])
    _write(d / "groups.dev.jsonl", [])
    return d


def _run(stage: str, tmp_path: Path, out: Path):
    if stage == "ingest":
        return mine_s2orc(*_s2orc_inputs(tmp_path), out, PLAIN)
    if stage == "align":
        return align_examples(_examples_dir(tmp_path), _HashTeacher(), out, AlignConfig())
    return mine_hard_negatives(_examples_dir(tmp_path), out, HardNegativesConfig())


MODULE = {"ingest": s2orc_mod, "align": align_mod, "hard-negatives": negatives_mod}
READER = {"ingest": "filter", "align": "hard-negatives", "hard-negatives": None}  # a stage reading the output


@pytest.mark.parametrize("stage", ["ingest", "align", "hard-negatives"])
def test_a_run_killed_before_its_report_leaves_its_marker_and_is_rerun(stage, tmp_path, monkeypatch, caplog):
    """The stage is killed at its report (after every data file): the folder holds the stage's marker and no report,
    a later stage refuses it as input, `check_stage_out` lets the same stage replace it (with the warning), and the
    rerun finishes with a report and no marker. Before, no marker was written: the rerun was refused as a
    hand-built folder and a later stage read the half-written folder."""
    out = tmp_path / "out"

    def killed(path, obj, *args, **kwargs):
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as m:
        m.setattr(MODULE[stage], "write_json", killed)
        with pytest.raises(KeyboardInterrupt):
            _run(stage, tmp_path, out)
    assert not (out / "report.json").exists()
    assert started_stage(out) == stage
    if READER[stage]:
        with pytest.raises(ValueError, match="stopped before it finished"):
            check_stage_input(out, READER[stage])
    with pytest.raises(FileExistsError, match="stopped before it finished"):
        check_stage_out(out, "group")  # another stage never replaces it
    with caplog.at_level(logging.WARNING, logger="aspire.data.cocite.stages"):
        check_stage_out(out, stage)
    assert "it is replaced" in caplog.text
    report = _run(stage, tmp_path, out)
    assert report["stage"] == stage and json.loads((out / "report.json").read_text())["stage"] == stage
    assert not (out / STAGE_MARKER).exists() and started_stage(out) is None
    check_stage_out(out, stage)  # a finished output: replaceable by its own stage
    if READER[stage]:
        check_stage_input(out, READER[stage])


@pytest.mark.parametrize("stage", ["ingest", "align", "hard-negatives"])
def test_a_finished_run_leaves_no_marker_and_a_hand_built_folder_is_refused(stage, tmp_path):
    out = tmp_path / "out"
    _run(stage, tmp_path, out)
    assert not (out / STAGE_MARKER).exists()
    hand = tmp_path / "hand"
    hand.mkdir()
    (hand / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        check_stage_out(hand, stage)
    assert (hand / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("stage,files", [("align", ["examples.train.jsonl", "abstracts.jsonl"]),
                                         ("hard-negatives", ["hard_negatives.jsonl"])])
def test_a_marked_align_or_negatives_folder_with_other_files_is_refused(tmp_path, stage, files):
    """The lead's mend: STAGE_FILES names align's and hard-negatives' files, so a marked unfinished folder of theirs
    holding a file they do not write is refused and left as it is (it was replaced with the warning)."""
    from aspire.data.cocite.stages import STAGE_MARKER, check_stage_out

    out = tmp_path / stage
    out.mkdir()
    (out / STAGE_MARKER).write_text(stage + "\n", encoding="utf-8")
    for name in files:
        (out / name).write_text("{}\n", encoding="utf-8")
    check_stage_out(out, stage)  # only its own files: replaced
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(FileExistsError, match="files the stage does not write"):
        check_stage_out(out, stage)
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_training_refuses_an_examples_or_negatives_folder_a_stage_left_unfinished(tmp_path):
    """The lead's mend: the trainer read an align (or hard-negatives) folder holding the stage-started marker and no
    report as finished examples; `load_split` now refuses it, naming the setting, before reading any file."""
    from aspire.train.config import DataConfig
    from aspire.train.data import load_split

    killed = tmp_path / "aligned"
    killed.mkdir()
    (killed / STAGE_MARKER).write_text("align\n", encoding="utf-8")
    (killed / "examples.train.jsonl").write_text("{}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"data\.examples_dir: .*aligned holds the output of stage 'align' stopped"):
        load_split(DataConfig(examples_dir=str(killed)), "train")
    mined = tmp_path / "negatives"
    mined.mkdir()
    (mined / STAGE_MARKER).write_text("hard-negatives\n", encoding="utf-8")
    (tmp_path / "examples").mkdir()
    with pytest.raises(ValueError, match=r"data\.hard_negatives: .*negatives holds the output of stage 'hard-negatives'"):
        load_split(DataConfig(examples_dir=str(tmp_path / "examples"),
                              hard_negatives=str(mined / "hard_negatives.jsonl")), "train")
