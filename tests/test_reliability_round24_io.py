"""Round 24: a JSON file with a key twice in one object (`aspire.io.read_json`), an ACL record without a paper id
(`aspire.benchmarks.acl_formats.read_records`), an ensemble suite's --out (`aspire.cli.evaluate_out.check_out`) and
`aspire encode` (every record once, in order; `--long-report` naming the records that are no paper)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from aspire.benchmarks.acl_formats import read_records
from aspire.cli import evaluate_out
from aspire.cli import main as aspire_main
from aspire.io import read_json


# ---- read_json: a repeated key ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, key", [
    ('{"a": 1, "b": 2, "a": 3}', "a"),  # json.loads kept {"a": 3, "b": 2}: the first value dropped unseen
    ('{"splits": {"train": ["p1"], "dev": ["p2"], "train": ["p3"]}}', "train"),  # nested
    ('[{"x": 1}, {"y": 1, "y": 1}]', "y"),  # in a list, even with one value twice
])
def test_read_json_refuses_a_key_twice_in_one_object(tmp_path, text, key):
    path = tmp_path / "split.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        read_json(path, "SciRepEval-format split file")
    message = str(err.value)
    assert str(path) in message and repr(key) in message and "SciRepEval-format split file" in message
    assert "twice" in message


def test_read_json_keeps_one_key_in_several_objects_and_its_order(tmp_path):
    path = tmp_path / "ok.json"
    text = '{"b": {"k": 1}, "a": [{"k": 2}, {"k": 3}], "c": {}}'
    path.write_text(text, encoding="utf-8")
    got = read_json(path, "file", mapping=True)
    assert got == json.loads(text) and list(got) == ["b", "a", "c"]


# ---- read_records: a record without a paper id --------------------------------------------------------------------
def _acl_file(tmp_path, bad: dict):
    good = {"paper_id": "P19-1001", "title": "A", "abstract": "We study.", "year": "2019", "venues": ["acl"],
            "booktitle": "ACL", "authors": ["X"]}
    path = tmp_path / "papers.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (good, {"paper_id": "n", "title": "no abstract"}, bad)),
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("bad", [
    {"title": "B", "abstract": "We test."},  # missing: once kept as paper id None
    {"paper_id": None, "title": "B", "abstract": "We test."},
    {"paper_id": "", "title": "B", "abstract": "We test."},
    {"paper_id": 17, "title": "B", "abstract": "We test."},  # no split's id (strings) names it
])
def test_read_records_refuses_a_record_with_an_abstract_but_no_paper_id(tmp_path, bad):
    path = _acl_file(tmp_path, bad)
    with pytest.raises(ValueError, match=rf"{path}:3: a record with an abstract but no paper id"):
        read_records(path)


def test_read_records_still_skips_a_record_without_an_abstract_or_id(tmp_path):
    path = _acl_file(tmp_path, {"title": "neither"})
    assert [r["paper_id"] for r in read_records(path)] == ["P19-1001"]


# ---- evaluate suite --ensemble --out ------------------------------------------------------------------------------
def test_an_ensemble_suite_does_not_replace_another_runs_suite_folder(tmp_path):
    out = tmp_path / "suite-minilm"
    out.mkdir()
    (out / "suite.json").write_text(json.dumps({"model": "minilm", "scorer": "minl2", "rows": []}))
    args = argparse.Namespace(command="suite", ensemble="configs/ensemble_minilm.yaml", model=None, scorer=None,
                              out=str(out))
    with pytest.raises(FileExistsError, match="holds another run's results"):  # once accepted, and replaced
        evaluate_out.check_out(args)
    (out / "suite.json").write_text(json.dumps({"ensemble": {}, "ensemble_file": "configs/ensemble_rrf.yaml"}))
    with pytest.raises(FileExistsError, match="ensemble_file"):
        evaluate_out.check_out(args)
    (out / "suite.json").write_text(json.dumps({"ensemble": {}, "ensemble_file": "configs/ensemble_minilm.yaml"}))
    evaluate_out.check_out(args)  # its own folder: re-running replaces it


# ---- aspire encode --------------------------------------------------------------------------------------------------
def _corpus(tmp_path):
    """Nine good papers (1-3 sentences) with five bad records among them; (path, good ids in order)."""
    rng = np.random.default_rng(0)
    words = "the a of model method result paper data learning neural network text".split()
    lines, good = [], []
    for i in range(9):
        abstract = [" ".join(rng.choice(words, rng.integers(2, 20))) + "." for _ in range(rng.integers(1, 4))]
        lines.append(json.dumps({"paper_id": f"p{i}", "title": "the model", "abstract": abstract}))
        good.append(f"p{i}")
        bad = {1: "{not json", 3: json.dumps({"paper_id": "p0", "title": "x", "abstract": ["again."]}),
               4: json.dumps({"paper_id": "q", "title": "x"}), 6: json.dumps({"title": "x", "abstract": ["a."]}),
               7: json.dumps({"paper_id": "z", "title": "x", "abstract": ["\u200b"]})}.get(i)
        if bad:
            lines.append(bad)
    path = tmp_path / "papers.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, good


def test_encode_writes_every_good_record_once_in_order_and_rejects_the_others(tmp_path, tiny_model_dir, capsys):
    from aspire.data.papers import read_papers
    from aspire.encoders import load_encoder
    from aspire.index import EncodedCorpus

    corpus, good = _corpus(tmp_path)
    assert aspire_main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out",
                        str(tmp_path / "v"), "--batch-size", "2", "--device", "cpu", "-q"]) == 0
    saved, _ = EncodedCorpus.load_shard(tmp_path / "v")
    assert saved.paper_ids == good
    assert [r["line"] for r in saved.rejected] == [3, 6, 8, 11, 13]
    papers = {p.paper_id: p for p in read_papers(corpus, skip_bad=True).papers}
    encoder = load_encoder(tiny_model_dir, device="cpu")
    for p, pid in enumerate(saved.paper_ids):  # each paper's rows are its own, encoded alone
        alone = encoder.encode([papers[pid]], batch_size=1)
        rows = saved.vectors[saved.offsets[p]:saved.offsets[p + 1]]
        np.testing.assert_allclose(rows, alone.emb[0, :alone.lengths[0]].numpy(), atol=1e-5)


def test_long_report_names_the_records_that_are_no_paper(tmp_path, tiny_model_dir, capsys):
    corpus, good = _corpus(tmp_path)
    assert aspire_main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--long-report"]) == 0
    err = capsys.readouterr().err
    assert "5 record(s) of" in err and "no paper and were not checked" in err  # once said nowhere
    assert "line 3: invalid JSON" in err and "line 6 paper 'p0': duplicate paper_id" in err
