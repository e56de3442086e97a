"""Round 44: co-cited sets, split and examples (aspire.data.cocite.sets), context tokens (text) and config."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import pytest

from aspire.config import ConfigError
from aspire.data.cocite import build_examples, group_contexts, load_cocite_config, run_all, split_groups
from aspire.data.cocite.config import ExamplesConfig, IngestConfig, SplitConfig
from aspire.data.cocite.text import get_tokenizer

RECORDS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cocite-acl" / "cocitations.jsonl"


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_held_out_generator_is_not_consumed_by_the_check():
    """A generator of held-out sentences (an Iterable, as the signature allows) came back as an empty set:
    the non-string check read it to its end first, so nothing was held out, silently."""
    cfg = IngestConfig(exclude_benchmark_papers=False)
    sentences = ["  A held-out sentence. ", "Another one."]
    held, _ = cfg.held_out_inputs((s for s in sentences), None, Path("records.jsonl"))
    assert held == {"A held-out sentence.", "Another one."}
    with pytest.raises(TypeError, match="int"):
        cfg.held_out_inputs((s for s in ["ok", 3]), None, Path("records.jsonl"))


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_hand_made_contexts_group_split_examples(tmp_path):
    cited = [["A", "B"], ["B", "A"], ["A", "B", "C"], ["C", "D"], ["E", "F"], ["F", "G"], ["H", "I"], ["I", "J"]]
    ctxs = [{"context_id": f"c{i}", "text": f"t{i}", "text_clean": f"k{i}", "cited_ids": sorted(ids)}
            for i, ids in enumerate(cited)]
    _write(tmp_path / "f" / "contexts.jsonl", ctxs)
    papers = sorted({p for ids in cited for p in ids} | {"X", "Y", "Z"})
    _write(tmp_path / "f" / "abstracts.jsonl", [{"paper_id": p, "title": p, "abstract": ["s"]} for p in papers])
    report = group_contexts(tmp_path / "f", tmp_path / "g")
    groups = _read(tmp_path / "g" / "groups.jsonl")
    brute = defaultdict(list)
    for c in ctxs:
        brute["|".join(sorted(c["cited_ids"]))].append(c["context_id"])
    assert {g["set_id"]: g["context_ids"] for g in groups} == dict(brute)
    assert [g["set_id"] for g in groups] == sorted(brute)
    assert report["sets"] == len(brute) and report["contexts"] == len(ctxs)
    split_groups(tmp_path / "g", tmp_path / "s", SplitConfig(dev_fraction=0.5, seed=3))
    tr, dv = (_read(tmp_path / "s" / f"groups.{s}.jsonl") for s in ("train", "dev"))
    assert len(dv) == round(0.5 * len(groups)) or len(dv) < round(0.5 * len(groups))
    pairs = [{p for g in gs for p in itertools.combinations(g["paper_ids"], 2)} for gs in (tr, dv)]
    assert not pairs[0] & pairs[1]
    assert sorted(g["set_id"] for g in tr + dv) == sorted(brute)
    # {A,B} and {A,B,C} share a pair: one side
    side = {g["set_id"]: ("train" if g in tr else "dev") for g in tr + dv}
    assert side["A|B"] == side["A|B|C"]
    again = tmp_path / "s2"
    split_groups(tmp_path / "g", again, SplitConfig(dev_fraction=0.5, seed=3))
    assert (again / "groups.dev.jsonl").read_text() == (tmp_path / "s" / "groups.dev.jsonl").read_text()
    build_examples(tmp_path / "s", tmp_path / "e", ExamplesConfig(num_negatives=1, negatives_from="all"))
    partners = defaultdict(set)
    for ids in cited:
        for p in ids:
            partners[p] |= set(ids)
    for split, gs in (("train", tr), ("dev", dv)):
        ctx_sets = {c: g["paper_ids"] for g in gs for c in g["context_ids"]}
        for ex in _read(tmp_path / "e" / f"examples.{split}.jsonl"):
            a, b = ex["query_id"], ex["positive_id"]
            assert a < b and b in partners[a]
            assert sorted(ex["context_ids"]) == sorted(c for c, ids in ctx_sets.items() if a in ids and b in ids)
            assert not set(ex["negative_ids"]) & (partners[a] | partners[b])


@pytest.mark.skipif(not RECORDS.exists(), reason="real co-citation records not present")
def test_real_records_sets_split_examples(tmp_path):
    cfg = load_cocite_config(None, ["ingest.exclude_benchmark_test=false", "ingest.exclude_benchmark_papers=false"])
    ex_dir = run_all(RECORDS, tmp_path / "run", cfg, held_out=())
    ctxs = _read(tmp_path / "run" / "2_filter" / "contexts.jsonl")
    brute = defaultdict(list)
    for c in ctxs:
        brute["|".join(sorted(c["cited_ids"]))].append(c["context_id"])
    groups = _read(tmp_path / "run" / "3_group" / "groups.jsonl")
    assert {g["set_id"]: g["context_ids"] for g in groups} == dict(brute)
    tr, dv = (_read(tmp_path / "run" / "4_split" / f"groups.{s}.jsonl") for s in ("train", "dev"))
    assert len(tr) + len(dv) == len(groups) and len(dv) <= round(0.1 * len(groups))
    pairs = [{p for g in gs for p in itertools.combinations(g["paper_ids"], 2)} for gs in (tr, dv)]
    assert not pairs[0] & pairs[1]
    stages = json.loads((tmp_path / "run" / "pipeline_report.json").read_text())["stages"]
    assert stages["group"]["contexts"] == len(ctxs)
    assert stages["split"]["train"]["contexts"] + stages["split"]["dev"]["contexts"] == len(ctxs)
    partners = defaultdict(set)
    for g in tr + dv:
        for p in g["paper_ids"]:
            partners[p] |= set(g["paper_ids"])
    for split, gs, split_pairs in (("train", tr, pairs[0]), ("dev", dv, pairs[1])):
        examples = _read(ex_dir / f"examples.{split}.jsonl")
        ctx_sets = {c: g["paper_ids"] for g in gs for c in g["context_ids"]}
        assert stages["examples"][split]["examples"] + stages["examples"][split].get("dropped_no_negative", 0) \
            == len(split_pairs)
        for ex in examples:
            a, b = ex["query_id"], ex["positive_id"]
            assert (a, b) in split_pairs
            assert sorted(ex["context_ids"]) == sorted(c for c, ids in ctx_sets.items() if a in ids and b in ids)
            assert not set(ex["negative_ids"]) & (partners[a] | partners[b])


def test_regex_tokens_match_docstring():
    tok = get_tokenizer("regex")
    assert tok("[CIT] don't state-of-the-art 2000 models") == ["[CIT]", "don't", "state-of-the-art", "2000", "models"]
    assert tok("95.2%") == ["95", ".", "2", "%"]
    with pytest.raises(ValueError, match="regex"):
        get_tokenizer("nope")


def test_config_unknown_and_out_of_range_keys():
    with pytest.raises(ConfigError, match="dev_fraction"):
        load_cocite_config(None, ["split.dev_fraction=1.0"])
    with pytest.raises(ConfigError, match="max_cited"):
        load_cocite_config(None, ["filter.max_cited=-1"])
    with pytest.raises(ConfigError, match="dev_fractoin"):
        load_cocite_config(None, ["split.dev_fractoin=0.2"])
