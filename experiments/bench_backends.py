"""Benchmark: encoding CSFCube abstracts with the inference backends vs sentence-transformers' `encode`.

Side by side in one process, interleaved over rounds so machine noise hits every contender alike (median
of the rounds): sentence-transformers `SentenceTransformer.encode` on "title abstract" at 512 word pieces
(the limit our encoder uses: the same tokens go through the model) and at its configured 256; our
contextual encoder with the exact torch backend; ONNX Runtime fp32; ONNX Runtime with int8 dynamic
quantization. The same papers, the same model (all-MiniLM-L6-v2), the same batch size.

Quality of the fast paths: the cosine of every sentence vector to the exact torch one (min / median).

    python experiments/bench_backends.py [--limit 400 | --limit 0 (all 4,205)] [--rounds 2] [--batch-size 32]

Threads: torch and ONNX Runtime both use `torch.get_num_threads()` (OMP_NUM_THREADS, else the cores).
The ONNX exports are cached under $ASPIRE_CACHE/onnx (made, and timed, before the rounds).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from aspire.data import Paper
from aspire.encoders import load_encoder, resolve_model

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "csfcube" / "abstracts-csfcube-preds.jsonl"
RESULTS = Path(__file__).resolve().parent / "results"
ST_512, ST_256 = "sentence-transformers encode (512)", "sentence-transformers encode (256, its default)"
BACKENDS = {  # contender -> load_encoder options
    "aspire torch (exact)": {},
    "aspire onnx fp32": {"backend": "onnx"},
    "aspire onnx int8": {"backend": "onnx", "quantize": "int8"},
}


def machine_state() -> dict:
    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "torch_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


def cosine_summary(exact, fast) -> dict:
    """Cosine of each real sentence vector of `fast` to the same one of `exact` (DocBatch each)."""
    assert torch.equal(exact.mask, fast.mask), "the backends must pool the same sentences"
    cos = torch.nn.functional.cosine_similarity(exact.emb[exact.mask], fast.emb[fast.mask], dim=-1)
    return {"sentences": cos.numel(), "min": cos.min().item(), "median": cos.median().item(),
            "p1": cos.quantile(0.01).item()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=400, help="first N papers (default 400; 0 = all 4,205)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_backends")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    state_before = machine_state()
    rows = [json.loads(line) for line in open(args.data, encoding="utf-8")][: args.limit or None]
    papers = [Paper(r["paper_id"], r["title"], r["abstract"]) for r in rows]
    joined = [f"{p.title} {' '.join(p.sentences)}" for p in papers]
    st = SentenceTransformer(str(resolve_model("minilm")), device="cpu")
    encoders, load_s = {}, {}
    for name, options in BACKENDS.items():
        start = time.perf_counter()
        encoders[name] = load_encoder("minilm", **options)
        load_s[name] = time.perf_counter() - start  # first run: includes the ONNX export / quantization

    def st_at(length):
        def run():
            st.max_seq_length = length
            return st.encode(joined, batch_size=args.batch_size, convert_to_tensor=True)
        return run

    def ours(name):
        return lambda: encoders[name].encode(papers, batch_size=args.batch_size)

    contenders = {ST_512: st_at(512), ST_256: st_at(256), **{name: ours(name) for name in BACKENDS}}
    st.encode(joined[:32], batch_size=args.batch_size)  # warm-up (allocator, thread pools)
    for enc in encoders.values():
        enc.encode(papers[:32], batch_size=args.batch_size)
    times = {name: [] for name in contenders}
    outputs = {}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - start)

    exact = outputs["aspire torch (exact)"]
    quality = {name: cosine_summary(exact, outputs[name]) for name in BACKENDS if name != "aspire torch (exact)"}
    n_tokens = sum(len(st.tokenizer(t)["input_ids"]) for t in joined)
    base = statistics.median(times[ST_512])
    median = {name: statistics.median(ts) for name, ts in times.items()}
    state_after = machine_state()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Encoding {len(papers)} CSFCube abstracts with all-MiniLM-L6-v2: inference backends",
        "",
        f"`{' '.join(['python', *sys.argv])}` — {when}; {state_before['cpu']}, {state_before['cores']} cores, "
        f"{state_before['torch_threads']} threads (torch and ONNX Runtime), batch {args.batch_size}, "
        f"{args.rounds} interleaved rounds (median); load average before {state_before['load_average_1_5_15']}, "
        f"after {state_after['load_average_1_5_15']} (a shared machine: other jobs were running).",
        "",
        f"{n_tokens / len(papers):.0f} word pieces per paper on average (\"title abstract\", MiniLM tokenizer).",
        "",
        "| contender | median s | papers/s | speed-up over sentence-transformers (512) |",
        "|---|---:|---:|---:|",
    ]
    for name, med in median.items():
        lines.append(f"| {name} | {med:.1f} | {len(papers) / med:.1f} | {base / med:.2f}x |")
    lines += ["", "Sentence vectors of the fast paths against the exact torch ones (cosine):", "",
              "| backend | sentences | min | 1st percentile | median |", "|---|---:|---:|---:|---:|"]
    for name, q in quality.items():
        lines.append(f"| {name} | {q['sentences']} | {q['min']:.5f} | {q['p1']:.5f} | {q['median']:.6f} |")
    lines += ["", "Load time (s; a first load includes the ONNX export and quantization, later ones read the "
              "cache): " + ", ".join(f"{name} {s:.1f}" for name, s in load_s.items())]
    table = "\n".join(lines)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(table + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({
        "command": " ".join(["python", *sys.argv]), "date": when, "papers": len(papers), "rounds": args.rounds,
        "batch_size": args.batch_size, "word_pieces_per_paper": n_tokens / len(papers),
        "machine_before": state_before, "machine_after": state_after, "times_s": times,
        "speedup_over_st512": {name: base / med for name, med in median.items()},
        "cosine_to_exact": quality, "load_s": load_s,
    }, indent=2))


if __name__ == "__main__":
    main()
