"""Corpus index: sentence vectors in faiss with paper/sentence offsets, saved atomically.

- `config`: IndexBuildConfig (index structure, encoding, search defaults), read from configs/index*.yaml
- `corpus`: EncodedCorpus (flat sentence vectors + offsets), `encode_corpus`, shard files
- `store`:  SentenceIndex (build, add, save/load with format, checksum and model checks)
- `fingerprint`: the model an index was built with: fingerprints, the model check, ModelMismatchError
- `disk`:   the directory on disk: live-generation pointer confined to it, checksums, writers' lock
- `build`:  build/add a directory under its lock, refusing or cleaning it before any encoding
- `shards`: torchrun-sharded encoding and merging of shards into one index
CLI: `python -m aspire.index {build,add,encode-shard,merge,info [--verify]}`.
"""

from aspire.lazy import lazy_exports

lazy_exports(__name__, {
    **dict.fromkeys(("EncodeConfig", "IndexBuildConfig", "IndexConfig", "SearchConfig"), "aspire.index.config"),
    **dict.fromkeys(("EncodedCorpus", "encode_corpus", "gather_docbatch"), "aspire.index.corpus"),
    **dict.fromkeys(("FORMAT_VERSION", "IndexFormatError", "SentenceIndex", "build_faiss", "resolve_kind"),
        "aspire.index.store"),
    **dict.fromkeys(("ModelMismatchError", "model_fingerprint"), "aspire.index.fingerprint"),
})

__all__ = [
    "EncodeConfig", "IndexBuildConfig", "IndexConfig", "SearchConfig", "EncodedCorpus", "encode_corpus",
    "gather_docbatch", "FORMAT_VERSION", "IndexFormatError", "ModelMismatchError", "SentenceIndex",
    "build_faiss", "model_fingerprint", "resolve_kind",
]
