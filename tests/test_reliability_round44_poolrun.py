"""Round 44: `aspire.evaluate.pool_run.run_pools` (group means and undefined counts against the per-query rows),
`aspire.evaluate.encode.encode_papers` (each mode equal to the encoder's own output, cache hits exact) and
`aspire.train.state` (schedule, metrics trim, resume check)."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from aspire.config import to_dict
from aspire.data.papers import Paper
from aspire.evaluate.encode import encode_papers
from aspire.evaluate.pool_run import run_pools
from aspire.train.config import Config
from aspire.train.state import check_resume_config, linear_schedule, trim_metrics
from tests.test_evaluate_pools import POOLS, write_toy

RANKED = {"p1": [["p4", 0.9], ["p2", 0.8], ["p3", 0.7], ["p5", 0.1]],
          "p6": [["p2", -1.0], ["p7", -2.0], ["p3", -3.0], ["p8", -4.0]]}

PAPERS = [
    Paper("a", "Graph parsing", ["We parse graphs.", "A new parser is fast.", "It wins on three sets."]),
    Paper("b", "Neural translation", ["Translation is hard.", "We add attention."]),
    Paper("c", "Word vectors", ["Vectors of words.", "They help tagging.", "Results improve a lot.", "Code is out."]),
]


@pytest.fixture()
def toy(tmp_path):
    root = write_toy(tmp_path / "toy")
    (root / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(RANKED))
    return root


def test_summary_means_are_the_per_query_rows_averaged(toy, tmp_path):
    res = run_pools(toy, "toy", tmp_path / "o", metrics=("MAP", "P@5", "MRR"), ranked_dir=toy, exp="manual")
    with open(tmp_path / "o" / "perq.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["query"] for r in rows) == sorted(RANKED)
    allg = res["summary"]["all"]
    assert allg["n_queries"] == len(rows)
    for m in ("MAP", "P@5", "MRR"):
        vals = [float(r[m]) for r in rows if r[m] != ""]
        assert allg[m] == pytest.approx(sum(vals) / len(vals), abs=1e-3)
    assert "n_undefined" not in allg


@pytest.mark.parametrize("ranked, needle", [
    ({"p1": RANKED["p1"]}, "p6"),
    ({"p1": RANKED["p1"][:-1], "p6": RANKED["p6"]}, "p5"),
])
def test_ranked_file_missing_a_query_or_candidate_is_refused_naming_it(toy, tmp_path, ranked, needle):
    (toy / "test-pid2pool-toy-manual-ranked.json").write_text(json.dumps(ranked))
    with pytest.raises(ValueError, match=needle):
        run_pools(toy, "toy", tmp_path / "o", metrics=("MAP",), ranked_dir=toy, exp="manual")


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    from aspire.encoders.contextual import ContextualSentenceEncoder

    torch.manual_seed(0)
    return ContextualSentenceEncoder.from_pretrained(tiny_model_dir)


def test_each_mode_is_the_encoders_own_output_and_cache_hits_are_exact(encoder, tmp_path):
    direct = {"contextual": encoder.encode(PAPERS), "independent": encoder.encode_independent(PAPERS),
              "abstract": encoder.encode_abstract(PAPERS)}
    for mode in ("contextual", "pass", "independent", "abstract"):
        record: list[dict] = []
        first, hit = encode_papers(encoder, PAPERS, mode, tmp_path, record=record)
        again, hit2 = encode_papers(encoder, PAPERS, mode, tmp_path, record=record)
        assert hit2 and record[1]["from_cache"] and record[1]["cache_entry"] == record[0]["cache_entry"]
        assert torch.equal(first.emb, again.emb) and torch.equal(first.mask, again.mask)
        assert first.paper_ids == again.paper_ids == ["a", "b", "c"]
        if mode == "contextual":
            torch.testing.assert_close(first.emb, direct["contextual"].emb)
        elif mode == "pass":
            torch.testing.assert_close(first.emb[:, 0], direct["contextual"].whole)
        elif mode == "independent":
            torch.testing.assert_close(first.emb, direct["independent"].emb)
        else:
            torch.testing.assert_close(first.emb[:, 0], direct["abstract"])
    # another paper set is another entry, never the first one's vectors
    other, hit = encode_papers(encoder, PAPERS[:2], "abstract", tmp_path)
    assert not hit and other.paper_ids == ["a", "b"]
    with pytest.raises(ValueError, match="valid"):
        encode_papers(encoder, PAPERS, "nope")


def test_linear_schedule_by_hand_and_through_lambdalr():
    f = linear_schedule(3, 10)
    assert [f(s) for s in range(11)] == pytest.approx([1 / 4, 2 / 4, 3 / 4, 1, 6 / 7, 5 / 7, 4 / 7, 3 / 7, 2 / 7,
                                                       1 / 7, 0])
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=2.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, f)
    seen = []
    for _ in range(10):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([2.0 * f(s) for s in range(10)])


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


def test_trim_metrics_keeps_exactly_the_lines_up_to_the_step(tmp_path):
    lines = [json.dumps({"step": s, "loss": 1.0}) for s in (0, 10, 20, 30)] + [json.dumps({"event": "end", "step": 20})]
    _write(tmp_path / "metrics.jsonl", lines + ['{"step": 4'])
    trim_metrics(tmp_path, 20)
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == lines[:3]


def test_trim_metrics_refuses_a_record_without_a_step(tmp_path):
    """The docstring: a line that is not a JSON record with an integer step is refused (a step-less record was kept
    as if logged at step 0)."""
    _write(tmp_path / "metrics.jsonl", [json.dumps({"step": 0}), json.dumps({"loss": 1.0}), json.dumps({"step": 5})])
    with pytest.raises(ValueError, match="line 2"):
        trim_metrics(tmp_path, 5)


@pytest.mark.parametrize("key, value", [("train.seed", 7), ("train.batch_size", 4), ("train.grad_accum", 2),
                                        ("train.max_steps", 99), ("train.epochs", 3), ("train.warmup_steps", 5),
                                        ("train.lr", 1e-3), ("train.weight_decay", 0.5)])
def test_check_resume_config_names_each_changed_setting(key, value):
    saved = to_dict(Config())
    now = Config()
    section, name = key.split(".")
    setattr(getattr(now, section), name, value)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        check_resume_config(saved, now)


def test_check_resume_config_allows_the_others():
    saved = to_dict(Config())
    now = Config()
    now.train.log_every, now.train.save_every, now.train.out_dir = 3, 7, "elsewhere"
    check_resume_config(saved, now)


def test_an_undefined_metric_is_left_out_of_the_mean_and_counted(toy, tmp_path):
    pools = json.loads(json.dumps(POOLS))
    pools["p6"]["relevance_adju"] = [1, 1, 2, 1]  # every candidate relevant: bpref undefined for p6
    (toy / "test-pid2anns-toy.json").write_text(json.dumps(pools))
    res = run_pools(toy, "toy", tmp_path / "o", metrics=("MAP", "bpref"), ranked_dir=toy, exp="manual")
    with open(tmp_path / "o" / "perq.csv") as fh:
        rows = {r["query"]: r for r in csv.DictReader(fh)}
    assert rows["p6"]["bpref"] == "" and rows["p1"]["bpref"] != ""
    allg = res["summary"]["all"]
    assert allg["n_queries"] == 2 and allg["n_undefined"] == {"bpref": 1}
    assert allg["bpref"] == pytest.approx(float(rows["p1"]["bpref"]), abs=1e-3)
    assert allg["MAP"] == pytest.approx((float(rows["p1"]["MAP"]) + float(rows["p6"]["MAP"])) / 2, abs=1e-3)
    assert res["undefined_metrics"]["bpref"]["queries"] == ["p6"]


def test_options_key_the_cache_and_no_cache_records_no_entry(encoder, tmp_path):
    plain, _ = encode_papers(encoder, PAPERS, "independent", tmp_path)
    record: list[dict] = []
    normed, hit = encode_papers(encoder, PAPERS, "independent", tmp_path, encode_options={"normalize": True},
                                record=record)
    assert not hit  # not the option-less entry
    torch.testing.assert_close(normed.emb, encoder.encode_independent(PAPERS, normalize=True).emb)
    assert not torch.allclose(normed.emb[normed.mask], plain.emb[plain.mask])
    with pytest.raises(ValueError, match="takes no options"):
        encode_papers(encoder, PAPERS, "pass", tmp_path, encode_options={"normalize": True})
    encode_papers(encoder, PAPERS, "abstract", None, record=record)
    assert record[-1]["cache_entry"] is None and record[-1]["from_cache"] is False
    assert record[-1]["fingerprint"] == encoder.fingerprint()


def test_another_fingerprint_never_reads_the_first_ones_entry(encoder, tiny_model_dir, tmp_path):
    from aspire.encoders.contextual import ContextualSentenceEncoder

    first, _ = encode_papers(encoder, PAPERS, "contextual", tmp_path)
    other = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        next(other.model.parameters()).add_(0.5)
    assert other.fingerprint() != encoder.fingerprint()
    second, hit = encode_papers(other, PAPERS, "contextual", tmp_path)
    assert not hit
    torch.testing.assert_close(second.emb, other.encode(PAPERS).emb)
    assert not torch.allclose(second.emb, first.emb)
