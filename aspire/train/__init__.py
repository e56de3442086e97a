"""Training the document models (`python -m aspire.train --config configs/NAME.yaml`).

- `config`: the nested-dataclass training config.
- `models`: `DocumentModel`, one loss path for every paper model (`model.kind`).
- `data`: co-cited pairs -> `TripletBatch`es; the seeded, shardable, resumable `EpochBatchSampler`.
- `checkpoint`: atomic checkpoints and the `latest` / `best` pointers.
- `trainer`: the loop (single process or `torchrun` DDP), `run(cfg, resume)`.
"""

from aspire.train.config import Config
from aspire.train.document_model import KINDS, DocumentModel, TripletBatch

__all__ = ["Config", "DocumentModel", "KINDS", "TripletBatch"]
