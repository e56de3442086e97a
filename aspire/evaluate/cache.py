"""On-disk cache of encoded papers, so re-scoring with another scorer does not re-encode.

An entry is keyed by the encoder's fingerprint, the encoding mode (with its options) and a hash of
the papers' ids and texts. It is written to a temporary file and renamed into place, so a partial
file is never read back, and its size and SHA-256 are recorded beside it (`FILE.sha256`,
`aspire.storage.write_record`). A cache is never trusted: a file that differs from its record (or has
none), does not load, or holds other papers than requested is reported in one warning, encoded again
and rewritten. A disk too full to write a cache file is a warning too: the run goes on uncached, as it
does when another run, reading the entry before its record was written (so finding none), removed it first, when
the cache folder itself was removed while the entry was written, or when the folder cannot be written (another user's,
a read-only home: the run once ended there, after encoding every paper, its results lost).
Sentences are stored packed (N_sentences, D) rather than padded (B, S, D).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from aspire.data.papers import Paper
from aspire.io import atomic_write
from aspire.paths import cache_root
from aspire.storage import DiskFullError, check_record, on_disk_full, remove_cache_file, write_record

if TYPE_CHECKING:  # torch is imported where vectors are read or written: `aspire evaluate --help` loads none
    from aspire.batch import DocBatch

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """`$ASPIRE_CACHE/vectors`, else `~/.cache/aspire/vectors` (`aspire.paths.cache_root`)."""
    return cache_root() / "vectors"


def papers_digest(papers: Sequence[Paper]) -> str:
    """A hash of the papers' ids, titles and sentences, in order."""
    digest = hashlib.sha256()
    for p in papers:
        digest.update(json.dumps([p.paper_id, p.title, p.sentences], ensure_ascii=False).encode())
    return digest.hexdigest()[:16]


def cache_path(cache_dir: Path, fingerprint: str, mode: str, options: dict, papers: Sequence[Paper]) -> Path:
    opts = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]
    return Path(cache_dir) / f"{fingerprint}-{mode}-{opts}-{papers_digest(papers)}.pt"


def _save(path: Path, batch: DocBatch) -> None:
    import torch

    lengths = torch.tensor([len(s) for s in batch.sentences], dtype=torch.long)
    S = batch.emb.shape[1]
    keep = torch.arange(S)[None, :] < lengths[:, None]  # (B, S) real sentence slots
    payload = {
        "emb": batch.emb[keep].cpu(),  # (N, D)
        "mask": batch.mask[keep].cpu(),  # (N,)
        "lengths": lengths,
        "paper_ids": list(batch.paper_ids),
        "sentences": [list(s) for s in batch.sentences],
        **({} if batch.whole is None else {"whole": batch.whole.cpu()}),  # (B, D) from the same pass
    }
    with atomic_write(path, "wb") as handle:
        torch.save(payload, handle)
    write_record(path)  # its size and SHA-256, checked before it is read back


def _load(path: Path, papers: Sequence[Paper]) -> DocBatch:
    import torch

    from aspire.batch import DocBatch

    payload = torch.load(path, map_location="cpu", weights_only=True)
    ids = [p.paper_id for p in papers]
    if payload["paper_ids"] != ids:
        raise ValueError(f"cache file {path} holds other papers than requested; delete it")
    lengths = payload["lengths"].tolist()
    parts = torch.split(payload["emb"], lengths)
    batch = DocBatch.from_list(list(parts), ids, payload["sentences"], payload.get("whole"))
    masks = torch.split(payload["mask"], lengths)
    return batch.with_mask(torch.nn.utils.rnn.pad_sequence(list(masks), batch_first=True))


def cached_encode(encode: Callable[[Sequence[Paper]], DocBatch], papers: Sequence[Paper], *key,
                  **options) -> tuple[DocBatch, bool]:
    """`cached_encode_entry` less the entry's path: (DocBatch of `papers` in order, True when it came from the
    cache)."""
    batch, from_cache, _ = cached_encode_entry(encode, papers, *key, **options)
    return batch, from_cache


def cached_encode_entry(
    encode: Callable[[Sequence[Paper]], DocBatch],
    papers: Sequence[Paper],
    fingerprint: str,
    mode: str,
    options: dict | None = None,
    cache_dir: str | Path | None = None,
    needs_whole: bool = False,
) -> tuple[DocBatch, bool, Path | None]:
    """`encode(papers)` through the cache; `cache_dir=None` disables it. `needs_whole`: an entry written before the
    encoder returned whole-abstract vectors (`DocBatch.whole`) is encoded again and rewritten. Every paper must have
    at least one sentence slot in the result (`DocBatch.sentences` set).

    Returns:
        (DocBatch of `papers` in order, True when it came from the cache, the path of the entry it read or wrote:
        `cache_path`, the papers' texts hashed once), the path None without a cache or where none could be written
        (a disk too full, the entry removed by another run before its record was written, or the cache folder
        removed while it was written).
    """
    if cache_dir is None:
        return encode(papers), False, None
    path = cache_path(Path(cache_dir), fingerprint, mode, options or {}, papers)
    if path.is_file():
        cached, problem = _read_checked(path, papers)
        if cached is not None and needs_whole and cached.whole is None:
            cached, problem = None, "it holds no whole-abstract vectors (written before the one-pass encoding)"
        if cached is not None:
            log.info("read cached vectors %s", path)
            return cached, True, path
        log.warning("vector cache %s is not used, %s: encoding again and rewriting it", path, problem)
        remove_unwritten(path)
    batch = encode(papers)
    if not batch.sentences or len(batch.sentences) != len(papers):
        raise ValueError("cached_encode: the encoder must return DocBatch.sentences for every paper")
    try:
        with on_disk_full(path.parent, f"the vector cache file {path.name}"):
            _save(path, batch)
    except DiskFullError as err:  # a cache is optional: the run goes on with the vectors it has
        remove_cache_file(path)
        log.warning("vectors not cached: %s: %s", err.strerror, err.filename)
        return batch, False, None
    except FileNotFoundError:  # another run, finding it without its record yet, removed it; or the folder went
        if not path.parent.is_dir():  # once said "removed by another run" of a cache folder deleted mid-write
            log.warning("vectors not cached: the cache folder %s was removed while %s was written", path.parent,
                        path.name)
        else:
            log.warning("vectors not cached: %s was removed by another run before its checksum was recorded", path)
        return batch, False, None
    except OSError as err:  # a cache folder this user may not write (another's, a read-only home): the run goes on
        remove_unwritten(path)
        log.warning("vectors not cached: %s cannot be written (%s: %s): give a folder you may write (--cache-dir) or "
                    "--no-cache", path, type(err).__name__, err.strerror or err)
        return batch, False, None
    log.info("cached vectors in %s", path)
    return batch, False, path


def remove_unwritten(path: Path) -> None:
    """`remove_cache_file(path)`, where this user may: in a folder it may not write, the entry stays (it is never read
    back unchecked: `_read_checked` judges it again next time)."""
    try:
        remove_cache_file(path)
    except OSError as err:
        log.debug("cannot remove %s (%s)", path, err)


def _read_checked(path: Path, papers: Sequence[Paper]) -> tuple[DocBatch | None, str]:
    """The cached batch of `path` when it matches the size and checksum recorded when it was written and
    loads as the vectors of `papers`; else (None, why not)."""
    problem = check_record(path)
    if problem is not None:
        return None, problem
    try:
        return _load(path, papers), ""
    except Exception as err:  # noqa: BLE001 - a cache is never trusted: any failure to load means rebuild it
        return None, f"it does not load ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
