"""Round 13 correctness sweep of the index's storage internals (`aspire.index.ann`, `.disk`, `.texts`) and the
service's reload (`aspire.serve.reload`), each against an independent reference: faiss's exact search and a
float64 brute force for the coarse quantizer, the docstrings' rules for generations, and a second reading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest
from serve_support import raw_request, running

from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex, disk
from aspire.index.ann import add_vectors, assign_nearest
from aspire.index.disk import IndexFormatError, clear_leftovers, live_generation
from aspire.serve import ServiceHolder


def ivf_lists_of(index) -> np.ndarray:
    """(ntotal,) the inverted list each row of an IVF index was added to."""
    ivf = faiss.extract_index_ivf(index)
    out = np.full(ivf.ntotal, -1, dtype=np.int64)
    for lst in range(ivf.nlist):
        size = ivf.invlists.list_size(lst)
        if size:
            out[faiss.rev_swig_ptr(ivf.invlists.get_ids(lst), size).copy()] = lst
    return out


def near_ties(d: int = 384, k: int = 50, n: int = 1500, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Centroids (k, d), with centroid 7 a copy of centroid 3, and rows (n, d) each within 1e-6 of the midpoint of two
    centroids: rows whose nearest centroid a float32 GEMM's last bits decide."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((k, d)).astype(np.float32)
    c[7] = c[3]
    a = rng.integers(0, k, n)
    b = (a + 1 + rng.integers(0, k - 1, n)) % k
    x = (c[a] + c[b]) / 2 + rng.standard_normal((n, d)).astype(np.float32) * 1e-6
    return c, x.astype(np.float32)


def test_ivf_lists_do_not_depend_on_the_batches_vectors_are_added_in():
    """A row's IVF list was the argmin of a float32 GEMM whose last bits depend on the rows batched with it: the same
    vectors added at once or in batches of 1, 7, 97 or 613 rows (a merge adds them shard by shard) went to different lists (333
    to 1283 of 3000 near-tied rows in 32 to 768 dimensions), so a streamed merge and an in-RAM build made different indexes."""
    c, x = near_ties()
    c64, x64 = c.astype(np.float64), x.astype(np.float64)
    exact = np.array([np.argmin(((row - c64) ** 2).sum(1)) for row in x64])  # float64 brute force; lowest on a tie
    assert (assign_nearest(c, x) == exact).all()
    assert (np.concatenate([assign_nearest(c, x[i : i + 1]) for i in range(len(x))]) == exact).all()
    assert 7 not in exact and (exact == 3).any()  # an exact tie (a duplicated centroid) goes to the lower position
    lists = []
    for batch in (len(x), 97, 613):
        index = faiss.IndexIVFFlat(faiss.IndexFlatL2(c.shape[1]), c.shape[1], len(c))
        index.quantizer.add(c)
        index.train(c)  # the quantizer is full: faiss keeps its centroids
        add_vectors(index, x, batch=batch)
        lists.append(ivf_lists_of(index))
    assert (lists[0] == exact).all() and (lists[1] == exact).all() and (lists[2] == exact).all()


# ---- disk: generation names, checksums -----------------------------------------------------------------
def small_corpus(n: int, start: int = 0, dim: int = 8, seed: int = 0) -> EncodedCorpus:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 4, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = [f"p{start + i}" for i in range(n)]
    return EncodedCorpus(rng.standard_normal((int(offsets[-1]), dim)).astype(np.float32), offsets, ids,
                         [f"title of {pid}" for pid in ids],
                         [[f"{pid} sentence {j}" for j in range(k)] for pid, k in zip(ids, lengths.tolist())])


def save_index(root: Path, n: int = 5, seed: int = 0) -> Path:
    config = IndexBuildConfig(index=IndexConfig(kind="flat", store_bm25=False))
    return SentenceIndex.build(small_corpus(n, seed=seed), config, "fp", "tiny").save(root)


@pytest.mark.parametrize("name", ["gen-\u0661\u0662\u0663\u0664\u0665\u0666", "gen-000009\n"])
def test_a_folder_named_almost_like_a_generation_is_foreign_not_removed(tmp_path, name):
    """`\\d` took any Unicode digit and `$` a trailing newline: a user's folder named `gen-١٢٣٤٥٦` (Arabic-Indic
    digits) or "gen-000009\\n" in an index folder counted as a generation, and the next save removed it with its
    files. It is an entry an index never writes: the write is refused and the folder stays."""
    root = tmp_path / "idx"
    save_index(root)
    (root / name).mkdir()
    (root / name / "notes.txt").write_text("mine")
    with pytest.raises(IndexFormatError, match="entries an index never writes"):
        clear_leftovers(root, keep=live_generation(root))
    with pytest.raises(IndexFormatError, match="entries an index never writes"):
        save_index(root, seed=1)
    assert (root / name / "notes.txt").read_text() == "mine"
    if name.isprintable():
        (root / "CURRENT").write_text(name + "\n")
        with pytest.raises(IndexFormatError, match="not a generation of this index"):
            live_generation(root)


def test_leftovers_of_a_crash_at_each_step_are_removed_by_the_next_save(tmp_path):
    """The rules of `aspire.index.disk`: a half-written generation, a renamed but unpublished one and a half-written
    pointer leave the live index loadable and are removed by the next save (the lock files stay)."""
    root = tmp_path / "idx"
    first = save_index(root)
    (root / ".tmp-gen-000002-0badc0de").mkdir()
    (root / ".tmp-gen-000002-0badc0de" / "vectors.npy").write_bytes(b"half")
    shutil.copytree(first, root / "gen-000003")  # renamed into place, CURRENT not yet replaced
    (root / ".CURRENT.0123456789ab.tmp").write_text("gen-000003\n")
    assert live_generation(root) == first.name and SentenceIndex.load(root, verify=True).n_papers == 5
    gen = save_index(root, n=6, seed=1)
    assert gen.name == "gen-000004" and sorted(p.name for p in root.iterdir()) == [".lock", "CURRENT", gen.name]
    assert SentenceIndex.load(root, verify=True).n_papers == 6


def flip_a_sentence_byte(path: Path) -> None:
    """Turn the first sentence's "sentence 0" into "sentence 1" and back: same size, still valid JSON."""
    data = bytearray(path.read_bytes())
    data[data.index(b'"p0 sentence ') + len('"p0 sentence ')] ^= 1
    path.write_bytes(bytes(data))


