"""Benchmark: training throughput (triples/s) of tsAspire and otAspire on minilm, and the OT kernel's share.

Runs the trainer's step (tokenise -> one encoder pass over anchors + positives -> kind's loss ->
backward -> clip -> AdamW) on real co-cited pairs from `../shared/data/cocite-acl`, built with
`aspire.data.cocite.run_all` into a temp directory unless `--examples` names one. A triple is an
(anchor, positive, in-batch negative) that entered the loss. The kinds are timed over `--steps`
steps each after `--warmup` steps, one step of each in turn so that machine noise hits them alike,
then each is profiled over `--profile-steps` steps with `torch.profiler`:
the OT share is the time under the `dist:ot` forward label plus Sinkhorn's backward
(`_ImplicitPlanBackward`), over the time of the profiled steps.

Where the examples carry no `cc_align` yet (`aspire.data.align` needs a teacher model), tsAspire
gets the stand-in alignment (0, 0): the aligned-pair loss costs the same whichever pair it is.

    python experiments/bench_train.py [--steps 24] [--batch-size 8] [--threads 2] [--examples DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from aspire.config import load_config
from aspire.data.cocite import run_all
from aspire.scoring import SinkhornConvergenceWarning
from aspire.train.config import Config
from aspire.train.data import EpochBatchSampler, TripletCollator, load_split
from aspire.train.trainer import build_model, seed_everything

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO.parent / "shared" / "data" / "cocite-acl" / "cocitations.jsonl"
RESULTS = REPO / "experiments" / "results"


def examples_with_alignment(src: Path, dst: Path) -> Path:
    """Copy `src` to `dst`, giving examples without `cc_align` the stand-in (0, 0)."""
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "abstracts.jsonl").write_text((src / "abstracts.jsonl").read_text())
    for split in ("train", "dev"):
        lines = []
        for line in (src / f"examples.{split}.jsonl").read_text().splitlines():
            ex = json.loads(line)
            ex.setdefault("cc_align", [0, 0])
            lines.append(json.dumps(ex))
        (dst / f"examples.{split}.jsonl").write_text("\n".join(lines) + "\n")
    return dst


def make_step(kind: str, examples: Path, args, out_dir: Path):
    """A closure running one training step of `kind` (returns the triples it trained on)."""
    cfg = load_config(Config, REPO / "configs" / "base.yaml", [
        f"model.kind={kind}", f"model.encoder={args.model}", f"data.examples_dir={examples}",
        f"train.batch_size={args.batch_size}", f"train.out_dir={out_dir}", "train.device=cpu",
    ])
    seed_everything(0)
    model = build_model(cfg).to(args.device)
    model.train()
    data = load_split(cfg.data, "train")
    collate = TripletCollator(model.encoder.tokenize, data.papers)
    batches = iter(EpochBatchSampler(len(data), args.batch_size, seed=0, epoch=0))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)

    def step() -> int:
        batch = collate([data[i] for i in next(batches)]).to(torch.device(args.device))
        out = model(batch)
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return int(out["triples"])

    return step


def bench(kinds: list[str], examples: Path, args, tmp: Path) -> list[dict]:
    """Time the kinds step by step in alternation (machine noise hits all alike), then profile each."""
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    steps = {kind: make_step(kind, examples, args, tmp / f"run-{kind}") for kind in kinds}
    seconds = dict.fromkeys(kinds, 0.0)
    triples = dict.fromkeys(kinds, 0)
    rows = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SinkhornConvergenceWarning)
        for kind in kinds:
            for _ in range(args.warmup):
                steps[kind]()
        for _ in range(args.steps):
            for kind in kinds:
                sync()
                t0 = time.perf_counter()
                triples[kind] += steps[kind]()
                sync()
                seconds[kind] += time.perf_counter() - t0
        n_warn = sum(issubclass(w.category, SinkhornConvergenceWarning) for w in caught)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    for kind in kinds:
        with profile(activities=activities) as prof:
            for _ in range(args.profile_steps):
                with record_function("train_step"):
                    steps[kind]()
            sync()
        totals = {e.key: e.cpu_time_total for e in prof.key_averages()}
        step_us = totals["train_step"]
        ot_us = totals.get("dist:ot", 0.0) + sum(v for k, v in totals.items() if "ImplicitPlanBackward" in k)
        rows.append({
            "kind": kind, "steps": args.steps, "batch_size": args.batch_size, "triples": triples[kind],
            "seconds": round(seconds[kind], 2), "triples_per_s": round(triples[kind] / seconds[kind], 3),
            "s_per_step": round(seconds[kind] / args.steps, 2),
            "ot_share": round(ot_us / step_us, 4), "encoder_forward_share": round(totals.get("encoder", 0.0) / step_us, 4),
            "sinkhorn_warnings_all_kinds": n_warn,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--examples", type=Path, default=None, help="an examples dir (default: built from cocite-acl)")
    parser.add_argument("--kinds", nargs="+", default=["ts", "ot"])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--profile-steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_train")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = args.examples or run_all(RECORDS, tmp / "cocite")
        examples = examples_with_alignment(Path(src), tmp / "aligned")
        had_align = all("cc_align" in json.loads(x) for x in (Path(src) / "examples.train.jsonl").read_text().splitlines())
        rows = bench(args.kinds, examples, args, tmp)
    env = {"device": args.device, "threads": args.threads, "cpu": platform.processor() or platform.machine(),
           "torch": torch.__version__, "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
           "alignment": "cc_align from the examples" if had_align else "stand-in (0, 0)",
           "command": "python experiments/bench_train.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                      (("steps", args.steps), ("batch_size", args.batch_size), ("threads", args.threads),
                       ("examples", args.examples or "(built from cocite-acl)")))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"env": env, "rows": rows}, indent=2) + "\n")
    lines = [f"# Training throughput on {args.model} ({args.device}, {args.threads} threads)", "",
             f"`{env['command']}` — torch {env['torch']}; 1-min load average at the end {env['load_avg_1min_at_end']}; "
             f"alignment: {env['alignment']}.", "",
             "| kind | batch | steps | triples | s/step | triples/s | OT kernel share | encoder fwd share ",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = "—" if r["kind"] == "ts" else f"{100 * r['ot_share']:.1f}%"
        lines.append(f"| {r['kind']} | {r['batch_size']} | {r['steps']} | {r['triples']} | {r['s_per_step']} | "
                     f"{r['triples_per_s']} | {share} | {100 * r['encoder_forward_share']:.1f}% |")
    lines += ["", f"Sinkhorn convergence warnings during the timed steps: {rows[0]['sinkhorn_warnings_all_kinds']}.",
              "Kinds are timed step by step in alternation; shares come from `torch.profiler` over "
              f"{args.profile_steps} further steps (OT = `dist:ot` forward + `_ImplicitPlanBackward`)."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
