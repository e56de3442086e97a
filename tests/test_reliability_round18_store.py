"""Round 18, the on-disk index store and the streamed merge: a NaN met in an IVF training sample named by its place in
the sample, the whole-abstract vectors' refusal worded once (build, add, merge) with the advice that helps, and an
index whose files disagree with each other or with the manifest, past the size check, refused by name at load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.checksum import file_sha256
from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, IndexFormatError, SentenceIndex
from aspire.index.ann import train_rows
from aspire.index.stream import merge_streaming


def corpus(n: int, start: int = 0, dim: int = 16, seed: int = 0, whole: bool = True) -> EncodedCorpus:
    """`n` papers `p{start}`.. of 1-5 random sentence vectors each (with whole-abstract vectors when `whole`)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 6, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = [f"p{start + i}" for i in range(n)]
    return EncodedCorpus(rng.standard_normal((int(offsets[-1]), dim)).astype(np.float32), offsets, ids,
                         [f"title of {pid}" for pid in ids],
                         [[f"{pid} sentence {j}" for j in range(k)] for pid, k in zip(ids, lengths.tolist())],
                         whole=rng.standard_normal((n, dim)).astype(np.float32) if whole else None)


def cfg(**index) -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(**{"kind": "flat", **index}))


def saved(tmp_path: Path, **index) -> tuple[SentenceIndex, Path, Path]:
    """A 12-paper index saved under tmp_path/idx: (the index, its root, its live generation)."""
    built = SentenceIndex.build(corpus(12), cfg(**index), "fp", "m")
    root = tmp_path / "idx"
    return built, root, built.save(root)


def resum(gen: Path, name: str) -> None:
    """Record file `name`'s present size and SHA-256 in the generation's manifest, as a hand edit might."""
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["files"][name], manifest["sha256"][name] = (gen / name).stat().st_size, file_sha256(gen / name)
    (gen / "manifest.json").write_text(json.dumps(manifest))


# ---- a NaN in the IVF training sample, named by corpus row and paper ------------------------------------------------
def test_build_names_the_row_and_paper_of_a_nan_met_in_the_ivf_training_sample():
    """`build_faiss` trains on a random sample; its check numbered the rows of the sample ("rows [10]"), where the
    corpus's row 10 was fine: the build now names the corpus's row and its paper, as `add` and the merge name papers."""
    c = corpus(100)
    config = cfg(kind="ivf", ivf_nlist=4, ivf_train_size=50, seed=0)
    row = int(train_rows(len(c.vectors), config.index)[10])  # the sample's 11th vector
    assert row != 10
    c.vectors[row, 2] = np.nan
    paper = c.paper_ids[int(np.searchsorted(c.offsets, row, side="right")) - 1]
    with pytest.raises(ValueError, match=rf"1 sentence vector\(s\) of the corpus hold NaN or infinite values \(rows "
                                         rf"\[{row}\]\) of 1 paper\(s\) \['{paper}'\]"):
        SentenceIndex.build(c, config, "fp")


# ---- the whole-abstract vectors' refusal: one wording, the advice that helps ---------------------------------------
NAN = r"the whole-abstract vectors of 1 paper\(s\) \(\['p4'\]\) hold NaN or infinite values: re-encode those papers"
BIG = (r"the whole-abstract vectors of 1 paper\(s\) \(\['p4'\]\) hold values past float16's range \(65504\): set "
       r"index.vector_dtype=float32")


@pytest.mark.parametrize("case", ["nan", "big"])
def test_the_whole_vector_refusal_is_one_wording_with_advice_that_helps(tmp_path, case):
    """A NaN whole vector stored in float16 was told to "set index.vector_dtype=float32" (it stays NaN), and a finite
    one past float16's range to "re-encode them" (it comes back the same); the streamed merge worded both its own way.
    What is refused is unchanged: every whole vector that is not finite as stored."""
    bad = corpus(6, seed=1)
    bad.whole[4, 3] = np.nan if case == "nan" else 1e5
    expected, wrong = (NAN, "vector_dtype=float32") if case == "nan" else (BIG, "re-encode")
    f16 = cfg(vector_dtype="float16")
    errors = []
    with pytest.raises(ValueError, match=rf"^the corpus: {expected}$") as built:
        SentenceIndex.build(bad, f16, "fp")
    errors.append(str(built.value))
    index = SentenceIndex.build(bad.subset([0, 1]), f16, "fp")
    with pytest.raises(ValueError, match=rf"^the new papers: {expected}$") as added:
        index.add(bad.subset([2, 3, 4, 5]), "fp")
    errors.append(str(added.value))
    assert index.n_papers == 2 and index.faiss_index.ntotal == index.n_sentences  # refused before any change
    bad.save_shard(tmp_path / "shards" / "shard-00000-of-00001", {"model_name": "m", "model_fingerprint": "fp"})
    with pytest.raises(ValueError, match=rf"^shard \S+shard-00000-of-00001: {expected}$") as merged:
        merge_streaming(tmp_path / "shards", tmp_path / "idx", f16)
    errors.append(str(merged.value))
    assert not any(wrong in e for e in errors)
    if case == "big":  # stored in float32 the same vector is kept, by every path
        assert np.isfinite(SentenceIndex.build(bad, cfg(), "fp").whole).all()


