"""Cheap signal for choosing which negative samplers to train: the co-citation dev loss of one fixed
model with each hard-negatives file (the trainer's own dev batches, `DEV_SEED`, `data.dev_batches`).

    python experiments/negatives_devloss.py --model runs/abl48_max/checkpoint-000048/model \
        --out experiments/results/negatives_devloss.json none runs/neg/random/hard_negatives.jsonl ...

`none` is the run without hard negatives. A file whose negatives the model already keeps far from
the anchors adds little loss, and so likely little training signal; a large rise can also mean false
negatives, which the dev loss cannot tell apart.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch
from torch.utils.data import DataLoader

from aspire.config import load_config
from aspire.io import write_json
from aspire.train.config import Config
from aspire.train.data import EpochBatchSampler, TripletCollator, load_split
from aspire.train.trainer import DEV_SEED, build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/max_aspire.yaml")
    parser.add_argument("--model", required=True, help="a DocumentModel checkpoint directory")
    parser.add_argument("--examples", default="runs/cocite-acl/5_examples")
    parser.add_argument("--dev-batches", type=int, default=4, help="dev batches scored (0: all, as the trainer reads it)")
    parser.add_argument("--out", required=True)
    parser.add_argument("files", nargs="+", help="hard-negatives files, or `none`")
    args = parser.parse_args()
    cfg = load_config(Config, args.config)
    model = build_model(cfg, args.model).eval()
    rows = []
    for name in args.files:
        start = time.perf_counter()
        data_cfg = replace(cfg.data, examples_dir=args.examples, dev_batches=args.dev_batches,
                           hard_negatives=None if name == "none" else name)
        dev = load_split(data_cfg, "dev")
        collate = TripletCollator(model.tokenize, dev.papers)
        sampler = EpochBatchSampler(len(dev), cfg.train.batch_size, DEV_SEED, 0, limit=args.dev_batches or None)
        total = count = 0.0
        with torch.no_grad():
            for batch in DataLoader(dev, batch_sampler=sampler, collate_fn=collate):
                out = model(batch)
                total, count = total + float(out["loss"]) * int(out["triples"]), count + int(out["triples"])
        with_hard = sum(e.negative is not None for e in dev.examples) / len(dev)
        rows.append({"file": name, "dev_loss": total / count, "dev_examples_with_hard_negative": with_hard,
                     "seconds": round(time.perf_counter() - start, 1)})
        print(json.dumps(rows[-1]), flush=True)
    write_json(args.out, {"model": args.model, "config": args.config, "dev_batches": args.dev_batches, "rows": rows})


if __name__ == "__main__":
    main()
