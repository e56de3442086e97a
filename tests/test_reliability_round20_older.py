"""Round 20, items left by earlier sessions: `read_acl` names the same bad records whatever its sample, `blend`
refuses a float weight beside an integer buffer, and a served index deleted and built again at its path (its new
generation again named gen-000001) is picked up by the automatic check as well as by a reload."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from aspire.data.acl import HeldOut, read_acl
from aspire.train.interpolate import blend


# ---- read_acl: bad records are checked before the sample is drawn ---------------------------------------
def _acl_file(tmp_path):
    """Twelve records: ten valid papers (lines 1-5, 7-9, 11-12) and two bad ones (line 6: a title that is a
    number; line 10: an abstract of spaces, which splits into no sentence)."""
    lines = []
    for i in range(12):
        record = {"paper_id": f"P{i}", "title": f"Paper {i}", "abstract": f"We study thing {i}. It works well."}
        if i == 5:
            record["title"] = 5
        if i == 9:
            record["abstract"] = "   "
        lines.append(json.dumps(record))
    path = tmp_path / "acl.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_read_acl_names_the_same_bad_records_whatever_the_sample(tmp_path, monkeypatch):
    """Records were sampled before they were checked: with max_papers=3 the bad records outside the sample were
    never named, and a bad one inside it left fewer than max_papers papers. Every bad record is named for every
    max_papers, and the sample holds max_papers valid papers."""
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = _acl_file(tmp_path)
    bad = [f"{path}:6", f"{path}:10"]
    for max_papers in (0, 2, 3, 5, 10):
        read_acl.cache_clear()
        papers, stats = read_acl(path, HeldOut(), max_papers)
        assert list(stats["rejected"]) == bad, max_papers  # in file order
        assert "title must be a string" in stats["rejected"][f"{path}:6"]
        assert "'P9'" in stats["rejected"][f"{path}:10"] and "abstract is empty" in stats["rejected"][f"{path}:10"]
        assert stats["used"] == len(papers) == (max_papers or 10), max_papers
        assert len({p.paper_id for p in papers}) == len(papers)
        assert all(p.paper_id not in ("P5", "P9") and len(p.sentences) == 2 for p in papers)
    read_acl.cache_clear()


def test_read_acl_sample_of_a_file_without_bad_records_is_unchanged(tmp_path, monkeypatch):
    """The check before sampling leaves a clean file's seeded sample as it was: `random.Random(0).sample` of the
    records in file order."""
    import random

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acl.jsonl"
    path.write_text("".join(json.dumps({"paper_id": f"P{i}", "title": f"T{i}", "abstract": [f"Sentence {i}."]}) + "\n"
                            for i in range(20)), encoding="utf-8")
    read_acl.cache_clear()
    papers, stats = read_acl(path, HeldOut(), 7)
    expected = random.Random(0).sample([f"P{i}" for i in range(20)], 7)
    assert [p.paper_id for p in papers] == expected and stats["rejected"] == {}
    read_acl.cache_clear()


# ---- blend: an integer buffer is never interpolated with a float weight ---------------------------------
def test_blend_refuses_a_float_weight_beside_an_integer_buffer_naming_it():
    """An int64 position_ids in the base and a float one in the fine-tuned model were interpolated: ids 0, 1, 2, 3
    became 0.5, 1.5, 2.5, 3.5 at alpha 0.5 (cast back to 0, 1, 2, 3 or kept as floats, depending on the model)."""
    ids = torch.arange(4).reshape(1, 4)
    with pytest.raises(ValueError, match=r"'embeddings\.position_ids' is torch\.float32 in the fine-tuned model, "
                                         r"torch\.int64 in the base"):
        blend("embeddings.position_ids", ids, ids.float() + 1, 0.5)
    with pytest.raises(ValueError, match=r"'embeddings\.position_ids' is torch\.int64 in the fine-tuned model, "
                                         r"torch\.float32 in the base"):
        blend("embeddings.position_ids", ids.float(), ids, 0.5)


def test_blend_keeps_equal_integer_buffers_and_interpolates_float_weights():
    ids = torch.arange(4).reshape(1, 4)
    assert torch.equal(blend("embeddings.position_ids", ids.clone(), ids, 0.5), ids)
    with pytest.raises(ValueError, match="non-float buffers differ"):
        blend("embeddings.position_ids", ids, ids + 1, 0.5)
    base, tuned = torch.zeros(2, 3), torch.ones(2, 3)
    assert torch.allclose(blend("w", base, tuned, 0.25), torch.full((2, 3), 0.25))
    assert torch.allclose(blend("w", base.half(), tuned, 0.5), torch.full((2, 3), 0.5))  # float dtypes: tuned's


def test_soup_refuses_a_member_whose_buffer_is_float_where_the_first_holds_integers(tiny_model_dir, examples_dir,
                                                                                  tmp_path, monkeypatch):
    """A soup's running mean went through `blend` with the member as `tuned`: the first member's int64 ids and a
    later member's float ones were averaged silently. The member is named with both dtypes."""
    from test_interpolate import tuned_model

    import aspire.train.export as export
    from aspire.train.interpolate import soup

    first = tuned_model(tiny_model_dir, examples_dir, tmp_path / "a")
    second = tuned_model(tiny_model_dir, examples_dir, tmp_path / "b")
    real = export.plain_weights

    def with_ids(path):  # a checkpoint that kept position_ids, saved as int64 in one and float in the other
        encoder, weights = real(path)
        ids = torch.arange(8).reshape(1, 8)
        return encoder, {**weights, "embeddings.position_ids": ids if path == first else ids.float()}

    monkeypatch.setattr(export, "plain_weights", with_ids)
    with pytest.raises(ValueError, match=rf"{second}: weight 'embeddings\.position_ids' is torch\.float32, "
                                         rf"torch\.int64 in {first}"):
        soup([first, second], tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---- serve: a rebuilt index at the same path, found by the automatic check ------------------------------
def test_an_index_deleted_and_built_again_is_picked_up_by_the_automatic_check(tiny_model_dir, tmp_path):
    """Generation names start again at gen-000001 after the folder is deleted, and the filesystem reuses CURRENT's
    inode; the check (CURRENT's inode, mtime and size) still sees the new file, and the reload compares the
    manifest's digest, not the name: the new papers are served without a POST /api/reload."""
    from serve_support import PAPERS, build_index

    from aspire.encoders import load_encoder
    from aspire.serve import ServiceHolder

    encoder = load_encoder(tiny_model_dir)
    index = build_index(encoder, PAPERS[:3], tmp_path / "index", "tiny")
    holder = ServiceHolder(index, check_every=0.0)
    old = holder.get()
    assert (old.generation, old.info()["n_papers"]) == ("gen-000001", 3)
    shutil.rmtree(index)
    build_index(encoder, PAPERS, index, "tiny")
    holder.get()  # takes the load lock and starts the background reload, which lets it go when it is done
    assert holder._lock.acquire(timeout=60)
    holder._lock.release()
    assert holder.service is not old and holder.reload_error is None
    assert (holder.get().generation, holder.get().info()["n_papers"]) == ("gen-000001", len(PAPERS))
    assert holder.service.key != old.key
