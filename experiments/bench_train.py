"""Benchmark: training throughput (triples/s) and peak memory per objective on minilm, the OT kernel's
share, and the trainer's whole-abstract MNRL step against sentence-transformers' own.

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

An objective is `KIND[:LOSS][+bf16]` (`abstract:mnrl`, `ot:mnrl`, `max:multi_similarity`, ...;
the loss defaults to `triplet`; `+bf16` runs the forward pass under CPU/GPU bf16 autocast), or
`st-mnrl[+bf16]`: sentence-transformers' own step on the same pairs (its `SentenceTransformer` of the
same model with `max_seq_length = --max-length`, its `MultipleNegativesRankingLoss`, the step its
trainer takes: tokenise each column, loss, backward, clip, AdamW; the HF Trainer's loop around it is
left out). Peak memory is the peak RSS of a fresh process that loads the model and runs
`--memory-steps` steps of that objective alone.

    python experiments/bench_train.py [--steps 24] [--batch-size 8] [--threads 2] [--examples DIR]
        [--kinds ts ot abstract:mnrl st-mnrl abstract:mnrl+bf16 st-mnrl+bf16] [--max-length 128]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from aspire.benchmarks.context2doc import held_out_for
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


def parse(spec: str) -> tuple[str, str, bool]:
    """`KIND[:LOSS][+bf16]` -> (kind, loss, bf16)."""
    name, bf16 = spec.removesuffix("+bf16"), spec.endswith("+bf16")
    kind, _, loss = name.partition(":")
    return kind, loss or "triplet", bf16


def autocast(device: str, on: bool):
    return torch.autocast(device.split(":")[0], dtype=torch.bfloat16) if on else contextlib.nullcontext()


def make_step(spec: str, examples: Path, args, out_dir: Path):
    """A closure running one training step of objective `spec` (returns the triples it trained on)."""
    kind, loss, bf16 = parse(spec)
    if kind == "st-mnrl":
        return make_st_step(examples, args, bf16)
    cfg = load_config(Config, REPO / "configs" / "base.yaml", [
        f"model.kind={kind}", f"model.encoder={args.model}", f"data.examples_dir={examples}", f"loss.kind={loss}",
        f"train.batch_size={args.batch_size}", f"train.out_dir={out_dir}", "train.device=cpu",
    ] + ([f"model.max_length={args.max_length}"] if kind == "abstract" else []))
    seed_everything(0)
    model = build_model(cfg).to(args.device)
    model.train()
    data = load_split(cfg.data, "train")
    collate = TripletCollator(model.tokenize, data.papers)
    batches = iter(EpochBatchSampler(len(data), args.batch_size, seed=0, epoch=0))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)

    def step() -> int:
        batch = collate([data[i] for i in next(batches)]).to(torch.device(args.device))
        with autocast(args.device, bf16):
            out = model(batch)
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return int(out["triples"])

    return step


def make_st_step(examples: Path, args, bf16: bool):
    """sentence-transformers' MNRL step on the same (anchor, positive) abstracts as `abstract:mnrl`."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from aspire.encoders.pretrained import resolve_model

    seed_everything(0)
    model = SentenceTransformer(str(resolve_model(args.model)), device=args.device)
    model.max_seq_length = args.max_length
    model.train()
    loss_fn = MultipleNegativesRankingLoss(model, scale=20.0)
    cfg = load_config(Config, REPO / "configs" / "base.yaml", [f"data.examples_dir={examples}"])
    data = load_split(cfg.data, "train")
    text = lambda pid: " ".join(x for x in (data.papers[pid].title, " ".join(data.papers[pid].sentences)) if x)  # noqa: E731
    batches = iter(EpochBatchSampler(len(data), args.batch_size, seed=0, epoch=0))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)

    def step() -> int:
        pairs = [data[i] for i in next(batches)]
        features = [{k: v.to(args.device) if torch.is_tensor(v) else v
                     for k, v in model.preprocess([text(getattr(e, col)) for e in pairs]).items()}
                    for col in ("query_id", "positive_id")]
        with record_function("encoder"), autocast(args.device, bf16):
            loss = loss_fn(features, None)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return len(pairs)

    return step


