"""Building and extending an index directory, safe against a second writer and against crashes.

`build_index` and `add_to_index` hold the directory's lock (`aspire.index.disk.index_lock`) from
the first check to the last write, so a second build or add into the same directory fails at once
with `IndexLockedError`. Before any encoding, `prepare_build_dir` decides what the directory allows:
a directory holding a live index is refused at once (unless `overwrite`), one holding anything an
index never writes is refused at once, and whatever a crashed build left (a half-written or
unrecorded generation, a half-written pointer) is removed at once. A crash at any point of a build
therefore leaves a directory that the next build either uses (the live index, complete and
loadable) or cleans up before encoding anything.
"""

from __future__ import annotations

import logging
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from aspire.config import apply_overrides
from aspire.data.papers import Paper
from aspire.index.ann import check_ivf_fits_before_encoding, outgrown
from aspire.index.config import EncodeConfig, IndexBuildConfig
from aspire.index.corpus import describe_rejected, encode_corpus, in_line_order, read_corpus
from aspire.index.disk import IndexExistsError, IndexFormatError, clear_leftovers, index_exists, index_lock
from aspire.index.fingerprint import encoder_include_title, model_fingerprints
from aspire.index.store import SentenceIndex

log = logging.getLogger(__name__)


@contextmanager
def phase(what: str) -> Iterator[None]:
    """Log `what` and its seconds on stderr when it ends (INFO; `--quiet` hides it): where a build's time goes."""
    start = time.perf_counter()
    yield
    log.info("%s in %.1f s", what, time.perf_counter() - start)


def prepare_build_dir(out: Path, overwrite: bool = False) -> list[str]:
    """Check and clean `out` for a new build (call with its lock held); returns the names removed.

    Raises IndexExistsError when `out` holds a live index and not `overwrite`, IndexFormatError when
    it holds anything an index never writes. A broken live index (its pointer or files damaged) is
    refused like a sound one, with the reason, unless `overwrite`.
    """
    out.mkdir(parents=True, exist_ok=True)
    live, pointer = None, out / "CURRENT"
    try:  # a pointer that is a link to nothing is a damaged one too (`exists` alone let its generations be removed)
        live = Path(SentenceIndex.read_manifest(out)["path"]).name if pointer.exists() or pointer.is_symlink() else None
    except IndexFormatError as err:
        if not overwrite:
            raise IndexExistsError(f"{out} holds a damaged index ({err}); use --overwrite to replace it") from None
        if pointer.is_dir() and not pointer.is_symlink():  # a folder in the pointer's place: unlink raised
            shutil.rmtree(pointer)
        else:
            pointer.unlink()  # replaced wholesale: the damaged generation is removed below
    if live is not None and not overwrite:
        raise index_exists(out)
    return clear_leftovers(out, keep=live)


def build_index(out: str | Path, model: str, corpus: str | Path, config: IndexBuildConfig, overwrite: bool = False,
                load_encoder: Callable | None = None, progress: bool = True) -> tuple[SentenceIndex, Path]:
    """Encode the papers file `corpus` with `model` and save the index under `out` (lock held
    throughout); returns the index and its generation directory. `load_encoder(model)` defaults to
    `aspire.encoders.load_encoder` with the backend and precision `config.encode` records (`encoder_options`: the
    index records them and search encodes its queries with them: the exact model, once loaded whatever they said, gave
    vectors the index's queries were then refused against). A
    corpus with no readable paper is refused before any model loads, an IVF index that cannot be made over it before
    any encoding (`refuse_unfitting_index`)."""
    out = Path(out)
    with index_lock(out):
        prepare_build_dir(out, overwrite)
        papers, unreadable = read_corpus(corpus, config.encode)
        require_papers(papers, unreadable, corpus)
        with phase(f"loaded model {model}"):
            encoder = _loader(load_encoder, config.encode)(model)
        refuse_unfitting_index(config, papers, encoder)
        start = time.perf_counter()
        encoded = encode_corpus(encoder, papers, config.encode, progress=progress)
        seconds = time.perf_counter() - start
        log.info("encoded %d of %d papers (%d sentence vectors; %d rejected) in %.1f s, %.1f papers/s", len(encoded),
                 len(papers), len(encoded.vectors), len(papers) - len(encoded), seconds, len(papers) / max(seconds, 1e-9))
        encoded.rejected = [{**r, "corpus": str(corpus)} for r in in_line_order(unreadable + encoded.rejected)]
        with phase("built the faiss index"):
            index = SentenceIndex.build(encoded, config, model_fingerprints(encoder)[0], model,
                                        encoder_include_title(encoder))
        with phase(f"saved {out}" + (" (BM25 index included)" if config.index.store_bm25 else "")):
            return index, index.save(out)


