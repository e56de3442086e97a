"""Screen bfloat16 paths for all-MiniLM-L6-v2 on a CPU with AMX / AVX512-BF16: time the transformer's forward
alone, interleaved, and the cosine of each path's sentence vectors to the exact torch ones.

The feeds are what `encode` gives the backend: the first N CSFCube abstracts, longest first, batches of 32,
each batch's rows in `length_groups` cut to their longest row. Every repetition runs every path once
(interleaved, so machine load hits all alike); the table gives the minimum and median over the repetitions
and the exact torch forward's minimum over each one's. Only the forward is timed: tokenisation and pooling are
the same for every path. OpenVINO runs one single-thread stream per thread and gets all the feeds at once here
(in `encode` it gets one batch's at a time).

    python experiments/screen_bf16_backends.py [--limit 100] [--reps 3] [--only "torch,openvino"]

Paths: torch fp32 (the exact model); torch bf16 (`load_encoder(..., quantize="bf16")`: the model cast to
bfloat16); torch autocast bf16 (fp32 weights, `torch.autocast("cpu", torch.bfloat16)`: matrix products in
bf16, the residual stream fp32); OpenVINO on the plain ONNX export at f32 and bf16 inference precision
(`load_encoder(..., backend="openvino"[, quantize="bf16"])`); ONNX Runtime int8 (the committed recipe).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from aspire.data import Paper
from aspire.encoders import load_encoder
from aspire.encoders.backends import GroupedRows, InferenceEncoder, length_groups

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "csfcube" / "abstracts-csfcube-preds.jsonl"
RESULTS = Path(__file__).resolve().parent / "results"


class Autocast(GroupedRows):
    def run_rows(self, feed):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.exact(**feed).last_hidden_state.float()


class Exact(GroupedRows):
    def run_rows(self, feed):
        return self.exact(**feed).last_hidden_state


def paths(exact) -> dict:
    """name -> a GroupedRows module (the forward of one path)."""
    bf16 = load_encoder("minilm", quantize="bf16").model
    int8 = load_encoder("minilm", backend="onnx", quantize="int8").model
    out = {"torch fp32 (exact)": Exact(exact.model, "exact"), "torch bf16": bf16,
           "torch autocast bf16": Autocast(exact.model, "autocast")}
    out |= {"openvino f32": load_encoder("minilm", backend="openvino").model,
            "openvino bf16": load_encoder("minilm", backend="openvino", quantize="bf16").model}
    return out | {"onnxruntime int8 (fused-qatt-pc)": int8}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated substrings of path names (default all)")
    parser.add_argument("--out", type=Path, default=RESULTS / "screen_bf16_backends.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = [json.loads(line) for line in open(DATA, encoding="utf-8")][: args.limit]
    papers = [Paper(r["paper_id"], r["title"], r["abstract"]) for r in rows]
    exact = load_encoder("minilm")
    wanted = [w for w in args.only.split(",") if w]
    modules = {n: m for n, m in paths(exact).items() if not wanted or n.startswith("torch fp32") or any(w in n for w in wanted)}
    feeds = []
    order = sorted(range(len(papers)), key=lambda i: -(len(papers[i].title) + sum(map(len, papers[i].sentences))))
    for lo in range(0, len(papers), 32):
        inputs = exact.tokenize([papers[i] for i in order[lo : lo + 32]])
        lengths = inputs.attention_mask.sum(1)
        for group in length_groups(lengths.tolist()):
            n = int(lengths[group[0]])
            feeds.append({"input_ids": inputs.input_ids[group, :n], "attention_mask": inputs.attention_mask[group, :n],
                          "token_type_ids": inputs.token_type_ids[group, :n]})

    @torch.inference_mode()
    def run_all(module):
        module.run_groups(feeds)  # OpenVINO: every feed queued on its streams at once; the others one by one

    for module in modules.values():
        run_all(module)  # warm-up (and OpenVINO's first shapes)
    times = {name: [] for name in modules}
    load_before = os.getloadavg()
    for _ in range(args.reps):
        for name, module in modules.items():
            start = time.perf_counter()
            run_all(module)
            times[name].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    want = exact.encode(papers, batch_size=32)
    base = min(times["torch fp32 (exact)"])
    print(f"{len(papers)} papers, {len(feeds)} forward calls, {sum(f['input_ids'].numel() for f in feeds)} word pieces, "
          f"{torch.get_num_threads()} threads; load average before {load_before}, after {load_after}")
    print("| path | min s | median s | exact / this | cosine min | cosine median |\n|---|---:|---:|---:|---:|---:|")
    out = {}
    for name, module in modules.items():
        got = InferenceEncoder(module, exact.tokenizer, **exact.settings()).encode(papers, batch_size=32)
        cos = torch.nn.functional.cosine_similarity(want.emb[want.mask], got.emb[got.mask], dim=-1)
        out[name] = {"times_s": times[name], "cos_min": cos.min().item(), "cos_median": cos.median().item()}
        print(f"| {name} | {min(times[name]):.2f} | {statistics.median(times[name]):.2f} | {base / min(times[name]):.2f} | "
              f"{cos.min():.5f} | {cos.median():.6f} |")
    args.out.write_text(json.dumps({"papers": len(papers), "reps": args.reps, "threads": torch.get_num_threads(),
                                    "load_before": load_before, "load_after": load_after, "paths": out}, indent=2))


if __name__ == "__main__":
    main()