def test_a_manifest_missing_a_checksum_is_damaged_and_verify_never_passes_unchecked(tmp_path):
    """A manifest without the SHA-256 of one file skipped that file's check, even with verify=True: `index info
    --verify` printed "verified: every file's size and SHA-256 match" over a changed papers.jsonl. Every writer
    records them all; one recording none (an index saved before checksums) loads, and verify refuses it."""
    root = tmp_path / "idx"
    gen = save_index(root)
    flip_a_sentence_byte(gen / "papers.jsonl")
    with pytest.raises(IndexFormatError, match="papers.jsonl is corrupted"):
        SentenceIndex.read_manifest(root)
    manifest_path = gen / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    sums = dict(manifest["sha256"])
    del manifest["sha256"]["papers.jsonl"]
    manifest_path.write_text(json.dumps(manifest))
    for verify in (False, True):
        with pytest.raises(IndexFormatError, match=r"records no SHA-256 for \['papers.jsonl'\]; it is damaged"):
            SentenceIndex.read_manifest(root, verify=verify)
    flip_a_sentence_byte(gen / "papers.jsonl")  # back as it was
    manifest["sha256"] = {}  # an index saved before checksums
    manifest_path.write_text(json.dumps(manifest))
    assert SentenceIndex.load(root).n_papers == 5
    with pytest.raises(IndexFormatError, match="an index saved before checksums.*cannot be verified"):
        SentenceIndex.read_manifest(root, verify=True)
    manifest["sha256"] = sums
    manifest_path.write_text(json.dumps(manifest))
    assert SentenceIndex.load(root, verify=True).n_papers == 5


def test_checksums_are_computed_from_the_bytes_on_the_fast_path_and_with_verify(tmp_path, monkeypatch):
    """A changed byte (same size) is found by loading for a small file, and for a file over FAST_VERIFY_BYTES only
    with verify=True."""
    root = tmp_path / "idx"
    gen = save_index(root)
    flip_a_sentence_byte(gen / "papers.jsonl")
    with pytest.raises(IndexFormatError, match="papers.jsonl is corrupted"):
        SentenceIndex.load(root)
    monkeypatch.setattr(disk, "FAST_VERIFY_BYTES", 16)
    assert SentenceIndex.load(root).n_papers == 5  # no file is small enough to be checked on the fast path
    with pytest.raises(IndexFormatError, match="papers.jsonl is corrupted"):
        SentenceIndex.load(root, verify=True)


# ---- serve: reload and protocol --------------------------------------------------------------------------
def test_a_generation_replaced_while_its_manifest_is_checked_is_read_again(tmp_path, monkeypatch):
    """A build that published a new generation (removing the one being opened) while the server hashed the old
    one's files made the check fail with IndexFormatError ("... is missing"), which was not read again: the server
    did not start (or a reload said the live index could not be opened) though CURRENT named a sound one."""
    root = tmp_path / "idx"
    save_index(root, n=5)
    real = disk.file_sha256
    published: list[Path] = []

    def hash_then_publish(path):  # a build finishing between two files of the check
        digest = real(path)
        if not published:
            published.append(save_index(root, n=7, seed=1))
        return digest

    monkeypatch.setattr(disk, "file_sha256", hash_then_publish)
    holder = ServiceHolder(root, check_every=None)
    assert [p.name for p in published] == ["gen-000002"]
    assert holder.service.generation == "gen-000002" and holder.service.searcher.index.n_papers == 7
    published.clear()
    result = holder.reload()  # the same race during an explicit reload
    assert result["error"] is None and result["reloaded"] and holder.service.generation == "gen-000003"
    assert holder.service.searcher.index.n_papers == 7 and holder.reload_error is None


def test_a_generation_that_stays_broken_is_not_read_again_and_the_old_one_is_served(tmp_path):
    root = tmp_path / "idx"
    save_index(root, n=5)
    holder = ServiceHolder(root, check_every=None)
    gen = save_index(root, n=6, seed=1)
    flip_a_sentence_byte(gen / "papers.jsonl")
    result = holder.reload()
    assert result["reloaded"] is False and result["generation"] == "gen-000001"
    assert "papers.jsonl is corrupted" in result["error"] and holder.service.searcher.index.n_papers == 5
    flip_a_sentence_byte(gen / "papers.jsonl")
    assert holder.reload()["generation"] == "gen-000002" and holder.reload_error is None


def test_a_transfer_coding_h11_does_not_implement_is_answered_501_in_json(tmp_path):
    """h11 suggests 501 (Not Implemented, RFC 9112 6.1) for a Transfer-Encoding other than chunked; the protocol
    documented "the status h11 suggests" and answered 400."""
    root = tmp_path / "idx"
    save_index(root)
    with running(ServiceHolder(root, check_every=None)) as srv:
        status, body = raw_request(srv, b"POST /api/search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n")
        assert status == 501 and json.loads(body)["error"].startswith("bad request: ")
        status, body = raw_request(srv, b"\x00\x01garbage\r\n\r\n")
        assert status == 400 and json.loads(body)["error"].startswith("bad request: illegal request line")
