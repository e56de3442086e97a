"""Papers encoded for evaluation, through the vector cache (`aspire.evaluate.cache`), in one of four modes:

- `contextual`: `encoder.encode` — one pass over `title [SEP] abstract`, a vector per sentence, and the
  whole-abstract vector of the same pass (`DocBatch.whole`);
- `pass`: that pass's whole-abstract vector alone, as a one-sentence DocBatch (read from the contextual
  entry of the cache: a paper encoded for its sentences is not encoded again for its whole vector);
- `independent`: `encoder.encode_independent` — each sentence encoded alone;
- `abstract`: `encoder.encode_abstract` — one vector per paper from a separate encoding of the joined text,
  kept as a one-sentence DocBatch.

Entries are keyed by `encoder.fingerprint()`, which covers its weights, backend and precision, its settings and the
control code and query side in force (for a fast encoder loaded from its load record, the recorded fingerprint and the
settings in force, `aspire.encoders.backends.InferenceEncoder.fingerprint`).
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch
from torch import Tensor

from aspire.batch import DocBatch
from aspire.data.papers import Paper
from aspire.evaluate.cache import cached_encode_entry
from aspire.evaluate.options import ENCODINGS, non_default_encode_options


def single_vector_batch(vecs: Tensor, papers: Sequence[Paper]) -> DocBatch:
    """One vector per paper (B, D) as a DocBatch of one-sentence papers (the sentence: the joined abstract)."""
    return DocBatch(
        vecs[:, None, :],  # (B, 1, D)
        torch.ones(len(papers), 1, dtype=torch.bool, device=vecs.device),
        [p.paper_id for p in papers],
        [[" ".join(p.sentences)] for p in papers],
    )


def encode_papers(
    encoder,
    papers: Sequence[Paper],
    encoding: str,
    cache_dir=None,
    batch_size: int = 32,
    encode_options: dict | None = None,
    record: list[dict] | None = None,
) -> tuple[DocBatch, bool]:
    """Encode `papers` in one of `ENCODINGS` through the cache -> (DocBatch, from_cache).

    `encode_options` go to `encode_independent` / `encode_abstract` (e.g. `normalize`,
    `max_length`, `joiner`) and, less those at their default, into the cache key (with `encoder.fingerprint()`,
    `cache_entry_key`); the contextual encoding takes none.
    `record`: a list this call appends what it ran to, for a results file: `{"encoding", "papers", "batch_size",
    "fingerprint", "cache_entry", "from_cache"}`, where `cache_entry` is the file name in `cache_dir` it read or
    wrote (None without a cache, or where none could be written: a disk too full).
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; valid: {list(ENCODINGS)}")
    options = dict(encode_options or {})
    progress = logging.getLogger(__name__).isEnabledFor(logging.INFO)  # `--quiet` (WARNING) hides the bars
    contextual = encoding in ("contextual", "pass")
    if contextual and options:
        raise ValueError(f"the {encoding} encoding takes no options, got {sorted(options)}")
    if contextual:

        def fn(ps):
            return encoder.encode(list(ps), batch_size=batch_size, progress=progress)

    elif encoding == "independent":

        def fn(ps):
            return encoder.encode_independent(list(ps), batch_size=batch_size, progress=progress, **options)

    else:

        def fn(ps):
            vecs = encoder.encode_abstract(list(ps), batch_size=batch_size, progress=progress, **options)
            return single_vector_batch(vecs, ps)

    fingerprint = encoder.fingerprint()  # once: it hashes every weight
    mode, key_options = cache_entry_key(encoding, options)
    batch, from_cache, path = cached_encode_entry(fn, papers, fingerprint, mode, key_options, cache_dir,
                                                  needs_whole=contextual)  # the papers' texts hashed once
    if record is not None:
        record.append({"encoding": encoding, "papers": len(papers), "batch_size": batch_size,
                       "fingerprint": fingerprint, "cache_entry": None if path is None else path.name,
                       "from_cache": from_cache})
    return (single_vector_batch(batch.whole, papers) if encoding == "pass" else batch), from_cache


def cache_entry_key(encoding: str, encode_options: dict | None) -> tuple[str, dict]:
    """(mode, options) an encoding's vectors are cached under (`aspire.evaluate.cache.cache_path`): `pass` reads the
    contextual entry (its whole vectors), which takes no options; the others their own, with their options less those
    given at their default (`aspire.evaluate.options.non_default_encode_options`: `{pooling: mean}` once made a second
    entry of the vectors `{}` had cached, encoded again; dropped, not filled in, an entry keyed without options keeps
    its name)."""
    if encoding in ("contextual", "pass"):
        return "contextual", {}
    return encoding, non_default_encode_options(encoding, encode_options)
