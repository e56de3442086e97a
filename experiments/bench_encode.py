"""Benchmark: contextual sentence encoding of the CSFCube abstracts vs sentence-transformers' own `encode`.

Both run the same model (all-MiniLM-L6-v2) over the same papers, in one process, interleaved over rounds so
machine noise hits both alike; the result is reported as a ratio (ours / theirs, target <= 1.15).
sentence-transformers is run on "title abstract" joined, at its configured max_seq_length (256 for MiniLM)
and at 512, the limit our encoder uses (the fair comparison: the same tokens go through the model).

    python experiments/bench_encode.py [--limit N] [--rounds R] [--threads 2] [--device cuda] [--model DIR]
(on a GPU the results go to bench_encode_cuda.{md,json} unless --out says otherwise)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from aspire.data import Paper
from aspire.encoders import load_encoder, resolve_model

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "csfcube" / "abstracts-csfcube-preds.jsonl"
RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=None, help="first N papers only (default: all 4,205)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="torch device of both encoders (cpu, cuda)")
    parser.add_argument("--model", default="minilm",
                        help="a short model name or an HF directory of all-MiniLM-L6-v2 (both encoders load it)")
    parser.add_argument("--out", type=Path, default=None, help="default: results/bench_encode[_DEVICE]")
    args = parser.parse_args()
    args.out = args.out or RESULTS / ("bench_encode" if args.device == "cpu" else f"bench_encode_{args.device.split(':')[0]}")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    rows = [json.loads(line) for line in open(args.data, encoding="utf-8")][: args.limit]
    papers = [Paper(r["paper_id"], r["title"], r["abstract"]) for r in rows]
    joined = [f"{p.title} {' '.join(p.sentences)}" for p in papers]
    ours = load_encoder(args.model, device=args.device)
    st = SentenceTransformer(str(resolve_model(args.model)), device=args.device)

    def run_ours():
        return ours.encode(papers, batch_size=args.batch_size)

    def st_at(length):
        def run():
            st.max_seq_length = length
            return st.encode(joined, batch_size=args.batch_size, convert_to_tensor=True)
        return run

    contenders = {
        "aspire contextual (title [SEP] abstract, 512)": run_ours,
        "sentence-transformers encode (512)": st_at(512),
        "sentence-transformers encode (256, its default)": st_at(256),
    }
    times = {name: [] for name in contenders}
    ours.encode(papers[:64], batch_size=args.batch_size)  # warm-up (allocator, thread pools)
    st.encode(joined[:64], batch_size=args.batch_size)
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)

    n_tokens = sum(len(ours.tokenizer(t)["input_ids"]) for t in joined)
    base = statistics.median(times["sentence-transformers encode (512)"])
    lines = [
        f"# Encoding {len(papers)} CSFCube abstracts with all-MiniLM-L6-v2 ({args.threads} threads, "
        f"batch {args.batch_size}, {args.rounds} interleaved rounds, median)",
        "",
        f"{n_tokens / len(papers):.0f} word pieces per paper on average; device {args.device}; "
        f"{torch.cuda.get_device_name(args.device) if args.device.startswith('cuda') else platform.processor() or platform.machine()}",
        "",
        "| contender | median s | papers/s | ratio to sentence-transformers (512) |",
        "|---|---:|---:|---:|",
    ]
    for name, ts in times.items():
        med = statistics.median(ts)
        lines.append(f"| {name} | {med:.1f} | {len(papers) / med:.1f} | {med / base:.2f}x |")
    table = "\n".join(lines)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(table + "\n")
    args.out.with_suffix(".json").write_text(
        json.dumps({"model": str(args.model), "papers": len(papers), "threads": args.threads, "batch_size": args.batch_size, "device": args.device,
                    "times_s": times}, indent=2)
    )


if __name__ == "__main__":
    main()
