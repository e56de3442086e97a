"""Round 6 of the reliability sweep over DocBatch, control codes, the OT top-k, the index papers file, sharded
encoding and the notebooks' runner: bad input is one clear error naming the batch, paper, row or file, never
silently dropped or turned into NaN."""

from __future__ import annotations

import json

import pytest
import torch
from test_index_shards import write_corpus
from test_notebooks import NOTEBOOKS, _execute_module
from test_ot_topk import OT, problems
from test_scorers import random_batch

from aspire.batch import DocBatch
from aspire.encoders.codes import encoding_with_code, with_code
from aspire.encoders.inputs import EncoderInputs
from aspire.index import IndexBuildConfig, IndexFormatError
from aspire.index.shards import run_encode_shard
from aspire.index.texts import read_index_papers
from aspire.scoring.ot_topk import ot_top_k_dist


def with_whole(batch: DocBatch) -> DocBatch:
    return DocBatch(batch.emb, batch.mask, batch.paper_ids, batch.sentences, batch.emb.sum(1))


# ---- DocBatch -----------------------------------------------------------------------------------------
def test_concat_refuses_batches_of_which_only_some_hold_whole_vectors():
    a, b, c = with_whole(random_batch([2, 3])), random_batch([4], seed=1), with_whole(random_batch([1], seed=2))
    with pytest.raises(ValueError, match=r"batches \[1\] have no whole-abstract vectors \(`whole`\), batches \[0, 2\]"):
        DocBatch.concat([a, b, c])  # was: whole silently None, the hybrid scorer reporting it missing
    joined = DocBatch.concat([a, c])
    torch.testing.assert_close(joined.whole, torch.cat([a.whole, c.whole]))
    empty = random_batch([2], seed=3).index([])  # no papers: goes with either
    assert DocBatch.concat([a, empty, c]).whole.shape == (3, 6)


def test_concat_names_the_batches_of_another_width_dtype_or_device_or_without_ids():
    a = random_batch([2, 3])
    with pytest.raises(ValueError, match=r"batches \[1\] have vector width 4, batch 0 6"):
        DocBatch.concat([a, random_batch([2], dim=4)])  # was torch's "Sizes of tensors must match"
    with pytest.raises(ValueError, match=r"batches \[2\] have dtype torch.float32, batch 0 torch.float64"):
        DocBatch.concat([a, a, random_batch([2], dtype=torch.float32)])  # was: silently promoted
    meta = DocBatch(torch.empty(1, 2, 6, dtype=torch.float64, device="meta"),
                    torch.ones(1, 2, dtype=torch.bool, device="meta"), ["m"])
    with pytest.raises(ValueError, match=r"batches \[1\] have device meta, batch 0 cpu"):
        DocBatch.concat([a, meta])
    bare = DocBatch(a.emb, a.mask)
    with pytest.raises(ValueError, match=r"batches \[1\] have no paper ids, batches \[0\] have them"):
        DocBatch.concat([a, bare])  # was: "DocBatch.paper_ids has 2 entries for 4 papers"


def test_docbatch_refuses_a_mask_or_whole_on_another_device_than_its_vectors():
    emb = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="DocBatch.mask is on meta and emb on cpu"):
        DocBatch(emb, torch.ones(2, 3, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match="DocBatch.whole is on meta and emb on cpu"):
        DocBatch(emb, torch.ones(2, 3, dtype=torch.bool), whole=torch.zeros(2, 4, device="meta"))


def test_index_refuses_positions_out_of_range_naming_them():
    batch = random_batch([2, 3, 1])
    with pytest.raises(ValueError, match=r"positions \[3, -4\] out of range for 3 papers"):
        batch.index([0, 3, -4])  # was torch's IndexError (on a GPU: a device-side assert)
    assert batch.index([-1]).paper_ids == ["p2"]


def test_from_list_names_the_paper_whose_vectors_have_another_dtype_or_device():
    good = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"paper b has vectors of shape \(1, 4\), torch.float64 on cpu"):
        DocBatch.from_list([good, torch.zeros(1, 4, dtype=torch.float64)], ["a", "b"])  # was: silently promoted
    with pytest.raises(ValueError, match=r"paper b has vectors of shape \(1, 4\), torch.float32 on meta"):
        DocBatch.from_list([good, torch.zeros(1, 4, device="meta")], ["a", "b"])


