"""Training the document models (`python -m aspire.train --config configs/NAME.yaml`).

- `config`: the nested-dataclass training config.
- `document_model`: `DocumentModel`, one loss path for every paper model (`model.kind`).
- `data`: co-cited pairs -> `TripletBatch`es; the seeded, shardable, resumable `EpochBatchSampler`.
- `checkpoint`: atomic checkpoints and the `latest` / `best` pointers.
- `trainer`: the loop (single process or `torchrun` DDP), `run(cfg, resume)`.
"""

from aspire.lazy import lazy_exports

lazy_exports(__name__, {
    **dict.fromkeys(("Config",), "aspire.train.config"),
    **dict.fromkeys(("KINDS", "DocumentModel", "TripletBatch"), "aspire.train.document_model"),
})

__all__ = ["Config", "DocumentModel", "KINDS", "TripletBatch"]
