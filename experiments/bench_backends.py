"""Benchmark: encoding CSFCube abstracts with the inference backends vs sentence-transformers' `encode`.

Side by side in one process, interleaved over rounds so machine noise hits every contender alike (median
of the rounds): sentence-transformers `SentenceTransformer.encode` on "title abstract" at 512 word pieces
(the limit our encoder uses: the same tokens go through the model), at its configured 256, and at 512
with the model cast to bfloat16 (for reference: what a sentence-transformers user gets from bf16 alone); our
contextual encoder with the exact torch backend; torch in bfloat16 (`--quantize bf16`); OpenVINO at bf16
precision (`--backend openvino --quantize bf16`); ONNX Runtime fp32; ONNX Runtime with int8 dynamic
quantization. The same papers, the same model (all-MiniLM-L6-v2), the same
batch size.

Quality of the fast paths: the cosine of every sentence vector to the exact torch one (min / median).

    python experiments/bench_backends.py [--limit 400 | --limit 0 (all 4,205)] [--rounds 2] [--batch-size 32]
        [--skip "onnx fp32,256"]

The table and the JSON are written after every round, so a run cut off by a time limit keeps its finished rounds.

Threads: torch, ONNX Runtime and OpenVINO all use `torch.get_num_threads()` (OMP_NUM_THREADS, else the cores).
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
ST_BF16 = "sentence-transformers encode (512, model in bf16)"
BACKENDS = {  # contender -> load_encoder options
    "aspire torch (exact)": {},
    "aspire torch bf16": {"quantize": "bf16"},
    "aspire openvino bf16": {"backend": "openvino", "quantize": "bf16"},
    "aspire onnx fp32": {"backend": "onnx"},
    "aspire onnx int8": {"backend": "onnx", "quantize": "int8"},
}


def cpu_model() -> str:
    """The CPU's model name and its bf16 / int8 matrix extensions (from /proc/cpuinfo where there is one)."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), platform.machine())
    flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    extensions = [f for f in ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni") if f in flags]
    return f"{name} ({', '.join(extensions) or 'no bf16/vnni extensions'})"


def machine_state() -> dict:
    return {
        "cpu": cpu_model(),
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


def report(args, papers, times, outputs, load_s, n_tokens, state_before) -> str:
    """The markdown table of the rounds so far (also written, with the JSON, to `args.out`)."""
    exact = outputs["aspire torch (exact)"]
    quality = {name: cosine_summary(exact, out) for name, out in outputs.items()
               if name.startswith("aspire") and name != "aspire torch (exact)"}
    st_quality = None
    if ST_BF16 in outputs:
        st_cos = torch.nn.functional.cosine_similarity(outputs[ST_512].float(), outputs[ST_BF16].float(), dim=-1)
        st_quality = {"papers": st_cos.numel(), "min": st_cos.min().item(), "median": st_cos.median().item()}
    rounds = len(times[ST_512])
    base = statistics.median(times[ST_512])
    median = {name: statistics.median(ts) for name, ts in times.items()}
    state_after = machine_state()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Encoding {len(papers)} CSFCube abstracts with all-MiniLM-L6-v2: inference backends",
        "",
        f"`{' '.join(['python', *sys.argv])}` — {when}; {state_before['cpu']}, {state_before['cores']} cores, "
        f"{state_before['torch_threads']} threads (torch, ONNX Runtime, OpenVINO), batch {args.batch_size}, "
        f"{rounds} of {args.rounds} interleaved rounds (median); load average before "
        f"{state_before['load_average_1_5_15']}, after {state_after['load_average_1_5_15']}.",
        "",
        f"{n_tokens / len(papers):.0f} word pieces per paper on average (\"title abstract\", MiniLM tokenizer).",
        "",
        "| contender | median s | papers/s | speed-up over sentence-transformers (512) | per round |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, med in median.items():
        per_round = " / ".join(f"{t0 / t:.2f}" for t0, t in zip(times[ST_512], times[name]))
        lines.append(f"| {name} | {med:.1f} | {len(papers) / med:.1f} | {base / med:.2f}x | {per_round} |")
    lines += ["", "Sentence vectors of the fast paths against the exact torch ones (cosine):", "",
              "| backend | sentences | min | 1st percentile | median |", "|---|---:|---:|---:|---:|"]
    for name, q in quality.items():
        lines.append(f"| {name} | {q['sentences']} | {q['min']:.5f} | {q['p1']:.5f} | {q['median']:.6f} |")
    if st_quality:
        lines += ["", f"sentence-transformers' bf16 model against its fp32 one (512), whole-abstract vectors of "
                  f"{st_quality['papers']} papers: cosine min {st_quality['min']:.5f}, median {st_quality['median']:.6f}."]
    lines += ["", "Load time (s; a first load includes the ONNX export and quantization, later ones read the "
              "cache): " + ", ".join(f"{name} {s:.1f}" for name, s in load_s.items())]
    table = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(table + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({
        "command": " ".join(["python", *sys.argv]), "date": when, "papers": len(papers), "rounds": rounds,
        "rounds_asked": args.rounds, "batch_size": args.batch_size, "word_pieces_per_paper": n_tokens / len(papers),
        "machine_before": state_before, "machine_after": state_after, "times_s": times,
        "speedup_over_st512": {name: base / med for name, med in median.items()},
        "cosine_to_exact": quality, "st_bf16_cosine_to_st": st_quality, "load_s": load_s,
    }, indent=2))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=400, help="first N papers (default 400; 0 = all 4,205)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--skip", default="", help="comma-separated substrings of contenders to leave out (not the "
                                                    "two references: sentence-transformers at 512, aspire torch exact)")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_backends")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    skip = [w for w in args.skip.split(",") if w]

    def wanted(name):
        return name in (ST_512, "aspire torch (exact)") or not any(w in name for w in skip)

    state_before = machine_state()
    rows = [json.loads(line) for line in open(args.data, encoding="utf-8")][: args.limit or None]
    papers = [Paper(r["paper_id"], r["title"], r["abstract"]) for r in rows]
    joined = [f"{p.title} {' '.join(p.sentences)}" for p in papers]
    st = SentenceTransformer(str(resolve_model("minilm")), device="cpu")
    st_bf16 = SentenceTransformer(str(resolve_model("minilm")), device="cpu").to(torch.bfloat16)
    encoders, load_s = {}, {}
    for name, options in BACKENDS.items():
        if wanted(name):
            start = time.perf_counter()
            encoders[name] = load_encoder("minilm", **options)
            load_s[name] = time.perf_counter() - start  # first run: includes the ONNX export / quantization

    def st_at(length, model=st):
        def run():
            model.max_seq_length = length
            return model.encode(joined, batch_size=args.batch_size, convert_to_tensor=True)
        return run

    def ours(name):
        return lambda: encoders[name].encode(papers, batch_size=args.batch_size)

    contenders = {ST_512: st_at(512), ST_256: st_at(256), ST_BF16: st_at(512, st_bf16),
                  **{name: ours(name) for name in encoders}}
    contenders = {name: fn for name, fn in contenders.items() if wanted(name)}
    st.encode(joined[:32], batch_size=args.batch_size)  # warm-up (allocator, thread pools)
    st_bf16.encode(joined[:32], batch_size=args.batch_size)
    for enc in encoders.values():
        enc.encode(papers[:32], batch_size=args.batch_size)
    n_tokens = sum(len(st.tokenizer(t)["input_ids"]) for t in joined)
    times = {name: [] for name in contenders}
    outputs = {}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - start)
        table = report(args, papers, times, outputs, load_s, n_tokens, state_before)  # each round: a cut-off run keeps it
    print(table)


if __name__ == "__main__":
    main()
