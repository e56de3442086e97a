"""Round 42, the lead's mends: what the round's helpers found outside their files."""

import pytest

from aspire.data.cocite.stages import check_stage_input, nothing_left, stage_of


def test_a_report_that_is_a_folder_is_no_hand_built_folder(tmp_path):
    (tmp_path / "report.json").mkdir()  # not a stage's report: it must not read as "no report" (built by hand)
    assert stage_of(tmp_path) == ""
    with pytest.raises(ValueError, match="names no data stage; filter reads the output of stage 'ingest'"):
        check_stage_input(tmp_path, "filter")
    (tmp_path / "report.json").rmdir()
    (tmp_path / "report.json").symlink_to(tmp_path / "gone.json")  # a broken link is a report that cannot be read
    assert stage_of(tmp_path) == ""
    (tmp_path / "report.json").unlink()
    assert stage_of(tmp_path) is None  # no report at all: built by hand, read as it is
    check_stage_input(tmp_path, "filter")


def test_an_empty_ingest_says_why_without_claiming_a_reason_it_did_not_see():
    report = {"stage": "ingest", "counts": {"contexts": 0, "dropped_benchmark_test": 2}, "bad_lines": 0}
    said = nothing_left(report)
    assert said == "no context citing two or more papers is left (dropped_benchmark_test 2)"


def test_add_vectors_refuses_an_untrained_index_clearly():
    import faiss
    import numpy as np

    from aspire.index.ann import add_vectors

    index = faiss.IndexIVFFlat(faiss.IndexFlatL2(4), 4, 2)  # never trained: faiss failed in reconstruct_n
    with pytest.raises(ValueError, match="the ivf index is not trained; train it first"):
        add_vectors(index, np.zeros((3, 4), np.float32))
    assert index.ntotal == 0


def test_ranking_checks_name_ids_of_mixed_types():
    from aspire.benchmarks.metrics import check_rankings

    qrels = {1: {"a": 1}, "1": {"a": 1}}
    with pytest.raises(ValueError, match=r"2 judged queries have no ranking: \[(1, '1'|'1', 1)\]"):
        check_rankings(qrels, {})  # sorting 1 and '1' raised TypeError instead (equal as text: either order)
    with pytest.raises(ValueError, match=r"ranking repeats candidates \[(2, '2'|'2', 2)\]"):
        check_rankings({"q": {2: 1, "2": 0}}, {"q": [2, "2", 2, "2"]})


@pytest.mark.parametrize("name", ["minl2_match", "ot_match", "attention_match", "pairwise_minl2_match",
                                  "pairwise_ot_match", "pairwise_attention_match"])
def test_scorers_refuse_a_mask_that_is_not_bool_naming_the_side(name):
    import torch

    from aspire.scoring import scorers

    q, c = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    q_mask, c_mask = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 4, dtype=torch.long)  # a 0/1 mask
    with pytest.raises(ValueError, match=r"candidate mask must be bool \(True: a sentence\), got torch.int64"):
        getattr(scorers, name)(q, q_mask, c, c_mask)
