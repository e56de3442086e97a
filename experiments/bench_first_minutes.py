"""Benchmark (issue 44, item 2): how long `aspire --help` and every `aspire COMMAND --help` take from a fresh
process, and whether torch was imported, for this checkout and, side by side, another one (`--before DIR`, e.g.
a `git worktree` of an older commit). Each command line runs `--repeats` times per checkout in fresh
interpreters, the two checkouts alternated run by run (the machine is shared: compare the ratios).

Run: python experiments/bench_first_minutes.py [--before /tmp/before] [--repeats 5]
Writes experiments/results/first_minutes_help.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.test_cli import HELP_ARGVS  # noqa: E402

# one command line through the `aspire` dispatcher of the checkout first on sys.path; prints whether torch loaded
PROBE = """
import contextlib, io, sys
sys.path.insert(0, sys.argv[1])
from aspire.cli import main
assert __import__("aspire").__file__.startswith(sys.argv[1]), "imported another checkout's aspire"
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[2:])
    except SystemExit:
        pass
print("torch" in sys.modules)
"""


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def run_once(repo: Path, argv: list[str]) -> tuple[float, bool]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, str(repo), *argv, "--help"], capture_output=True, text=True,
                          timeout=120)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv}: {done.stderr[-500:]}")
    return seconds, done.stdout.strip().endswith("True")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, help="another checkout to time side by side (e.g. a git worktree)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results")
    args = ap.parse_args()
    repos = {"after": REPO, **({"before": args.before.resolve()} if args.before else {})}
    baseline = [run_once(REPO, ["--version"])[0] for _ in range(args.repeats)]  # the interpreter and dispatcher alone
    rows = []
    for argv in [[]] + HELP_ARGVS:
        times = {name: [] for name in repos}
        torch_loaded = {}
        for _ in range(args.repeats):
            for name, repo in repos.items():
                seconds, loaded = run_once(repo, argv)
                times[name].append(seconds)
                torch_loaded[name] = loaded
        row = {"argv": " ".join(["aspire", *argv, "--help"]),
               **{f"{name}_s": statistics.median(t) for name, t in times.items()},
               **{f"{name}_torch": torch_loaded[name] for name in repos}}
        rows.append(row)
        print(row, flush=True)
    meta = {"cpu": cpu_name(), "date": time.strftime("%Y-%m-%d"), "repeats": args.repeats,
            "python_and_version_s": statistics.median(baseline), "before": str(args.before) if args.before else None}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_minutes_help.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# `aspire ... --help` from a fresh process ({meta['date']}, {meta['cpu']}, median of {args.repeats})", "",
             f"`aspire --version` (interpreter + dispatcher): {meta['python_and_version_s']:.2f} s.", "",
             "| command | " + " | ".join(f"{n} s | {n} torch" for n in repos) + (" | before / after |" if args.before else ""),
             "|---|" + "---:|---|" * len(repos) + ("---:|" if args.before else "")]
    for r in rows:
        cells = " | ".join(f"{r[f'{n}_s']:.2f} | {'yes' if r[f'{n}_torch'] else 'no'}" for n in repos)
        ratio = f" | {r['before_s'] / r['after_s']:.1f}x |" if args.before else " |"
        lines.append(f"| `{r['argv']}` | {cells}{ratio}")
    (args.out / "first_minutes_help.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