def require_papers(papers: Sequence, unreadable: list[dict], corpus: str | Path, verb: str = "index") -> None:
    """Refuse a corpus with no readable paper (`read_corpus`'s papers and rejected records), naming each rejected
    record, or saying the file holds none: called before any model loads."""
    if papers:
        return
    if not unreadable:
        raise ValueError(f"nothing to {verb}: {corpus} holds no records")
    raise ValueError(f"nothing to {verb}: all {len(unreadable)} records of {corpus} were rejected"
                     + describe_rejected(unreadable))


def refuse_unfitting_index(config: IndexBuildConfig, papers: Sequence[Paper], encoder) -> None:
    """Before any encoding: refuse an IVF index `config.index` asks for that cannot be made over the most sentence
    vectors `papers` can give (each one's sentences and title) at `encoder`'s dimension, naming the `index.` key
    (`aspire.index.ann.check_ivf_fits_before_encoding`); it was refused once the whole corpus had been encoded."""
    dim = getattr(encoder, "dim", None)
    check_ivf_fits_before_encoding(config.index, sum(len(p.sentences) + 1 for p in papers), int(dim) if dim else None)


def add_to_index(root: str | Path, corpus: str | Path, model: str | None = None, load_encoder: Callable | None = None,
                 overrides: Sequence[str] = (), progress: bool = True,
                 ready: Callable[[], None] | None = None) -> tuple[SentenceIndex, Path, int, int]:
    """Encode the papers of `corpus` not yet indexed and add them to the index under `root` (lock
    held throughout); returns the index, its new generation directory, the number of papers added and the
    number of this corpus's records rejected (each listed in the index's rejected records with its `corpus`, in
    line order: `in_line_order`).
    `overrides` (e.g. `encode.batch_size=64`) change the saved config for this run only. `load_encoder(model)` defaults
    to `aspire.encoders.load_encoder` with the backend and precision the index records (`encode.backend/quantize`,
    as `build_index` encodes with them). A corpus with no paper
    to add (every record unreadable or indexed already, checked before the model loads, or rejected by the
    encoding) is refused with a ValueError, and the live generation stays as it is. `ready()` is called once the add
    goes ahead: the encoder loaded and found to be the index's model, before any encoding (`aspire index add` says
    then which backend it encodes with). The faiss structure stays the one built; a warning says when the index has
    outgrown it (`aspire.index.ann.outgrown`: a flat index past `flat_max_sentences` under `kind: auto`)."""
    root = Path(root)
    with index_lock(root):
        index = SentenceIndex.load(root, mmap=False)
        encode_config = apply_overrides(index.config, overrides).encode
        papers, unreadable = read_corpus(corpus, encode_config)
        require_papers(papers, unreadable, corpus, "add")
        if not any(p.paper_id not in index.positions for p in papers):
            known = [{"paper_id": p.paper_id, "reason": "indexed already"} for p in papers]
            raise ValueError(f"nothing to add: all {len(papers) + len(unreadable)} records of {corpus} are indexed "
                             "already or were rejected" + describe_rejected(unreadable + known))
        encoder = _loader(load_encoder, encode_config)(model or index.model_name)
        fingerprints = model_fingerprints(encoder)
        index.check_model(*fingerprints)
        if index.include_title is None:  # an index saved before its manifest recorded it: the same encoder's
            index.include_title = encoder_include_title(encoder)
        if ready is not None:
            ready()
        before = index.n_papers
        encoded = encode_corpus(encoder, papers, encode_config, skip_ids=index.positions, progress=progress)
        encoded.rejected = [{**r, "corpus": str(corpus)} for r in in_line_order(unreadable + encoded.rejected)]
        if len(encoded) == 0:
            raise ValueError(f"nothing to add: all {len(encoded.rejected)} records of {corpus} were rejected"
                             + describe_rejected(encoded.rejected))
        rejected_before = len(index.rejected)
        index.add(encoded, *fingerprints)
        note = outgrown(index.config.index, index.kind, index.faiss_index, index.n_sentences)
        if note:
            log.warning("index add: %s; `aspire index build` over all the papers builds the structure for this size",
                        note)
        return index, index.save(root), index.n_papers - before, len(index.rejected) - rejected_before


def _loader(load_encoder: Callable | None, encode: EncodeConfig) -> Callable:
    """`load_encoder`, else `aspire.encoders.load_encoder` with the backend and precision `encode` records."""
    if load_encoder is not None:
        return load_encoder
    from aspire.encoders import load_encoder as load  # heavy import, only where a model is used

    options = encode.encoder_options()
    return lambda name: load(name, **options)
