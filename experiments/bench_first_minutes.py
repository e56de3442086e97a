"""Benchmark (issue 44, item 2): how long `aspire --help` and every `aspire COMMAND --help` take from a fresh
process, and whether torch was imported, for this checkout and, side by side, another one (`--before DIR`, e.g.
a `git worktree` of an older commit). Each command line runs `--repeats` times per checkout in fresh
interpreters, the two checkouts alternated run by run (the machine is shared: compare the ratios).

Run: python experiments/bench_first_minutes.py [--before /tmp/before] [--repeats 5]
Writes experiments/results/first_minutes_help.{json,md}.

Item 4: `--search INDEX QUERY_FILE` times a one-off `aspire search --index INDEX --query-file QUERY_FILE` from a
fresh process instead (each checkout `--repeats` times, alternated), with the phases `aspire search` logs at
DEBUG (imports, opening the index, loading the model, making the query, searching) and the wall time; writes
first_minutes_search.{json,md}. `--interactive INDEX CORPUS` times queries as `--interactive` runs them (index
and model loaded once, this checkout): the first 40 ids of CORPUS (indexed) and its first 20 papers as JSON
(encoded); prints the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


# `aspire search` of the checkout first on sys.path, its DEBUG phase lines on stderr
SEARCH = """
import sys
sys.path.insert(0, sys.argv[1])
from aspire.cli import main
assert __import__("aspire").__file__.startswith(sys.argv[1]), "imported another checkout's aspire"
main(sys.argv[2:])
"""
PHASES = {"imports": r"imported torch, faiss and the search code in ([\d.]+) s", "open index": r"opened the index .* in ([\d.]+) s",
          "load model": r"loaded the model in ([\d.]+) s", "make query": r"made \d+ quer.* in ([\d.]+) s",
          "search": r"searched in ([\d.]+) s"}


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def time_search(repos: dict[str, Path], index: str, query_file: str, repeats: int, out: Path) -> None:
    """Item 4: one-off `aspire search` from a fresh process, each checkout alternated (see the module's doc)."""
    runs = {name: [] for name in repos}
    for _ in range(repeats):
        for name, repo in repos.items():
            argv = ["search", "--index", index, "--query-file", query_file, "--k", "5", "--log-level", "DEBUG"]
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", SEARCH, str(repo), *argv], capture_output=True, text=True,
                                  timeout=600)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                raise RuntimeError(f"{name}: {done.stderr[-800:]}")
            phases = {k: float(m.group(1)) for k, rx in PHASES.items() if (m := re.search(rx, done.stderr))}
            runs[name].append({"wall": wall, **phases, "load_average": load_average()})
            print(name, runs[name][-1], flush=True)
    keys = ["wall", *PHASES]
    meta = {"cpu": cpu_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "repeats": repeats,
            "index": index, "query_file": query_file, "repos": {n: str(r) for n, r in repos.items()}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_minutes_search.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))
    lines = [f"# one-off `aspire search` from a fresh process ({meta['date']}, {meta['cpu']}, median of {repeats})", "",
             "| checkout | " + " | ".join(keys) + " | load average |", "|---|" + "---:|" * len(keys) + "---|"]
    for name, rs in runs.items():
        cells = " | ".join(f"{statistics.median(r[k] for r in rs if k in r):.2f}" if any(k in r for r in rs) else "-"
                           for k in keys)
        lines.append(f"| {name} | {cells} | {', '.join(r['load_average'] for r in rs)} |")
    (out / "first_minutes_search.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def time_interactive(index: str, corpus: str) -> None:
    """Item 4: queries as `aspire search --interactive` runs them (the same QueryMaker and run_query)."""
    from aspire.cli.search import QueryMaker, build_parser, run_query, set_threads
    from aspire.search import Searcher

    args = build_parser("aspire search").parse_args(["--index", index, "--interactive", "--k", "10", "--quiet"])
    set_threads(None)
    searcher = Searcher.open(args.index, [])
    maker = QueryMaker(searcher, args)
    with open(corpus, encoding="utf-8") as fh:
        lines = [line.strip() for line, _ in zip(fh, range(40))]
    ids = [json.loads(line)["paper_id"] for line in lines]
    for kind, queries in (("indexed id", ids), ("new paper (JSON, encoded)", lines[:20])):
        run_query(searcher, maker.from_line(queries[0]), args)  # loads the model on first need
        times = []
        for line in queries:
            start = time.perf_counter()
            run_query(searcher, maker.from_line(line), args)
            times.append(time.perf_counter() - start)
        print(f"{kind}: median {1e3 * statistics.median(times):.1f} ms, p90 {1e3 * sorted(times)[int(0.9 * len(times))]:.1f}"
              f" ms over {len(times)} ({cpu_name()}, load average {load_average()})", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, help="another checkout to time side by side (e.g. a git worktree)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results")
    ap.add_argument("--search", nargs=2, metavar=("INDEX", "QUERY_FILE"), help="time a one-off aspire search instead")
    ap.add_argument("--interactive", nargs=2, metavar=("INDEX", "CORPUS"), help="time --interactive queries instead")
    args = ap.parse_args()
    repos = {"after": REPO, **({"before": args.before.resolve()} if args.before else {})}
    if args.search:
        return time_search(repos, *args.search, args.repeats, args.out)
    if args.interactive:
        return time_interactive(*args.interactive)
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
