"""Round 50: the co-citation package's run_all and the hard-negatives stage's config."""

import json

import pytest

from aspire.data.cocite import (
    PIPELINE,
    STAGE_DIRS,
    build_examples,
    filter_contexts,
    group_contexts,
    ingest_records,
    load_cocite_config,
    run_all,
    split_groups,
)
from aspire.data.negatives import (
    HardNegativesConfig,
    check_config,
    cocitation_partners,
    mine_hard_negatives,
    read_groups,
)
from aspire.train.data import _read_hard_negatives
from tests.conftest import SHARED_DATA

REC = SHARED_DATA / "cocite-acl" / "cocitations.jsonl"


@pytest.mark.parametrize("method", ["nearest", "svd"])
def test_bad_margin_reference_refused_before_encoding(method):
    # before: accepted by check_config; `nearest` encoded every paper before rank's ValueError
    with pytest.raises(ValueError, match="margin_reference"):
        check_config(HardNegativesConfig(method=method, margin_reference="mean"))


@pytest.mark.parametrize("name", ["k", "skip", "seed"])
def test_non_number_count_names_the_key(name):
    # before: TypeError "'<' not supported between instances of 'NoneType' and 'int'"
    kw = {name: None, "method": "random"}
    with pytest.raises(ValueError, match=name):
        check_config(HardNegativesConfig(**kw))


@pytest.mark.skipif(not REC.is_file(), reason="no shared co-citation data")
def test_run_all_equals_stages_by_hand_and_negatives_readable(tmp_path):
    cfg = load_cocite_config(overrides=["ingest.exclude_benchmark_test=false", "ingest.exclude_benchmark_papers=false"])
    ex = run_all(REC, tmp_path / "a", cfg, held_out=())
    b = tmp_path / "b"
    reps = {
        "ingest": ingest_records(REC, b / STAGE_DIRS[0], cfg.ingest, (), None),
        "filter": filter_contexts(b / STAGE_DIRS[0], b / STAGE_DIRS[1], cfg.filter),
        "group": group_contexts(b / STAGE_DIRS[1], b / STAGE_DIRS[2]),
        "split": split_groups(b / STAGE_DIRS[2], b / STAGE_DIRS[3], cfg.split),
        "examples": build_examples(b / STAGE_DIRS[3], b / STAGE_DIRS[4], cfg.examples),
    }
    report = json.loads((tmp_path / "a" / "pipeline_report.json").read_text())

    def counts(r):
        return {k: v for k, v in json.loads(json.dumps(r)).items() if k not in ("input", "output")}

    for stage, name in zip(PIPELINE, STAGE_DIRS):
        assert counts(report["stages"][stage]) == counts(reps[stage]), stage
        for f in (tmp_path / "a" / name).iterdir():
            if f.name != "report.json":
                assert f.read_bytes() == (b / name / f.name).read_bytes(), (name, f.name)
    # a run stopped after stage 3 (later folders and the pipeline report gone) reruns into the same folder
    for name in STAGE_DIRS[3:]:
        for f in (tmp_path / "a" / name).iterdir():
            f.unlink()
        (tmp_path / "a" / name).rmdir()
    (tmp_path / "a" / "pipeline_report.json").unlink()
    assert run_all(REC, tmp_path / "a", cfg, held_out=()) == ex
    assert (tmp_path / "a" / "5_examples" / "examples.train.jsonl").read_bytes() == \
        (b / "5_examples" / "examples.train.jsonl").read_bytes()
    partners = cocitation_partners(read_groups(ex))
    mine_hard_negatives(ex, tmp_path / "neg", HardNegativesConfig(method="citation", k=5))
    neg = _read_hard_negatives(tmp_path / "neg" / "hard_negatives.jsonl")
    assert neg and any(neg.values())
    assert not [(p, n) for p, ns in neg.items() for n in ns if n == p or n in partners.get(p, ())]
