"""Ensembles configured in YAML (issue 26, item 6): members run on a benchmark and fused per query."""

from __future__ import annotations

import json

import pytest
from test_benchmarks import make_reviewer_set, tiny_context2doc

from aspire.benchmarks.reviewers import load_reviewer_set, prediction_files, read_predictions
from aspire.cli.evaluate import main
from aspire.evaluate.ensemble import EnsembleConfig, EnsembleMember, fused_rows, load_ensemble


def _yaml(tmp_path, text: str):
    path = tmp_path / "ens.yaml"
    path.write_text(text)
    return path


def test_shipped_configs_load():
    for name in ("ensemble_minilm", "ensemble_rrf"):
        config = load_ensemble(f"configs/{name}.yaml")
        assert len(config.members) >= 2 and config.fusion in ("z", "rrf")


@pytest.mark.parametrize("text, message", [
    ("members: [{name: a, model: m, scorer: minl2}]", "at least two members"),
    ("fusion: sum\nmembers: [{name: a, model: m, scorer: minl2}, {name: b, model: bm25}]", "unknown fusion 'sum'"),
    ("members: [{name: a, model: m, scorer: minl2}, {name: a, model: bm25}]", "distinct name"),
    ("members: [{name: a, model: m}, {name: b, model: bm25}]", "a model needs a scorer"),
    ("members: [{name: a, model: m, scorer: minl2, weight: -1}, {name: b, model: bm25}]", "weight must be >= 0"),
    ("members: [{name: a, model: m, scorer: minl2, wieght: 1}, {name: b, model: bm25}]", "unknown config key"),
    # each once found only when that member ran, after the members before it had been encoded and scored
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: minl3}]", r"members\[1\] \(a\): unknown scorer"),
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: ot, encoding: contextul}]", "unknown encoding"),
    ("members: [{name: b, model: bm25}, {name: ../../x, model: m, scorer: ot}]", "it names a folder"),
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: ot, scorer_options: {tua: 1}}]",
     r"scorer_options \{'tua': 1\}: .*unexpected keyword argument 'tua'"),
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: ot, scorer_options: {tau: 0}}]", "tau must be > 0"),
    # encode options: once a TypeError (or a refusal) at that member's encoding, after the members before it had run
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: abstract, encode_options: {max_lenght: 256}}]",
     r"members\[1\] \(a\): unknown encode option 'max_lenght' for the abstract encoding"),
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: ot, encode_options: {normalize: true}}]",
     r"members\[1\] \(a\): the contextual encoding takes no encode options"),
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: ot, encoding: independent, "
     "encode_options: {joiner: ' '}}]", "unknown encode option 'joiner' for the independent encoding"),
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: abstract, encode_options: {max_length: '256'}}]",
     "max_length must be an integer"),
    ("members: [{name: b, model: bm25}, {name: a, model: m, scorer: ot, encoding: abstract}]",
     "encoding 'abstract' only goes with scorer 'abstract'"),
    ("members: [{name: b, model: bm25, encode_options: {normalize: true}}, {name: a, model: m, scorer: ot}]",
     r"members\[0\] \(b\): a bm25 member takes no encoding"),
])
def test_bad_ensembles_are_refused_naming_the_member(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_ensemble(_yaml(tmp_path, text))


def test_cli_refuses_model_options_beside_an_ensemble_and_reports_a_bad_file(tmp_path, capsys):
    path = _yaml(tmp_path, "members: [{name: a, model: m, scorer: minl2}]")
    with pytest.raises(SystemExit):
        main(["suite", "--ensemble", str(path), "--model", "minilm", "--out", str(tmp_path / "o")])
    assert "--ensemble takes each member's model" in capsys.readouterr().err
    assert main(["suite", "--ensemble", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "at least two members" in capsys.readouterr().err


def _members(model: str, w2: float) -> list[EnsembleMember]:
    return [EnsembleMember("minl2", model, "minl2", 1.0), EnsembleMember("abstract", model, "abstract", w2)]


def _rows(name: str, fusion: str, members, data, out, **common) -> list[dict]:
    """The rows of benchmark `name` fused by its runner's ensemble hook, as `aspire evaluate suite --ensemble`
    makes them."""
    rows, why = fused_rows(name, EnsembleConfig(fusion, members=members), data, out, {"aggregate": "max"}, **common)
    assert why is None
    return rows


def test_reviewer_ensemble_with_zero_weight_equals_its_first_member(tmp_path, tiny_model_dir):
    data = make_reviewer_set(tmp_path / "rm", draws=2)
    rset = load_reviewer_set(data)
    common = dict(cache_dir=None, batch_size=4, device=None)
    alone = _rows("reviewers", "z", _members(str(tiny_model_dir), 0.0), data, tmp_path / "a", **common)
    member = [read_predictions(p) for p in prediction_files(tmp_path / "a/members/minl2/reviewers/predictions", "minl2", rset)]
    fused = [read_predictions(p) for p in prediction_files(tmp_path / "a/reviewers/predictions", "ensemble", rset)]
    for m, f in zip(member, fused):  # weight 0 on the second member: the first member's order for every reviewer
        assert {r: sorted(s, key=s.get) for r, s in m.items()} == {r: sorted(s, key=s.get) for r, s in f.items()}
    results = json.loads((tmp_path / "a/members/minl2/reviewers/results.json").read_text())
    assert alone[0]["value"] == pytest.approx(results["loss"])
    both = _rows("reviewers", "rrf", _members(str(tiny_model_dir), 1.0), data, tmp_path / "b", **common)
    assert 0.0 <= both[0]["value"] <= 1.0 and "members minl2, abstract" in both[0]["note"]
    fused_results = json.loads((tmp_path / "b/reviewers/results.json").read_text())
    assert fused_results["experiment"] == "ensemble" and fused_results["command"]  # every results.json: its command


def test_context2doc_ensemble_fuses_bm25_and_a_model(tmp_path, tiny_model_dir, monkeypatch):
    import aspire.benchmarks.context2doc as c2d

    bench = tiny_context2doc(tmp_path)
    monkeypatch.setattr(c2d, "load_context2doc", lambda data, split: bench)  # the runner reads the test split
    data = tmp_path / "cc"
    members = [EnsembleMember("bm25", "bm25", None, 1.0), EnsembleMember("minl2", str(tiny_model_dir), "minl2", 0.0)]
    rows = _rows("context2doc", "minmax", members, data, tmp_path / "o", cache_dir=None, batch_size=4)
    assert [r["metric"] for r in rows] == ["MRR", "nDCG@10", "R@100", "MAP"]
    assert rows[0]["value"] == 1.0  # BM25 alone finds each query's paper first (test_benchmarks); weight 0 keeps it
    members[1].weight = 1.0
    mixed = _rows("context2doc", "z", members, data, tmp_path / "o2", cache_dir=None, batch_size=4)
    assert 0.0 < mixed[0]["value"] <= 1.0


@pytest.mark.slow
def test_csfcube_ensemble_with_zero_weight_scores_as_its_first_member(small_csfcube, tmp_path, tiny_model_dir):
    common = dict(cache_dir=tmp_path / "cache", batch_size=8, device=None)
    rows = _rows("csfcube", "z", _members(str(tiny_model_dir), 0.0), small_csfcube, tmp_path / "o", **common)
    first = json.loads((tmp_path / "o/members/minl2/csfcube/results.json").read_text())
    assert [r["metric"] for r in rows] == ["MAP", "NDCG%20"]
    assert rows[0]["value"] == pytest.approx(first["test"]["all"]["MAP"], abs=1e-6)


def test_an_ensemble_suite_runs_only_the_benchmarks_asked_for(tmp_path):
    """`--benchmarks csfcube` beside `--ensemble` once ran every benchmark (context2doc's BM25 members among them)."""
    from aspire.evaluate.ensemble import run_ensemble_suite

    path = _yaml(tmp_path, "members: [{name: a, model: bm25}, {name: b, model: m, scorer: minl2}]")
    suite = run_ensemble_suite(path, tmp_path / "out", tmp_path / "no-data", benchmarks=["csfcube"])
    assert suite["rows"] == [] and [line.split(":")[0] for line in suite["skipped"]] == ["csfcube"]
