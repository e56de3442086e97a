"""`aspire data` stage folders: a stage reads only its predecessor's output, writes only into a new or empty
folder or its own earlier output, refuses a teacher that is not one, and stops where nothing is left to train on."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aspire.cli.data import _parser
from aspire.cli.data import main as data_main
from aspire.config import ConfigError, load_config
from aspire.data import cocite
from aspire.data.align import AlignConfig
from aspire.data.negatives import HardNegativesConfig
from tests.test_cocite import _own_abstract

ABSTRACT = ["First sentence of the abstract.", "Second sentence here.", "Third and last sentence."]
CONTEXT = "This context is long enough to pass the token filter easily (Smith, 2000; Jones, 2001)."
NO_HELD_OUT = "ingest.exclude_benchmark_test=false"  # tiny records: no benchmark sentence to leave out


def _records(path: Path, n: int = 30) -> Path:
    """`n` co-citation records, record i citing papers p{i} and p{i+1}: every one passes the default filters. Each
    paper's abstract is its own (one shared abstract would make every paper one work: `same_work_groups`)."""
    rows = [{"citing_paper_id": f"X{i}", "context": f"{CONTEXT} {i}.", "source": "test", "all_links_confirmed": True,
             "cited": [{"paper_id": p, "title": p, "abstract": _own_abstract(p)}
                       for p in (f"p{i}", f"p{i + 1}")]}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(argv: list[str], capsys) -> tuple[int, str]:
    """The exit status of `aspire data ARGV` and its stderr."""
    status = data_main([*argv, "-q"])
    return status, capsys.readouterr().err


@pytest.fixture()
def pipeline(tmp_path, capsys) -> Path:
    """A finished run-all folder: `1_ingest` ... `5_examples` and `pipeline_report.json`."""
    out = tmp_path / "cc"
    assert data_main(["run-all", "--in", str(_records(tmp_path / "r.jsonl")), "--out", str(out), NO_HELD_OUT,
                      "-q"]) == 0
    capsys.readouterr()
    return out


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- where a stage may write


@pytest.mark.parametrize("argv, into", [
    (["filter", "--in", "{cc}/1_ingest"], "5_examples"),
    (["group", "--in", "{cc}/2_filter"], "1_ingest"),
    (["examples", "--in", "{cc}/4_split"], "3_group"),
    (["hard-negatives", "--examples", "{cc}/5_examples"], "2_filter"),
    (["align", "--examples", "{cc}/5_examples", "--teacher", "{cc}"], "2_filter"),
    (["cocite-from-records", "--in", "{cc}/../r.jsonl", NO_HELD_OUT], "2_filter"),
])
def test_a_stage_never_writes_into_another_stages_folder(pipeline, capsys, argv, into):
    before = _snapshot(pipeline)
    argv = [a.replace("{cc}", str(pipeline)) for a in argv]
    status, err = _run([*argv, "--out", str(pipeline / into)], capsys)
    stage = {"cocite-from-records": "ingest"}.get(argv[0], argv[0])
    written_by = {"5_examples": "examples", "1_ingest": "ingest", "3_group": "group", "2_filter": "filter"}[into]
    assert status == 2
    assert err.startswith(f"error: {pipeline / into} holds the output of stage '{written_by}', not of '{stage}'")
    assert _snapshot(pipeline) == before  # nothing replaced, nothing removed


def test_a_stage_refuses_a_folder_of_other_files_and_a_file(pipeline, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    status, err = _run(["filter", "--in", str(pipeline / "1_ingest"), "--out", str(mine)], capsys)
    assert status == 2 and "exists and is not an earlier output of stage 'filter' (no report.json" in err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    (mine / "report.json").write_text('{"loss": 1.0}')  # another tool's report
    status, err = _run(["filter", "--in", str(pipeline / "1_ingest"), "--out", str(mine)], capsys)
    assert status == 2 and "a report.json that names no data stage" in err
    assert (mine / "report.json").read_text() == '{"loss": 1.0}'
    status, err = _run(["filter", "--in", str(pipeline / "1_ingest"), "--out", str(mine / "notes.txt")], capsys)
    assert status == 2 and (mine / "notes.txt").read_text() == "keep me"


def test_a_stage_rewrites_its_own_earlier_output_and_fills_an_empty_folder(pipeline, tmp_path, capsys):
    status, _ = _run(["filter", "--in", str(pipeline / "1_ingest"), "--out", str(pipeline / "2_filter"),
                      "filter.max_cited=2"], capsys)
    assert status == 0
    assert json.loads((pipeline / "2_filter" / "report.json").read_text())["config"]["max_cited"] == 2
    (tmp_path / "empty").mkdir()
    assert _run(["filter", "--in", str(pipeline / "1_ingest"), "--out", str(tmp_path / "empty")], capsys)[0] == 0


def test_run_all_writes_only_into_a_new_empty_or_earlier_run_all_folder(pipeline, tmp_path, capsys):
    records = str(tmp_path / "r.jsonl")
    before = _snapshot(pipeline)
    for out in (pipeline / "2_filter", tmp_path):  # a stage's folder; a folder of other files
        status, err = _run(["run-all", "--in", records, "--out", str(out), NO_HELD_OUT], capsys)
        assert status == 2 and "is not an earlier run-all's folder (no pipeline_report.json" in err
    assert _snapshot(pipeline) == before
    assert _run(["run-all", "--in", records, "--out", str(pipeline), NO_HELD_OUT], capsys)[0] == 0
    # a run that stopped early left only stage folders: it may be run again there
    (pipeline / "pipeline_report.json").unlink()
    assert _run(["run-all", "--in", records, "--out", str(pipeline), NO_HELD_OUT], capsys)[0] == 0
    # or stopped after its first stage, with other outputs beside its stage folders
    (pipeline / "pipeline_report.json").unlink()
    (pipeline / "6_aligned").mkdir()
    assert _run(["run-all", "--in", records, "--out", str(pipeline), NO_HELD_OUT], capsys)[0] == 0
    assert (pipeline / "6_aligned").is_dir()
    # ... unless one of its stage folders holds another stage's output
    (pipeline / "pipeline_report.json").unlink()
    (pipeline / "3_group" / "report.json").write_text(json.dumps({"stage": "split"}))
    status, err = _run(["run-all", "--in", records, "--out", str(pipeline), NO_HELD_OUT], capsys)
    assert status == 2 and "3_group holds the output of stage 'split', not of 'group'" in err


# --------------------------------------------------------------------------- what a stage reads


@pytest.mark.parametrize("argv, wrote, needs", [
    (["group", "--in", "{cc}/1_ingest"], "ingest", "'filter'"),
    (["split", "--in", "{cc}/2_filter"], "filter", "'group'"),
    (["examples", "--in", "{cc}/3_group"], "group", "'split'"),
    (["filter", "--in", "{cc}/5_examples"], "examples", "'ingest'"),
    (["hard-negatives", "--examples", "{cc}/4_split"], "split", "'examples' or 'align'"),
    (["align", "--examples", "{cc}/2_filter", "--teacher", "{cc}"], "filter", "'examples'"),
])
def test_a_stage_refuses_input_from_the_wrong_stage(pipeline, tmp_path, capsys, argv, wrote, needs):
    argv = [a.replace("{cc}", str(pipeline)) for a in argv]
    status, err = _run([*argv, "--out", str(tmp_path / "o")], capsys)
    given = argv[2]
    assert status == 2
    assert err == f"error: {given} holds the output of stage '{wrote}'; {argv[0]} reads the output of stage {needs}\n"
    assert not (tmp_path / "o").exists()


def test_a_stage_given_run_alls_folder_is_told_the_stage_folder_inside(pipeline, tmp_path, capsys):
    status, err = _run(["hard-negatives", "--examples", str(pipeline), "--out", str(tmp_path / "h")], capsys)
    assert status == 2 and err == (f"error: {pipeline} is run-all's folder; hard-negatives reads the output of stage "
                                   f"'examples' or 'align': {pipeline / '5_examples'}\n")


def test_a_stage_refuses_a_file_as_its_input_folder(tmp_path, capsys):
    records = _records(tmp_path / "r.jsonl")
    status, err = _run(["filter", "--in", str(records), "--out", str(tmp_path / "o")], capsys)
    assert status == 2 and err == f"error: {records} is not a folder; filter reads the output folder of stage 'ingest'\n"


def test_a_hand_built_input_without_a_report_is_read(tmp_path):
    (tmp_path / "g").mkdir()
    cocite.check_stage_input(tmp_path / "g", "split")  # no report.json: nothing to check against
    (tmp_path / "g" / "report.json").write_text(json.dumps({"stage": "group"}))
    cocite.check_stage_input(tmp_path / "g", "split")
    with pytest.raises(ValueError, match="holds the output of stage 'group'; examples reads"):
        cocite.check_stage_input(tmp_path / "g", "examples")


# --------------------------------------------------------------------------- help, teacher, config ranges


@pytest.mark.parametrize("stage, config", [("align", AlignConfig), ("hard-negatives", HardNegativesConfig)])
def test_model_stages_help_names_their_config_and_an_override_they_accept(stage, config, capsys):
    with pytest.raises(SystemExit):
        _parser("aspire data").parse_args([stage, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "CociteConfig" not in text and f"YAML config ({config.__name__})" in text
    (example,) = re.findall(r"e\.g\. (\S+=\S+)", text)
    load_config(config, None, [example])  # the example is one the stage takes


def test_align_refuses_a_teacher_that_is_not_a_sentence_model(pipeline, tmp_path, capsys):
    run = tmp_path / "run1"
    (run / "checkpoint-000001" / "model").mkdir(parents=True)
    (run / "checkpoint-000001" / "model" / "config.json").write_text('{"model_type": "bert"}')
    (run / "checkpoint-000001" / "model" / "aspire_encoder.json").write_text("{}")
    (run / "best").write_text(json.dumps({"checkpoint": "checkpoint-000001"}))
    cosent = tmp_path / "cosentbert"
    (cosent / "model").mkdir(parents=True)
    (cosent / "model" / "modules.json").write_text("[]")
    cases = {run: "is a training run's folder, not a teacher; a teacher is a sentence-transformers model folder",
             run / "checkpoint-000001" / "model": "is an aspire encoder (aspire_encoder.json), not a teacher",
             cosent: f"did you mean {cosent / 'model'} (CoSentBert's model)?",
             pipeline: "holds no modules.json or config.json; a teacher is"}
    for teacher, says in cases.items():
        status, err = _run(["align", "--examples", str(pipeline / "5_examples"), "--teacher", str(teacher),
                            "--out", str(tmp_path / "aligned")], capsys)
        assert status == 2 and err.startswith(f"error: --teacher {teacher} ") and says in err, err
    assert not (tmp_path / "aligned").exists()


def test_negative_counts_and_dev_fraction_out_of_range_are_named(tmp_path, capsys):
    with pytest.raises(ConfigError, match="examples.num_negatives: must be >= 0, got -1"):
        cocite.load_cocite_config(None, ["examples.num_negatives=-1"])
    records = str(_records(tmp_path / "r.jsonl"))
    status, err = _run(["run-all", "--in", records, "--out", str(tmp_path / "o"), "examples.num_negatives=-1"], capsys)
    assert status == 2 and err == "error: examples.num_negatives: must be >= 0, got -1\n"
    assert not (tmp_path / "o").exists()  # refused before the first stage ran
    status, err = _run(["run-all", "--in", records, "--out", str(tmp_path / "o"), "split.dev_fraction=1"], capsys)
    assert status == 2 and err == "error: split.dev_fraction: must be < 1, got 1.0\n"


# --------------------------------------------------------------------------- nothing left to train on


def test_run_all_stops_where_the_filters_remove_every_context(tmp_path, capsys):
    records, out = str(_records(tmp_path / "r.jsonl")), tmp_path / "o"
    status, err = _run(["run-all", "--in", records, "--out", str(out), NO_HELD_OUT, "filter.min_context_tokens=50"],
                       capsys)
    assert status == 2
    assert err == (f"error: {out / '2_filter'}: the filters removed all 30 contexts (context_tokens 30); no later stage "
                   "can use it (counts in its report.json)\n")
    assert sorted(p.name for p in out.iterdir()) == ["1_ingest", "2_filter"]  # what was written is kept
    assert json.loads((out / "2_filter" / "report.json").read_text())["contexts_out"] == 0
    assert _run(["run-all", "--in", records, "--out", str(out), NO_HELD_OUT], capsys)[0] == 0  # and run again


def test_a_single_stage_that_leaves_nothing_is_an_error(pipeline, tmp_path, capsys):
    status, err = _run(["filter", "--in", str(pipeline / "1_ingest"), "--out", str(tmp_path / "f"),
                        "filter.min_context_tokens=50"], capsys)
    assert status == 2 and "the filters removed all 30 contexts (context_tokens 30)" in err
    status, err = _run(["examples", "--in", str(pipeline / "4_split"), "--out", str(tmp_path / "e"),
                        "examples.num_negatives=100"], capsys)
    assert status == 2
    assert "no train example: all 27 train pairs were dropped, each having fewer than examples.num_negatives=100" in err
    assert (tmp_path / "e" / "report.json").is_file()  # its files stay, to be looked at


def test_run_all_stops_at_ingest_or_split_when_they_leave_nothing(tmp_path):
    one_paper = tmp_path / "one.jsonl"  # each record cites one paper (twice): no co-cited pair
    one_paper.write_text(json.dumps({"citing_paper_id": "X", "context": CONTEXT, "cited": [
        {"paper_id": "p", "title": "p", "abstract": ABSTRACT}] * 2}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"1_ingest: no context citing two or more papers is left "
                                         r"\(dropped_fewer_than_2_cited 1\); no later stage can use it"):
        cocite.run_all(one_paper, tmp_path / "a", held_out=())
    cfg = cocite.load_cocite_config(None, ["split.dev_fraction=0.6"])  # one set: round(0.6) puts it in dev
    with pytest.raises(ValueError, match=r"4_split: no co-cited set is left for train \(split.dev_fraction=0.6 put all "
                                         r"1 in dev\)"):
        cocite.run_all(_records(tmp_path / "r.jsonl", n=1), tmp_path / "b", cfg, held_out=())
    assert not (tmp_path / "b" / "5_examples").exists() and (tmp_path / "b" / "4_split" / "report.json").is_file()


def test_align_refusals_come_before_torch(pipeline, tmp_path):
    """The folder and teacher checks come before align loads torch and its teacher."""
    run = tmp_path / "run1"
    run.mkdir()
    (run / "best").write_text(json.dumps({"checkpoint": "checkpoint-000001"}))
    examples = str(pipeline / "5_examples")
    argvs = [["align", "--examples", examples, "--teacher", str(run), "--out", str(pipeline / "2_filter")],
             ["align", "--examples", str(pipeline / "4_split"), "--teacher", str(run), "--out", str(tmp_path / "a")],
             ["align", "--examples", examples, "--teacher", str(run), "--out", str(tmp_path / "a")]]
    code = ("import json, sys\nfrom aspire.cli.data import main\n"
            "statuses = [main(argv + ['-q']) for argv in json.loads(sys.argv[1])]\n"
            "print(json.dumps([statuses, sorted(m for m in ('torch', 'transformers') if m in sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout) == [[2, 2, 2], []], done.stderr
    assert [line.split(" holds")[0].split(" is a")[0] for line in done.stderr.splitlines()] == [
        f"error: {pipeline / '2_filter'}", f"error: {pipeline / '4_split'}", f"error: --teacher {run}"]