def test_a_nan_and_a_too_large_whole_vector_are_each_named_with_their_advice():
    bad = corpus(6, seed=1)
    bad.whole[1, 0], bad.whole[4, 3] = np.inf, 7e4
    with pytest.raises(ValueError) as err:
        SentenceIndex.build(bad, cfg(vector_dtype="float16"), "fp")
    assert str(err.value) == ("the corpus: the whole-abstract vectors of 1 paper(s) (['p1']) hold NaN or infinite values: "
                              "re-encode those papers; the whole-abstract vectors of 1 paper(s) (['p4']) hold values "
                              "past float16's range (65504): set index.vector_dtype=float32")


# ---- files that disagree, past the size check: refused at load, by name --------------------------------------------
@pytest.mark.parametrize("key, value", [("n_papers", 3), ("n_sentences", 999), ("dim", 7), ("n_rejected", 4),
                                        ("vector_dtype", "float16")])
def test_a_manifest_whose_counts_disagree_with_its_files_is_refused(tmp_path, key, value):
    """The manifest is not checksummed: a count edited in it loaded unsaid, and `index info` and the commands'
    summaries printed it."""
    built, root, gen = saved(tmp_path)
    manifest = json.loads((gen / "manifest.json").read_text())
    held = manifest[key]
    manifest[key] = value
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match=rf"manifest.json does not describe the files beside it: it records "
                                               rf"{key} {value!r} \(the files hold {held!r}\)$"):
        SentenceIndex.load(root)


@pytest.mark.parametrize("key", ["kind", "model_name", "model_fingerprint"])
def test_a_manifest_without_its_model_or_kind_is_refused_naming_the_key(tmp_path, key):
    """A KeyError ('kind'), or an AttributeError ('NoneType' object has no attribute 'partition') for a null
    fingerprint checked against the model, said nothing of the index."""
    built, root, gen = saved(tmp_path)
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest[key] = None
    (gen / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match=rf"manifest.json is damaged: it records no {key} \(each a string\)"):
        SentenceIndex.load(root, model_fingerprint="fp")


def _offsets(gen: Path, edit) -> None:
    offsets = np.load(gen / "offsets.npy")
    np.save(gen / "offsets.npy", edit(offsets.copy()))
    resum(gen, "offsets.npy")


def _swap(offsets: np.ndarray) -> np.ndarray:
    offsets[3], offsets[4] = offsets[4], offsets[3]  # paper 3 ends before it starts; the end stays
    return offsets


def _shift(offsets: np.ndarray) -> np.ndarray:
    offsets[0] = 1  # paper 0 loses its first row
    return offsets


@pytest.mark.parametrize("edit, match", [
    (_swap, r"offsets.npy does not start at row 0 and rise by at least one sentence a paper"),
    (_shift, r"offsets.npy does not start at row 0 and rise"),
    (lambda o: o.astype(np.float64) + 0.5, r"offsets.npy holds float64 of shape \(13,\), not \(P \+ 1,\) integers"),
])
def test_offsets_that_do_not_describe_the_rows_are_refused(tmp_path, edit, match):
    """Loaded unsaid before: sentence rows credited to the paper beside theirs (a float file cast down silently)."""
    built, root, gen = saved(tmp_path)
    _offsets(gen, edit)
    with pytest.raises(IndexFormatError, match=match):
        SentenceIndex.load(root)


def test_sentence_texts_that_disagree_with_the_offsets_are_refused(tmp_path):
    built, root, gen = saved(tmp_path)
    lines = (gen / "papers.jsonl").read_text().splitlines()
    record = json.loads(lines[5])
    record["sentences"].append("one more")  # papers.jsonl: paper p5 one text longer than its rows
    lines[5] = json.dumps(record)
    (gen / "papers.jsonl").write_text("\n".join(lines) + "\n")
    resum(gen, "papers.jsonl")
    n = len(record["sentences"])
    with pytest.raises(IndexFormatError, match=rf"1 paper\(s\) have another number of sentence texts in papers.jsonl "
                                               rf"than of rows in offsets.npy \(e.g. 'p5': {n} texts, {n - 1} rows\)"):
        SentenceIndex.load(root, texts="memory")
    assert SentenceIndex.load(root, texts="disk").n_papers == 12  # texts on disk are read when asked for, not here


