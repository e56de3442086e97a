"""Corpus index: sentence vectors in faiss with paper/sentence offsets, saved atomically.

- `config`: IndexBuildConfig (index structure, encoding, search defaults), read from configs/index*.yaml
- `corpus`: EncodedCorpus (flat sentence vectors + offsets), `encode_corpus`, shard files
- `store`:  SentenceIndex (build, add, save/load with format, checksum and model checks)
- `disk`:   the directory on disk: live-generation pointer confined to it, checksums, writers' lock
- `build`:  build/add a directory under its lock, refusing or cleaning it before any encoding
- `shards`: torchrun-sharded encoding and merging of shards into one index
CLI: `python -m aspire.index {build,add,encode-shard,merge,info [--verify]}`.
"""

from aspire.index.config import EncodeConfig, IndexBuildConfig, IndexConfig, SearchConfig
from aspire.index.corpus import EncodedCorpus, encode_corpus, gather_docbatch
from aspire.index.store import (
    FORMAT_VERSION,
    IndexFormatError,
    ModelMismatchError,
    SentenceIndex,
    build_faiss,
    model_fingerprint,
    resolve_kind,
)

__all__ = [
    "EncodeConfig", "IndexBuildConfig", "IndexConfig", "SearchConfig", "EncodedCorpus", "encode_corpus",
    "gather_docbatch", "FORMAT_VERSION", "IndexFormatError", "ModelMismatchError", "SentenceIndex",
    "build_faiss", "model_fingerprint", "resolve_kind",
]