# ---- control codes ------------------------------------------------------------------------------------
class CodeTokenizer:
    """What the control-code helpers read of a tokenizer: [CLS] = 1, codes [A] = 10, [B] = 11, [C] = 12."""

    cls_token_id, bos_token_id, unk_token_id, padding_side = 1, None, 0, "right"

    def convert_tokens_to_ids(self, token):
        return {"[A]": 10, "[B]": 11, "[C]": 12}.get(token, 0)


def test_per_paper_control_codes_must_be_one_a_paper():
    enc = {"input_ids": torch.tensor([[1, 5, 2], [1, 6, 2]]), "attention_mask": torch.ones(2, 3, dtype=torch.long)}
    with pytest.raises(ValueError, match=r"3 control codes for 2 papers"):
        encoding_with_code(enc, CodeTokenizer(), ["[A]", "[B]", "[C]"])  # was: the third silently dropped
    assert encoding_with_code(enc, CodeTokenizer(), ["[A]", "[B]"])["input_ids"][:, 1].tolist() == [10, 11]
    inputs = EncoderInputs(torch.tensor([[1, 5, 2], [1, 6, 2], [1, 7, 2]]), torch.ones(3, 3, dtype=torch.long),
                           torch.zeros(3, 3, dtype=torch.long), torch.tensor([0, 0, 1]), [1, 1], ["p", "q"],
                           [["x"], ["y"]])
    with pytest.raises(ValueError, match=r"3 control codes for 2 papers"):
        with_code(inputs, CodeTokenizer(), ["[A]", "[B]", "[C]"])  # was accepted: one code a window, not a paper
    assert with_code(inputs, CodeTokenizer(), ["[A]", "[B]"]).input_ids[:, 1].tolist() == [10, 10, 11]


# ---- OT top-k ------------------------------------------------------------------------------------------
def test_ot_top_k_refuses_rows_without_a_sentence_and_masks_of_other_shapes():
    cost, q_mask, c_mask = problems(n_cands=20)
    c_mask[3] = False
    with pytest.raises(ValueError, match=r"candidate rows \[3\] have no sentence selected"):
        ot_top_k_dist(cost, q_mask, c_mask, 2, **OT)  # was: a NaN distance among the others
    cost, q_mask, c_mask = problems(n_cands=20)
    with pytest.raises(ValueError, match=r"query rows \[0, 1, 2, 3, 4\] have no sentence selected"):
        ot_top_k_dist(cost, torch.zeros_like(q_mask), c_mask, 2, **OT)  # was: every distance NaN, nothing solved
    with pytest.raises(ValueError, match=r"got shapes \(20, 5, 12\), \(20, 3\) and \(20, 12\)"):
        ot_top_k_dist(cost, q_mask[:, :3], c_mask, 2, **OT)


# ---- index papers file, sharded encoding -------------------------------------------------------------
def test_index_papers_labels_must_be_one_a_sentence(tmp_path):
    path = tmp_path / "papers.jsonl"
    record = {"paper_id": "p1", "title": "T", "sentences": ["a.", "b.", "c."], "labels": ["method_label"] * 2}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(IndexFormatError, match=r"papers.jsonl:1: .*paper 'p1': 2 labels for 3 sentences"):
        read_index_papers(path)  # was read: a facet query then picked sentences by other sentences' labels


@pytest.mark.parametrize("num_shards", [0, -1, 2.0, True])
def test_run_encode_shard_refuses_a_shard_count_below_one(tmp_path, num_shards):
    corpus = write_corpus(tmp_path / "papers.jsonl", ["a", "bb"])
    with pytest.raises(ValueError, match=r"num_shards must be an integer >= 1"):  # 0 was the world size, -1 nothing
        run_encode_shard("no-model", corpus, tmp_path / "shards", IndexBuildConfig(), num_shards=num_shards)


# ---- notebooks/execute.py -----------------------------------------------------------------------------
def test_execute_names_a_missing_notebook_before_running_any(monkeypatch):
    execute = _execute_module()
    with pytest.raises(SystemExit, match=r"not a notebook: no_such\.ipynb \(the notebooks of .*alignment_visualisation"):
        execute.main(["no_such.ipynb"])  # was a FileNotFoundError traceback, after the notebooks before it ran
    monkeypatch.chdir(NOTEBOOKS.parent)  # a path from the repository root, as the shell completes it
    assert execute.notebook_paths(["notebooks/alignment_visualisation.ipynb"])[0].resolve() == (
        NOTEBOOKS / "alignment_visualisation.ipynb")
