"""Benchmark: the shipped aspect model on the exact torch path, its LoRA adapter as loaded vs folded into the weights.

`load_encoder("aspire-minilm")` runs the base model with peft's LoRA layers beside its linear layers (the adapter
unmerged: the fingerprint, the load record and the known answers are of that model); `encoder.merged()` folds the
adapter into a copy of the weights (`aspire.encoders.adapters.merged`, what the ONNX / OpenVINO exports run). Side
by side in one process, alternated over rounds (median), on the first N CSFCube abstracts: encoding time, and how
far the merged model's vectors are from the loaded one's (largest absolute difference of the contextual sentence
vectors and of the whole-abstract vectors).

    OMP_NUM_THREADS=1 python experiments/bench_adapter_merge.py [--limit 96] [--rounds 3] [--out PATH]

Writes PATH.md and PATH.json (default experiments/results/adapter_merge).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from aspire.benchmarks.csfcube import ABSTRACTS_FILE
from aspire.data.papers import read_paper_map
from aspire.encoders import load_encoder
from aspire.paths import DATA

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_backends import machine_state  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="aspire-minilm", help="a model with a LoRA adapter (default the shipped one)")
    parser.add_argument("--limit", type=int, default=96, help="the first N CSFCube abstracts (default 96)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS / "adapter_merge")
    args = parser.parse_args()
    before = machine_state()
    papers = list(read_paper_map(DATA / "csfcube" / ABSTRACTS_FILE).values())[: args.limit]
    loaded = load_encoder(args.model)
    merged = loaded.merged()
    contenders = {"adapter as loaded (peft LoRA layers)": loaded, "adapter merged into the weights": merged}
    for encoder in contenders.values():  # warm-up: allocator, thread pools
        encoder.encode(papers[:8], batch_size=args.batch_size)
    times = {name: [] for name in contenders}
    out = {}
    for _ in range(args.rounds):
        for name, encoder in contenders.items():
            start = time.perf_counter()
            out[name] = encoder.encode(papers, batch_size=args.batch_size)
            times[name].append(time.perf_counter() - start)
    first, second = out.values()
    assert torch.equal(first.mask, second.mask), "both must pool the same sentences"
    sentence_dev = (first.emb - second.emb)[first.mask].abs().max().item()
    whole_dev = (first.whole - second.whole).abs().max().item()
    median = {name: statistics.median(ts) for name, ts in times.items()}
    ratio = median["adapter as loaded (peft LoRA layers)"] / median["adapter merged into the weights"]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python", *sys.argv])
    lines = [f"# {args.model} on the exact torch path: its adapter as loaded vs merged into the weights", "",
             f"`{command}` — {when}; {before['cpu']}, {before['cores']} cores, {before['torch_threads']} torch "
             f"threads, batch {args.batch_size}, the first {len(papers)} CSFCube abstracts, {args.rounds} alternated "
             f"rounds (median); load average before {before['load_average_1_5_15']}, after "
             f"{machine_state()['load_average_1_5_15']}.", "",
             "| contender | median s | papers/s | per round s |", "|---|---:|---:|---:|"]
    for name, med in median.items():
        lines.append(f"| {name} | {med:.1f} | {len(papers) / med:.2f} | {' / '.join(f'{t:.1f}' for t in times[name])} |")
    lines += ["", f"Merged is **{ratio:.2f}x** as fast. Largest absolute difference of the merged model's vectors from "
              f"the loaded one's: sentence vectors {sentence_dev:.2e}, whole-abstract vectors {whole_dev:.2e} "
              f"(vectors of norm up to {first.emb[first.mask].norm(dim=-1).max().item():.2f})."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({
        "command": command, "date": when, "model": args.model, "papers": len(papers), "rounds": args.rounds,
        "batch_size": args.batch_size, "machine_before": before, "times_s": times, "median_s": median,
        "merged_speedup": ratio, "max_abs_dev_sentence": sentence_dev, "max_abs_dev_whole": whole_dev}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
