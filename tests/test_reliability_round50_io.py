"""Round 50: aspire.io readers / atomic writes and aspire.batch.DocBatch checked against hand-built references."""

import json

import numpy as np
import pytest
import torch

from aspire import io
from aspire.batch import DocBatch


def test_index_refuses_a_bool_among_integer_positions():
    b = DocBatch.from_list([torch.randn(2, 3), torch.randn(4, 3)], ["a", "b"])
    with pytest.raises(ValueError, match="boolean"):
        b.index([1, True])  # as_tensor read True as position 1: ['b', 'b']
    with pytest.raises(ValueError, match="boolean"):
        b.index([0, np.bool_(True)])
    assert b.index([1, 0]).paper_ids == ["b", "a"]


def test_from_list_equals_hand_padding_and_index_equals_hand_indexing():
    torch.manual_seed(0)
    vecs = [torch.randn(n, 5) for n in (3, 1, 4)]
    ids, sents = ["p0", "p1", "p2"], [[f"s{i}{j}" for j in range(len(v))] for i, v in enumerate(vecs)]
    whole = torch.randn(3, 5)
    b = DocBatch.from_list(vecs, ids, sents, whole)
    emb = torch.zeros(3, 4, 5)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    for i, v in enumerate(vecs):
        emb[i, : len(v)] = v
        mask[i, : len(v)] = True
    assert torch.equal(b.emb, emb) and torch.equal(b.mask, mask)
    assert b.paper_ids == ids and b.sentences == sents and torch.equal(b.whole, whole)
    assert b.lengths.tolist() == [3, 1, 4]
    sub = b.index([2, -3])
    assert torch.equal(sub.emb, emb[[2, 0]]) and torch.equal(sub.mask, mask[[2, 0]])
    assert sub.paper_ids == ["p2", "p0"] and sub.sentences == [sents[2], sents[0]]
    assert torch.equal(sub.whole, whole[[2, 0]])
    sel = b.select_sentences([[0, 2], [0], [3]])
    hand = torch.zeros_like(mask)
    hand[0, [0, 2]] = True
    hand[1, 0] = True
    hand[2, 3] = True
    assert torch.equal(sel.mask, hand) and torch.equal(sel.emb, b.emb)
    with pytest.raises(ValueError, match="p1"):
        b.select_sentences([[0], [1], [0]])  # p1 has one sentence
    with pytest.raises(ValueError, match="p0"):
        sel.select_sentences([[1], [0], [3]])  # position 1 of p0 no longer selected


def test_from_list_refuses_bad_inputs_naming_them():
    with pytest.raises(ValueError, match="paper q"):
        DocBatch.from_list([torch.randn(2, 3), torch.randn(2, 4)], ["p", "q"])
    with pytest.raises(ValueError, match="paper p"):
        DocBatch.from_list([torch.randn(2, 3)], ["p"], [["only one"]])
    with pytest.raises(ValueError, match="paper_ids has 1 entries for 2 papers"):
        DocBatch.from_list([torch.randn(2, 3), torch.randn(1, 3)], ["p"])
    with pytest.raises(ValueError, match="mask shape"):
        DocBatch(torch.randn(2, 3, 4), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="whole"):
        DocBatch.from_list([torch.randn(2, 3)], whole=torch.randn(1, 4))


def test_readers_name_file_and_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n{"a": 1, "a": 2}\n{"b": "\xff"}\n[1]\n')
    bad = []
    assert list(io.iter_jsonl(p, "skip", bad)) == [(1, {"a": 1})]
    assert bad[0].startswith(f"{p}:3:") and "'a' twice" in bad[0]
    assert bad[1].startswith(f"{p}:4: not UTF-8")
    assert bad[2].startswith(f"{p}:5: expected a JSON object")
    with pytest.raises(io.DataError, match=f"{p}:3:"):
        list(io.iter_jsonl(p))
    j = tmp_path / "c.json"
    j.write_text('{"k": {"z": 1, "z": 1}}')
    with pytest.raises(ValueError, match="'z' twice"):
        io.read_json(j, "config")
    j.write_bytes(b'{"k": "\xff"}')
    with pytest.raises(ValueError, match="config cannot be read"):
        io.read_json(j, "config")
    j.write_text('[1]')
    with pytest.raises(ValueError, match="not an object"):
        io.read_json(j, "config", mapping=True)


def test_atomic_writes_leave_the_old_file_whole_on_failure(tmp_path):
    p = tmp_path / "out.jsonl"
    io.write_jsonl(p, [{"a": 1}])
    old = p.read_bytes()

    def records():
        yield {"a": 2}
        raise RuntimeError("midway")

    with pytest.raises(RuntimeError):
        io.write_jsonl(p, records())
    assert p.read_bytes() == old and [f.name for f in tmp_path.iterdir()] == ["out.jsonl"]
    with pytest.raises(TypeError):
        io.write_json(p, {"x": object()})
    assert p.read_bytes() == old and [f.name for f in tmp_path.iterdir()] == ["out.jsonl"]
    io.write_json(p, {"s": "\ud800", "x": float("nan")})
    assert json.loads(p.read_text()) == {"s": "\ud800", "x": None, "non_finite": {"x": "nan"}}
