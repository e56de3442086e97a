"""Build training data: the co-citation pipeline, one stage a command (`aspire data STAGE ...`).

    python -m aspire.data cocite-from-records --in cocitations.jsonl --out runs/cc/1_ingest
    python -m aspire.data cocite-from-s2orc --fulltext pdf_parses.jsonl --abstracts abstracts.jsonl --out DIR
    python -m aspire.data filter   --in runs/cc/1_ingest --out runs/cc/2_filter
    python -m aspire.data group    --in runs/cc/2_filter --out runs/cc/3_group
    python -m aspire.data split    --in runs/cc/3_group  --out runs/cc/4_split
    python -m aspire.data examples --in runs/cc/4_split  --out runs/cc/5_examples
    python -m aspire.data run-all  --in cocitations.jsonl --out runs/cc
    python -m aspire.data align    --examples runs/cc/5_examples --teacher runs/cosentbert/model --out runs/cc/6_aligned
    python -m aspire.data hard-negatives --examples runs/cc/6_aligned --out runs/cc/hard_citation [method=nearest|random|coverage|svd ...]

Every co-citation stage takes `--config configs/data_cocite.yaml` (optional; defaults are embedded)
and dotted overrides of the section it reads, such as `filter.max_cited=4` for `filter` (`run-all` reads every
section: `filter.max_cited=4 split.seed=1`; an override no stage of the command reads is an error); `align` takes `AlignConfig`
overrides such as `text_field=contexts`, and `hard-negatives` `HardNegativesConfig` overrides such as
`method=nearest model=mpnet margin=0.05` (`aspire.data.negatives`). Each prints its report (JSON).

A stage reads only the output of the stage before it (the stage its input's `report.json` names) and writes
only into a new or empty `--out` or one it wrote before (`run-all`: an earlier run-all's; an ingest command never
over one of its input files), all checked before anything loads; an output that leaves the later stages nothing
(every context filtered out, no train example) is an error, its files kept (`aspire.data.cocite.stages`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aspire.cliutil import (
    OVERRIDES_HELP,
    Formatter,
    Parser,
    add_common_options,
    check_folders,
    check_paths,
    input_file,
    normalize_overrides,
    print_json,
    run_command,
    setup_logging,
)
from aspire.data import cocite
from aspire.encoders.pretrained import SETTINGS_FILE, check_model
from aspire.paths import BEST, DATA, LATEST

EXAMPLES = """\
  aspire data run-all --in cocitations.jsonl --out runs/cc
  aspire data filter --in runs/cc/1_ingest --out runs/cc/2_filter filter.max_cited=4
  aspire data hard-negatives --examples runs/cc/6_aligned --out runs/cc/hard_citation method=nearest model=mpnet