def test_arrays_of_another_shape_past_the_size_check_are_refused(tmp_path, monkeypatch):
    """Files over 64 MiB have only their size checked at load: a vectors.npy or whole.npy of the same byte size and
    another shape (float16 of twice the dimension) loaded, with a dimension the faiss index does not have."""
    monkeypatch.setattr("aspire.index.disk.FAST_VERIFY_BYTES", 0)  # every file as a large one
    built, root, gen = saved(tmp_path)
    n, d = built.vectors.shape
    np.save(gen / "vectors.npy", np.zeros((n, 2 * d), np.float16))
    with pytest.raises(IndexFormatError, match=rf"vectors.npy holds float16 of shape \({n}, {2 * d}\), not \(N, D\) "
                                               rf"floats of the faiss index's dimension {d}"):
        SentenceIndex.load(root)
    built, root, gen = saved(tmp_path / "b")
    np.save(gen / "whole.npy", np.zeros((12, 2 * d), np.float16))
    with pytest.raises(IndexFormatError, match=rf"whole.npy holds float16 of shape \(12, {2 * d}\), not one vector "
                                               rf"of dimension {d} for each of 12 papers"):
        SentenceIndex.load(root)


def test_a_whole_file_of_another_dimension_is_refused(tmp_path):
    built, root, gen = saved(tmp_path)
    np.save(gen / "whole.npy", np.zeros((12, 8), np.float32))
    resum(gen, "whole.npy")
    with pytest.raises(IndexFormatError, match=r"whole.npy holds float32 of shape \(12, 8\), not one vector of "
                                               r"dimension 16 for each of 12 papers"):
        SentenceIndex.load(root)


def test_an_array_file_cut_short_past_the_size_check_is_named(tmp_path):
    """numpy's "mmap length is greater than file size" named no file."""
    built, root, gen = saved(tmp_path)
    data = (gen / "vectors.npy").read_bytes()
    (gen / "vectors.npy").write_bytes(data[:-64])
    with pytest.raises(IndexFormatError, match=r"vectors.npy is missing or does not have the size"):
        SentenceIndex.load(root)
    resum(gen, "vectors.npy")
    with pytest.raises(IndexFormatError, match=r"gen-000001/vectors.npy does not read as an array \("):
        SentenceIndex.load(root)


# ---- what held: round trips, repeated and empty adds, faiss against an exhaustive search ---------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_round_trip_add_and_search_against_an_exhaustive_one(tmp_path, dtype):
    c = corpus(20)
    built = SentenceIndex.build(c, cfg(vector_dtype=dtype), "fp", "m")
    built.save(tmp_path / "idx")
    index = SentenceIndex.load(tmp_path / "idx")
    assert index.vectors.dtype == index.whole.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(index.vectors), c.vectors.astype(dtype))
    np.testing.assert_array_equal(np.asarray(index.whole), c.whole.astype(dtype))
    more = corpus(5, start=18, seed=3)  # p18, p19 indexed already
    index.add(more, "fp")
    index.add(EncodedCorpus.empty(0, [{"paper_id": "x", "reason": "unreadable"}]), "fp")  # nothing to add
    assert index.paper_ids == [f"p{i}" for i in range(23)]
    assert [r["paper_id"] for r in index.rejected] == ["p18", "p19", "x"]
    index.save(tmp_path / "idx")
    again = SentenceIndex.load(tmp_path / "idx", mmap=False)
    assert again.n_papers == 23 and again.vectors.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(again.vectors[c.offsets[-1]:], more.subset([2, 3, 4]).vectors.astype(dtype))
    np.testing.assert_array_equal(again.whole[20:], more.whole[2:].astype(dtype))
    queries = np.random.default_rng(7).standard_normal((4, 16)).astype(np.float32)
    dist, rows = again.search_sentences(queries, 5)
    faiss_rows = np.concatenate([c.vectors, more.subset([2, 3, 4]).vectors])  # faiss holds the float32 vectors
    exact = torch.cdist(torch.from_numpy(queries).double(), torch.from_numpy(faiss_rows).double()).topk(5, largest=False)
    np.testing.assert_array_equal(rows, exact.indices.numpy())
    np.testing.assert_allclose(dist, exact.values.numpy(), rtol=1e-5, atol=1e-5)


def test_the_free_space_estimate_counts_the_whole_abstract_vectors(tmp_path):
    """`saved_bytes` (the free-space check before a save) left whole.npy out: (P, D) more vectors, about an eighth of
    the sentence vectors at 8 sentences a paper."""
    c = corpus(30)
    for dtype in ("float32", "float16"):
        with_whole = SentenceIndex.build(c, cfg(vector_dtype=dtype), "fp")
        without = SentenceIndex.build(EncodedCorpus(c.vectors, c.offsets, c.paper_ids, c.titles, c.sentences),
                                      cfg(vector_dtype=dtype), "fp")
        assert with_whole.saved_bytes() - without.saved_bytes() == c.whole.astype(dtype).nbytes
        gen = with_whole.save(tmp_path / dtype)
        arrays = sum((gen / name).stat().st_size for name in ("vectors.npy", "whole.npy", "offsets.npy"))
        assert with_whole.saved_bytes() >= arrays - 3 * 128  # at least the arrays, less their .npy headers
