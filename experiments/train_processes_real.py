"""The trainer as separate processes on real data: a SIGKILL then `--resume`, and 2-process torchrun.

`tests/test_train_processes.py` checks both on a tiny random model. This script runs them on the
real co-citation examples (`runs/cocite-acl/6_aligned`, built as in `experiments/results/cocite_pipeline.md`)
with a pretrained encoder (minilm by default) and one paper model (ts+otAspire by default, so that
both loss terms and the Sinkhorn kernel are in the run). Four runs, all with the same schedule:

- `single`: one process, uninterrupted;
- `killed`: the same command, SIGKILLed once the checkpoint of step `--kill-after` is written
  (so mid-way to the next one), then the same command with `--resume`;
- `ddp`: `torchrun --nproc_per_node 2`, half the batch on each rank (the same global batches:
  `aspire.train.data.EpochBatchSampler`), uninterrupted;
- `ddp-resumed`: the same with `train.stop_after=<kill-after>`, then `--resume` under torchrun.

The checks: `killed` ends with the weights of `single` (SHA-256 digest of every parameter) and logs
the same per-step losses; both ranks of each torchrun run hold equal weights; `ddp-resumed` ends
with the weights of `ddp`. A DDP run is not expected to equal `single`: its in-batch negatives
come from each rank's half-batch.

    python experiments/train_processes_real.py [--config configs/tsot_aspire.yaml] [--steps 24] \
        [--kill-after 12] [--threads 2] [--out runs/processes-real]

Writes `experiments/results/train_processes_real.json` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from aspire.train import checkpoint as ckpt
from aspire.train.trainer import METRICS

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "experiments" / "results"


def records(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / METRICS).read_text().splitlines()]


def summary(out_dir: Path, seconds: float) -> dict:
    recs = records(out_dir)
    ends = [r for r in recs if r.get("event") == "end"]
    if len(ends) != 1:
        raise RuntimeError(f"{out_dir / METRICS}: expected one end record, found {len(ends)}")
    return {"seconds": round(seconds, 1), "end_step": ends[0]["step"], "weights_digest": ends[0]["weights_digest"],
            "losses": [[r["step"], r["loss"]] for r in recs if "loss" in r],
            "dev_losses": [[r["step"], r["dev_loss"]] for r in recs if "dev_loss" in r]}


def run(cmd: list[str], env: dict, log: Path) -> float:
    t0 = time.perf_counter()
    with log.open("a") as out:
        subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def run_killed(cmd: list[str], env: dict, out_dir: Path, kill_after: int, log: Path) -> tuple[float, int]:
    """Start `cmd`, SIGKILL it once `out_dir`'s latest checkpoint is at step >= `kill_after`."""
    t0 = time.perf_counter()
    with log.open("a") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            pointer = ckpt.read_pointer(out_dir) if (out_dir / ckpt.LATEST).is_file() else None
            if pointer and pointer["step"] >= kill_after:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.01)
        code = proc.wait()
    if code != -signal.SIGKILL:
        raise RuntimeError(f"the run in {out_dir} ended with code {code} before it could be killed")
    return time.perf_counter() - t0, ckpt.read_pointer(out_dir)["step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/tsot_aspire.yaml")
    parser.add_argument("--encoder", default="minilm")
    parser.add_argument("--examples", default="runs/cocite-acl/6_aligned")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=16, help="global batch (halved per rank under DDP)")
    parser.add_argument("--kill-after", type=int, default=12)
    parser.add_argument("--save-every", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2, help="in all: each DDP rank gets half")
    parser.add_argument("--out", default="runs/processes-real")
    args = parser.parse_args()
    if args.batch_size % 2 or args.threads % 2:
        parser.error("--batch-size and --threads must be even: two ranks share them")
    if not 0 < args.kill_after < args.steps or args.kill_after % args.save_every:
        parser.error("--kill-after must be a multiple of --save-every below --steps")

    root = Path(args.out)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    log = root / "log.txt"
    # config overrides as `aspire.train` reads them, section.key=value (the `--section.key=value` form is deprecated)
    common = [f"model.encoder={args.encoder}", f"data.examples_dir={args.examples}", f"train.max_steps={args.steps}",
              "train.lr=3e-5", "train.warmup_steps=2", f"train.save_every={args.save_every}",
              f"train.eval_every={args.kill_after}", "train.dev_before=true", "data.dev_batches=8",
              "train.log_every=1", "train.keep_checkpoints=2", "train.progress=false", "train.device=cpu"]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    one = {**env, "OMP_NUM_THREADS": str(args.threads)}
    two = {**env, "OMP_NUM_THREADS": str(args.threads // 2)}

    def single_cmd(name: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "aspire.train", "--config", args.config, *common,
                f"train.batch_size={args.batch_size}", f"train.out_dir={root / name}", *extra]

    def ddp_cmd(name: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "-m", "aspire.train", "--config", args.config, *common,
                f"train.batch_size={args.batch_size // 2}", f"train.out_dir={root / name}", *extra]

    runs: dict[str, dict] = {}
    runs["single"] = summary(root / "single", run(single_cmd("single"), one, log))
    seconds, stopped = run_killed(single_cmd("killed"), one, root / "killed", args.kill_after, log)
    seconds += run(single_cmd("killed", "--resume"), one, log)
    runs["killed"] = {**summary(root / "killed", seconds), "resumed_from": stopped}
    runs["ddp"] = summary(root / "ddp", run(ddp_cmd("ddp"), two, log))
    seconds = run(ddp_cmd("ddp-resumed", f"train.stop_after={args.kill_after}"), two, log)
    seconds += run(ddp_cmd("ddp-resumed", "--resume"), two, log)
    runs["ddp-resumed"] = {**summary(root / "ddp-resumed", seconds), "resumed_from": args.kill_after}

    checks = {
        "killed+resume == single (weights)": runs["killed"]["weights_digest"] == runs["single"]["weights_digest"],
        "killed+resume == single (per-step losses)": runs["killed"]["losses"] == runs["single"]["losses"],
        "ddp: rank 0 == rank 1": len(set(runs["ddp"]["weights_digest"])) == 1 and len(runs["ddp"]["weights_digest"]) == 2,
        "ddp-resumed: rank 0 == rank 1": len(set(runs["ddp-resumed"]["weights_digest"])) == 1,
        "ddp-resumed == ddp (weights)": runs["ddp-resumed"]["weights_digest"] == runs["ddp"]["weights_digest"],
        "ddp-resumed == ddp (per-step losses)": runs["ddp-resumed"]["losses"] == runs["ddp"]["losses"],
    }
    result = {"config": args.config, "encoder": args.encoder, "examples": args.examples, "steps": args.steps,
              "batch_size": args.batch_size, "kill_after": args.kill_after, "threads": args.threads,
              "machine": f"{platform.machine()}, {os.cpu_count()} cpu", "runs": runs, "checks": checks}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "train_processes_real.json").write_text(json.dumps(result, indent=1) + "\n")

    print("| run | resumed from | seconds | end step | dev loss (step: value) | weights digest (first 12 hex) |")
    print("|---|---:|---:|---:|---|---|")
    for name, r in runs.items():
        dev = ", ".join(f"{s}: {v:.6f}" for s, v in r["dev_losses"])
        digest = " / ".join(d[:12] for d in r["weights_digest"])
        print(f"| {name} | {r.get('resumed_from', '–')} | {r['seconds']} | {r['end_step']} | {dev} | {digest} |")
    print()
    for name, ok in checks.items():
        print(f"- {name}: {'yes' if ok else 'NO'}")
    if not all(checks.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