"""


def _parser(prog: str = "python -m aspire.data") -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=__doc__.split("\n")[0], formatter_class=Formatter,
                    epilog="stages, in order:\n" + __doc__.split("\n\n")[1] + "\n\nexamples:\n" + EXAMPLES,
                    allow_abbrev=False)
    stages = parser.add_subparsers(dest="stage", required=True, metavar="STAGE", help="STAGE --help for its options")

    def stage(name: str, help_: str, config: str = "CociteConfig", override: str = "filter.max_cited=4",
              **inputs: str) -> argparse.ArgumentParser:
        """A stage's subcommand: its input options, `--out`, `--config` (of the class named `config`) and
        overrides (`override` is an example; a flat config's keys have no section)."""
        examples = [line for line in __doc__.split("\n") if f" aspire.data {name} " in line]
        sub = stages.add_parser(name, help=help_, description=help_, formatter_class=Formatter,
                                epilog="example:\n" + "\n".join(examples), allow_abbrev=False)
        for flag, what in inputs.items():
            sub.add_argument(f"--{flag}", dest=flag, required=True, help=what)
        sub.add_argument("--out", required=True,
                         help="output directory: new, empty, or one this stage wrote before")
        sub.add_argument("--config", default=None, help=f"YAML config ({config}); defaults are embedded"
                         + ("; checked, but the group stage reads none of it" if name == "group" else ""))
        flat = "." not in override.split("=")[0]
        sub.add_argument("overrides", nargs="*", metavar="key=value" if flat else "section.key=value",
                         help=(f"config overrides, key=value (the keys of {config})" if flat else OVERRIDES_HELP)
                         + (f", e.g. {override}" if name != "group" else ": none, the group stage reads no config"))
        add_common_options(sub)
        return sub

    stage("cocite-from-records", "input A: co-citation records -> contexts + abstracts", override="ingest.on_error=skip",
          **{"in": "records JSONL"})
    stage("cocite-from-s2orc", "input B: S2ORC-style full text -> contexts + abstracts", override="ingest.splitter=regex",
          fulltext="pdf_parses JSONL", abstracts="abstracts JSONL")
    stage("filter", "the paper's filters, with counts", **{"in": "an ingest directory (cocite-from-records/-s2orc)"})
    stage("group", "group contexts by co-cited set", **{"in": "a filter directory"})
    stage("split", "train/dev split by co-cited set (no pair in both)", override="split.seed=1",
          **{"in": "a group directory"})
    stage("examples", "pairs of each set with contexts and negatives", override="examples.num_negatives=2",
          **{"in": "a split directory"})
    stage("run-all", "input A end to end", override="filter.max_cited=4 split.seed=1", **{"in": "records JSONL"})
    stage("align", "cc_align / abs_align sentence indices by a teacher encoder",
          config="AlignConfig", override="text_field=contexts", examples="an examples directory",
          teacher="a sentence-transformers model directory: CoSentBert's DIR/model from `python -m "
                  "aspire.encoders.cosentbert train --out DIR` (not a training run's folder)")
    stage("hard-negatives", "a negatives file for training (citation, nearest, random, coverage, svd)",
          config="HardNegativesConfig", override="method=nearest",
          examples="an examples or align directory")
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m aspire.data") -> int:
    args = _parser(prog).parse_args(argv)
    setup_logging(args)
    return run_command(lambda: _run(args), args)


# the stage each command writes (its report names it), where it differs from the command's name
WRITES = {"cocite-from-records": "ingest", "cocite-from-s2orc": "ingest"}
# the option naming a stage's input folder, for the stages that read another stage's output
INPUT_OPTION = {"filter": "in", "group": "in", "split": "in", "examples": "in", "align": "examples",
                "hard-negatives": "examples"}
# the options naming an input file (a folder there was an error after --out was made, naming no option)
FILE_OPTIONS = {"cocite-from-records": ("in",), "run-all": ("in",), "cocite-from-s2orc": ("fulltext", "abstracts")}
# the files an ingest command writes into --out: an input file among them (an earlier output's abstracts.jsonl given
# as --abstracts) would be replaced by the output
INGEST_FILES = ("contexts.jsonl", "abstracts.jsonl", cocite.REPORT)
# the `CociteConfig` sections each co-citation stage reads, and the keys within them it does not (`ingest.splitter`
# splits input B's full text): an override of anything else was accepted and never read
STAGE_READS = {"cocite-from-records": ("ingest",), "cocite-from-s2orc": ("ingest",), "filter": ("filter",),
               "group": (), "split": ("split",), "examples": ("examples",),
               "run-all": ("ingest", "filter", "split", "examples")}
STAGE_SKIPS = {"cocite-from-records": ("ingest.splitter",), "run-all": ("ingest.splitter",)}
TEACHER = ("a teacher is a sentence-transformers model folder: CoSentBert's DIR/model, from `python -m "
           "aspire.encoders.cosentbert train --out DIR`")


def _run(args) -> int:
    stage = args.stage
    args.overrides = normalize_overrides(args.overrides)  # an item without `=` is a user error: one line, status 2
    # the stage's inputs, output folder and teacher model first, before torch or the data load
    check_paths(**{flag: getattr(args, flag, None) for flag in ("in", "fulltext", "abstracts", "examples", "teacher")})
    for flag in FILE_OPTIONS.get(stage, ()):
        input_file(getattr(args, flag), f"--{flag}")
    check_folders(out=args.out)  # a folder under a file: once "Not a directory: OUT/pipeline_report.json", no option named
    if stage in INPUT_OPTION:
        cocite.check_stage_input(getattr(args, INPUT_OPTION[stage]), stage)
    if stage == "run-all":
        cocite.check_run_all_out(args.out, warn=False)  # run_all checks it again and logs what it replaces
    else:
        cocite.check_stage_out(args.out, WRITES.get(stage, stage))
    if stage in WRITES:
        written = {(Path(args.out) / name).resolve() for name in INGEST_FILES}
        for flag in FILE_OPTIONS[stage]:
            if Path(getattr(args, flag)).resolve() in written:
                raise ValueError(f"--{flag} {getattr(args, flag)} is a file the {stage} stage writes into --out "
                                 f"{args.out}, which would replace it; give another --out or move the input")
    if stage == "run-all":  # its stage folders are replaced whole: an input inside one was removed, then not found
        given = Path(getattr(args, "in")).resolve()
        for held in (Path(args.out).resolve() / name for name in (*cocite.STAGE_DIRS, cocite.PIPELINE_REPORT)):
            if given == held or held in given.parents:
                raise ValueError(f"--in {getattr(args, 'in')} lies in {held}, which run-all replaces in --out "
                                 f"{args.out}; give another --out or move the input")
    if stage == "align":
        _check_teacher(Path(args.teacher))
    if stage in ("align", "hard-negatives"):
        report = _model_stage(args)
    else:
        report = _cocite_stage(args)
        if stage != "run-all":  # run_all checks each of its stages itself
            cocite.check_something_left(report, args.out)
    print_json(report, indent=2, ensure_ascii=False)
    return 0


def _check_teacher(path: Path) -> None:
    """ValueError unless `path` is a folder `load_sentence_model` reads as a plain sentence encoder: a
    sentence-transformers folder (modules.json) or a Hugging Face encoder folder (config.json) that is not an
    aspire encoder. A training run's folder, or a trained aspire model (its sentence vectors are contextual, not
    what `align` encodes: each sentence and context alone), is refused, and so is CoSentBert's output folder."""
    if not path.is_dir():
        raise ValueError(f"--teacher {path} is not a folder; {TEACHER}")
    if (path / BEST).is_file() or (path / LATEST).is_file():
        raise ValueError(f"--teacher {path} is a training run's folder, not a teacher; {TEACHER}")
    if (path / SETTINGS_FILE).is_file() and not (path / "modules.json").is_file():
        raise ValueError(f"--teacher {path} is an aspire encoder ({SETTINGS_FILE}), not a teacher; {TEACHER}")
    if (path / "modules.json").is_file() or (path / "config.json").is_file():
        return
    if (path / "model" / "modules.json").is_file():
        raise ValueError(f"--teacher {path} is not a model folder; did you mean {path / 'model'} (CoSentBert's model)?")
    raise ValueError(f"--teacher {path} holds no modules.json or config.json; {TEACHER}")


def _model_stage(args) -> dict:
    """`align` and `hard-negatives`: stages with their own config class, and the only ones needing a
    model, which is loaded here and passed in (the `aspire.data` modules import no encoder code)."""
    from aspire.config import load_config

    if args.stage == "align":
        from aspire.data.cocite.config import AlignConfig

        cfg = load_config(AlignConfig, args.config, args.overrides)  # a bad key before torch loads
        from aspire.data.align import align_examples
        from aspire.encoders.cosentbert import load_sentence_model

        return align_examples(args.examples, load_sentence_model(args.teacher), args.out, cfg)
    from aspire.data.negatives import ENCODED, HardNegativesConfig, check_config, mine_hard_negatives

    cfg = load_config(HardNegativesConfig, args.config, args.overrides)
    check_config(cfg)  # an option the method does not read (`method=nearest seed=1`) before the model loads
    encode = None
    if cfg.method in ENCODED:  # the model is loaded here, at the entry point: aspire.data loads none
        check_model(cfg.model)  # a mistyped model.* before torch loads
        from aspire.encoders import load_encoder
        from aspire.evaluate.cache import default_cache_dir
        from aspire.evaluate.encode import encode_papers

        encoder = load_encoder(cfg.model)
        options = {"joiner": " ", "normalize": True, "max_length": cfg.max_length}

        def encode(papers):  # through the vector cache, so a second sampler over the same papers encodes nothing
            batch, _ = encode_papers(encoder, papers, "abstract", default_cache_dir(), cfg.batch_size, options)
            return batch.emb[:, 0]  # (N, D)
    return mine_hard_negatives(args.examples, args.out, cfg, encode)


def _held_out(records_path, cfg, records: bool = False) -> set[str] | None:
    """The context2doc test sentences the ingest stage leaves out (None when the config keeps them); with `records`
    (input A: `records_path` holds co-citation records), their reworded copies in it citing one of the test query's
    papers too (`aspire.benchmarks.heldout.reworded_test_sentences`)."""
    from aspire.benchmarks.context2doc import held_out_for

    if not cfg.ingest.exclude_benchmark_test:
        return None
    held = held_out_for(records_path)
    if records:
        from aspire.benchmarks.heldout import reworded_test_sentences

        held |= reworded_test_sentences(records_path, DATA)
    return held


def _held_out_papers(cfg, data: Path = DATA):
    """The benchmark papers the ingest stage (input A or B) takes out of the records citing them (CSFCube's and the
    reviewer set's, under the shared data folder `data`: `aspire.benchmarks.heldout.cited_benchmark_papers`); None when the
    config keeps them. A missing benchmark folder is an error naming it and the switch, never a silent no-op."""
    from aspire.benchmarks.heldout import cited_benchmark_papers

    if not cfg.ingest.exclude_benchmark_papers:
        return None
    try:
        return cited_benchmark_papers(data)
    except FileNotFoundError as err:
        raise ValueError(f"ingest.exclude_benchmark_papers: {err}; or set ingest.exclude_benchmark_papers=false") \
            from None


def check_overrides_read(stage: str, overrides: list[str]) -> None:
    """ValueError naming the overrides of `CociteConfig` keys the co-citation `stage` does not read (`STAGE_READS`,
    `STAGE_SKIPS`): `aspire data filter ... split.seed=1` once ran with the override accepted and unused. The
    `--config` file may hold every section (configs/data_cocite.yaml does): only the overrides are checked."""
    from aspire.config import parse_overrides

    unread = []
    for section, value in parse_overrides(overrides).items():
        if section not in STAGE_READS[stage]:
            unread.append(section)
        elif isinstance(value, dict):
            unread += [f"{section}.{key}" for key in value if f"{section}.{key}" in STAGE_SKIPS.get(stage, ())]
    if unread:
        reads = ", ".join(STAGE_READS[stage]) or "no config"
        raise ValueError(f"the {stage} stage does not read {', '.join(unread)} (it reads {reads}"
                         + (f", but not {', '.join(STAGE_SKIPS[stage])}" if stage in STAGE_SKIPS else "")
                         + "); leave the override out or give it to the stage that reads it")


def _cocite_stage(args) -> dict:
    """The co-citation stages, configured by `CociteConfig`."""
    stage = args.stage
    cfg = cocite.load_cocite_config(args.config, args.overrides)  # unknown keys first, by the loader
    check_overrides_read(stage, args.overrides)
    if stage == "cocite-from-records":
        return cocite.ingest_records(getattr(args, "in"), args.out, cfg.ingest,
                                     _held_out(getattr(args, "in"), cfg, records=True), _held_out_papers(cfg))
    if stage == "cocite-from-s2orc":
        from aspire.data.s2orc import get_span_splitter, mine_s2orc

        get_span_splitter(cfg.ingest.splitter)  # a mistyped ingest.splitter before the held-out sets load (seconds)
        return mine_s2orc(args.fulltext, args.abstracts, args.out, cfg.ingest, _held_out(args.fulltext, cfg),
                          _held_out_papers(cfg))
    if stage == "filter":
        return cocite.filter_contexts(getattr(args, "in"), args.out, cfg.filter)
    if stage == "group":
        return cocite.group_contexts(getattr(args, "in"), args.out)
    if stage == "split":
        return cocite.split_groups(getattr(args, "in"), args.out, cfg.split)
    if stage == "examples":
        return cocite.build_examples(getattr(args, "in"), args.out, cfg.examples)
    if stage == "run-all":
        examples_dir = cocite.run_all(getattr(args, "in"), args.out, cfg, _held_out(getattr(args, "in"), cfg, records=True),
                                      _held_out_papers(cfg))
        return json.loads((examples_dir.parent / "pipeline_report.json").read_text(encoding="utf-8"))
    # argparse restricts the choices; kept so a new stage cannot fall through silently
    raise ValueError(f"unknown stage {stage!r}")


if __name__ == "__main__":
    raise SystemExit(main())
