"""Round 44: `aspire data STAGE` user errors before any model loads, overrides no stage reads, and the SciRepEval
formats' split file, label files and paired bootstrap against brute-force loops."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aspire.benchmarks import acl_formats as af
from aspire.cli import data as data_cli
from tests.test_data_stages import NO_HELD_OUT, _records


class Loaded(Exception):
    """Raised by a stand-in loader: a model would have loaded."""


@pytest.fixture()
def no_models(monkeypatch):
    def loaded(*args, **kwargs):
        raise Loaded("a model loaded")

    monkeypatch.setattr("aspire.encoders.cosentbert.load_sentence_model", loaded)
    monkeypatch.setattr("aspire.encoders.load_encoder", loaded)


@pytest.fixture(scope="module")
def run_all(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cc")
    records = _records(tmp / "r.jsonl")
    assert data_cli.main(["run-all", "--in", str(records), "--out", str(tmp / "cc"), NO_HELD_OUT, "-q"]) == 0
    return tmp


def _status(argv, capsys):
    try:
        status = data_cli.main([*argv, "-q"])
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().err


def test_stage_user_errors_exit_2_naming_the_option_before_a_model(run_all, tmp_path, capsys, no_models,
                                                                    tiny_model_dir):
    cc, records = run_all / "cc", run_all / "r.jsonl"
    cases = [
        (["filter", "--in", str(tmp_path / "nope"), "--out", str(tmp_path / "f")], "(--in)"),
        (["run-all", "--in", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "r")], "(--in)"),
        (["cocite-from-s2orc", "--fulltext", str(records), "--abstracts", str(tmp_path / "x"), "--out",
          str(tmp_path / "i")], "(--abstracts)"),
        (["align", "--examples", str(cc / "5_examples"), "--teacher", str(tmp_path / "t"), "--out",
          str(tmp_path / "a")], "(--teacher)"),
        (["align", "--examples", str(cc / "5_examples"), "--teacher", str(tmp_path), "--out", str(tmp_path / "a")],
         f"--teacher {tmp_path} holds no modules.json"),
        (["align", "--examples", str(cc / "5_examples"), "--teacher", str(tiny_model_dir), "--out",
          str(tmp_path / "a"), "bogus=1"], "unknown config key(s) ['bogus']"),
        (["hard-negatives", "--examples", str(cc / "5_examples"), "--out", str(tmp_path / "h"), "method=nearest",
          "model=no-such-model"], "unknown model 'no-such-model'"),
        (["hard-negatives", "--examples", str(cc / "5_examples"), "--out", str(tmp_path / "h"), "method=nearest",
          "seed=1", f"model={tiny_model_dir}"], "['seed']"),
        (["filter", "--in", str(cc / "1_ingest"), "--out", str(tmp_path / "f"), "filter.bogus=1"],
         "['filter.bogus']"),
    ]
    for argv, says in cases:
        status, err = _status(argv, capsys)
        assert status == 2 and says in err and err.count("\n") == 1, (argv, err)
    # an --out holding another stage's output: refused naming that folder, for every stage command
    for argv in (["filter", "--in", str(cc / "1_ingest")], ["cocite-from-records", "--in", str(records)],
                 ["align", "--examples", str(cc / "5_examples"), "--teacher", str(tiny_model_dir)],
                 ["hard-negatives", "--examples", str(cc / "5_examples")], ["run-all", "--in", str(records)]):
        status, err = _status([*argv, "--out", str(cc / "3_group")], capsys)
        assert status == 2 and f"{cc / '3_group'}" in err and "choose a new or empty folder" in err, (argv, err)
    assert not (tmp_path / "f").exists() and not (tmp_path / "a").exists() and not (tmp_path / "h").exists()


@pytest.mark.parametrize("stage, override, unread", [
    ("filter", "split.seed=1", "split"), ("group", "filter.max_cited=3", "filter"),
    ("split", "examples.seed=2", "examples"), ("examples", "filter.max_cited=3", "filter"),
    ("cocite-from-records", "ingest.splitter=regex", "ingest.splitter"),
    ("cocite-from-records", "ingest={splitter: regex}", "ingest.splitter"),
    ("run-all", "ingest.splitter=regex", "ingest.splitter"),
])
def test_overrides_no_stage_reads_are_refused_naming_them(stage, override, unread):
    with pytest.raises(ValueError, match=f"the {stage} stage does not read {unread} "):
        data_cli.check_overrides_read(stage, [override])
    data_cli.check_overrides_read(stage, [])  # nothing given: nothing refused


def test_every_section_is_read_by_some_stage_and_run_all_reads_them_all():
    import dataclasses

    from aspire.data.cocite import CociteConfig

    sections = {f.name for f in dataclasses.fields(CociteConfig)}
    assert set(data_cli.STAGE_READS["run-all"]) == sections
    assert set(data_cli.STAGE_READS) == set(data_cli.INPUT_OPTION) - {"align", "hard-negatives"} | set(
        data_cli.FILE_OPTIONS)


def test_held_out_papers_without_benchmark_folder_names_the_switch(tmp_path):
    from aspire.data.cocite import load_cocite_config

    cfg = load_cocite_config(None, ["ingest.exclude_benchmark_papers=true"])
    with pytest.raises(ValueError, match="ingest.exclude_benchmark_papers"):
        data_cli._held_out_papers(cfg, tmp_path)
    assert data_cli._held_out_papers(load_cocite_config(None, ["ingest.exclude_benchmark_papers=false"]),
                                     tmp_path) is None


# ---- the split file ----------------------------------------------------------------------------------------------

def _split_file(tmp_path, splits, checksum=None):
    path = tmp_path / "split.json"
    path.write_text(json.dumps({"splits": splits, "checksum": checksum or af.checksum(splits)}), encoding="utf-8")
    return path


def test_load_split_refuses_a_checksum_that_does_not_match_naming_the_file(tmp_path):
    splits = {"venue_year": {"train": ["a", "b"], "dev": ["c"], "test": ["d"]}}
    good = _split_file(tmp_path, splits)
    assert af.load_split(good)["splits"] == splits
    edited = json.loads(good.read_text())
    edited["splits"]["venue_year"]["test"] = ["e"]
    good.write_text(json.dumps(edited), encoding="utf-8")
    with pytest.raises(ValueError, match=f"{good}: checksum mismatch"):
        af.load_split(good)


def test_splits_overlapping_anywhere_are_refused_as_check_disjoint_documents(tmp_path):
    for splits, pid in [({"venue_year": {"train": ["a", "b"], "dev": ["b"], "test": ["d"]}}, "b"),
                        ({"venue_year": {"train": ["a"], "dev": ["c"], "test": ["d", "d"]}}, "d"),
                        ({"venue_year": {"train": ["a"], "dev": ["c"], "test": ["d"]},
                          "same_author": {"dev": ["x"], "test": ["c"]}}, "c")]:
        with pytest.raises(ValueError, match=f"paper {pid} is in two splits"):
            af.load_split(_split_file(tmp_path, splits))


def test_committed_split_is_disjoint_by_brute_force():
    sets = af.split_sets(af.load_split()["splits"])
    ids = [pid for part in sets.values() for pid in part]
    assert len(ids) == len(set(ids))
    assert af.heldout_ids() == {pid for where, part in sets.items() if not where.endswith("/train") for pid in part}


@pytest.mark.parametrize("line, says", [
    (b'{"label": "A"}', "no 'paper_id'"), (b'{"paper_id": "p", "label": null}', "(paper p): missing label"),
    (b'{"paper_id": "p", "label": "  "}', "(paper p): empty class"),
    (b'{"paper_id": "p", "label": 3}', "(paper p): class 3 is not a string"),
    (b'{"paper_id": "q", "label": "A"}', "paper q is in no split"), (b"{nope", "not JSON"),
    (b'{"paper_id": "a", "label": "B"}', "paper a is labelled twice"),
])
def test_label_files_with_bad_lines_are_refused_naming_line_and_key(tmp_path, line, says):
    path = tmp_path / "labels.jsonl"
    path.write_bytes(b'{"paper_id": "a", "label": "A"}\n\n' + line + b"\n")
    with pytest.raises(ValueError) as err:
        af.read_label_file(path, "class", ["a", "p"])
    assert f"{path}:3" in str(err.value) and says in str(err.value)


@pytest.mark.parametrize("label", ["NaN", "Infinity", "true", '"3"', "1e400"])
def test_number_labels_not_finite_numbers_are_refused(tmp_path, label):
    path = tmp_path / "labels.jsonl"
    path.write_text(f'{{"paper_id": "p", "label": {label}}}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}:1 \\(paper p\\): label .* is not a finite number"):
        af.read_label_file(path, "number")


# ---- bootstrap and paired test against numpy loops -----------------------------------------------------------------

def _mae(y, pred):
    return float(np.mean(np.abs(np.asarray(y, float) - np.asarray(pred, float))))


def test_bootstrap_and_paired_test_match_a_brute_force_loop():
    gen = np.random.default_rng(5)
    y, a, b = gen.normal(size=17), gen.normal(size=17), gen.normal(size=17)
    lo, hi = af.bootstrap_papers(_mae, y, a, n_boot=300, seed=3, level=0.9)
    rng = np.random.default_rng(3)
    stats = []
    for _ in range(300):
        idx = rng.integers(0, 17, 17)
        stats.append(np.mean(np.abs(y[idx] - a[idx])))
    assert (lo, hi) == pytest.approx((np.quantile(stats, 0.05), np.quantile(stats, 0.95)))

    out = af.paired_papers_test(_mae, list(y), list(a), list(b), n_perm=200, n_boot=150, seed=7, level=0.8)
    rng = np.random.default_rng(7)
    observed = np.mean(np.abs(y - a)) - np.mean(np.abs(y - b))
    hits = 1
    for _ in range(200):
        swap = rng.random(17) < 0.5
        pa, pb = np.where(swap, b, a), np.where(swap, a, b)
        hits += abs(np.mean(np.abs(y - pa)) - np.mean(np.abs(y - pb))) >= abs(observed) - 1e-12
    deltas, boot = [], np.random.default_rng(7)  # the bootstrap draws from the seed anew, whatever n_perm
    for _ in range(150):
        idx = boot.integers(0, 17, 17)
        deltas.append(np.mean(np.abs(y[idx] - a[idx])) - np.mean(np.abs(y[idx] - b[idx])))
    assert out["delta"] == pytest.approx(observed) and out["n_units"] == 17
    assert out["p_value"] == pytest.approx(hits / 201)
    assert out["ci95"] == pytest.approx([np.quantile(deltas, 0.1), np.quantile(deltas, 0.9)])


def test_bootstrap_and_paired_test_refuse_bad_input():
    for call in (lambda: af.bootstrap_papers(_mae, [1, 2], [1]), lambda: af.bootstrap_papers(_mae, [], []),
                 lambda: af.bootstrap_papers(_mae, [1], [1], n_boot=0),
                 lambda: af.paired_papers_test(_mae, [1, 2], [1, 2], [1]),
                 lambda: af.paired_papers_test(_mae, [1], [1], [1], n_perm=0)):
        with pytest.raises(ValueError):
            call()