def _peak_rss_child(spec: str, examples: Path, args, out_dir: Path, conn) -> None:
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", SinkhornConvergenceWarning)
    step = make_step(spec, examples, args, out_dir)
    for _ in range(args.memory_steps):
        step()
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a spawned child would report its parent's peak
    hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    conn.send(int(hwm.split()[1]) / 1024)  # kB -> MiB


def peak_rss_mib(spec: str, examples: Path, args, out_dir: Path) -> float:
    """Peak RSS (MiB) of a fresh process running `args.memory_steps` steps of `spec` alone."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_peak_rss_child, args=(spec, examples, args, out_dir, child))
    proc.start()
    value = parent.recv()
    proc.join()
    return round(value, 1)


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
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        with profile(activities=activities) as prof:
            for _ in range(args.profile_steps):
                with record_function("train_step"):
                    steps[kind]()
            sync()
        totals = {e.key: e.cpu_time_total for e in prof.key_averages()}
        step_us = totals["train_step"]
        ot_us = totals.get("dist:ot", 0.0) + sum(v for k, v in totals.items() if "ImplicitPlanBackward" in k)
        peak = (round(torch.cuda.max_memory_allocated() / 2**20, 1) if args.device.startswith("cuda")
                else peak_rss_mib(kind, examples, args, tmp / f"mem-{kind.replace(':', '-')}") if args.memory_steps else None)
        rows.append({
            "kind": kind, "steps": args.steps, "peak_mib": peak, "batch_size": args.batch_size, "triples": triples[kind],
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
    parser.add_argument("--max-length", type=int, default=256, help="word pieces of a whole-abstract text")
    parser.add_argument("--memory-steps", type=int, default=2, help="steps of the peak-memory process (0: skip)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_train")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = args.examples or run_all(RECORDS, tmp / "cocite", held_out=held_out_for(RECORDS))
        examples = examples_with_alignment(Path(src), tmp / "aligned")
        had_align = all("cc_align" in json.loads(x) for x in (Path(src) / "examples.train.jsonl").read_text().splitlines())
        rows = bench(args.kinds, examples, args, tmp)
    env = {"device": args.device, "threads": args.threads, "cpu": platform.processor() or platform.machine(),
           "torch": torch.__version__, "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
           "alignment": "cc_align from the examples" if had_align else "stand-in (0, 0)",
           "command": "python experiments/bench_train.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                      (("kinds", " ".join(args.kinds)), ("steps", args.steps), ("warmup", args.warmup),
                       ("profile_steps", args.profile_steps), ("batch_size", args.batch_size),
                       ("max_length", args.max_length), ("threads", args.threads),
                       ("examples", args.examples or "(built from cocite-acl)")))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"env": env, "rows": rows}, indent=2) + "\n")
    lines = [f"# Training throughput on {args.model} ({args.device}, {args.threads} threads)", "",
             f"`{env['command']}` — torch {env['torch']}; 1-min load average at the end {env['load_avg_1min_at_end']}; "
             f"alignment: {env['alignment']}.", "",
             "| objective | batch | steps | triples | s/step | triples/s | peak MiB | OT kernel share | encoder fwd share |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = f"{100 * r['ot_share']:.1f}%" if "ot" in parse(r["kind"])[0] else "—"
        lines.append(f"| {r['kind']} | {r['batch_size']} | {r['steps']} | {r['triples']} | {r['s_per_step']} | "
                     f"{r['triples_per_s']} | {r['peak_mib']} | {share} | {100 * r['encoder_forward_share']:.1f}% |")
    by = {r["kind"]: r for r in rows}
    for ours, theirs in (("abstract:mnrl", "st-mnrl"), ("abstract:mnrl+bf16", "st-mnrl+bf16")):
        if ours in by and theirs in by:
            lines.append(f"\n{ours} vs sentence-transformers' {theirs}: {by[ours]['s_per_step']} vs "
                         f"{by[theirs]['s_per_step']} s/step, ratio {by[ours]['s_per_step'] / by[theirs]['s_per_step']:.2f}.")
    lines += ["", f"Sinkhorn convergence warnings during the timed steps: {rows[0]['sinkhorn_warnings_all_kinds']}.",
              "Kinds are timed step by step in alternation; shares come from `torch.profiler` over "
              f"{args.profile_steps} further steps (OT = `dist:ot` forward + `_ImplicitPlanBackward`)."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
