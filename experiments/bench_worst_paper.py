"""Peak memory of an index build as the worst paper of the corpus grows (issue 29, item 3).

Each run is a fresh child process that builds an index (`aspire.index.build.build_index`) over 200
ordinary papers plus one worst paper of `size` characters, shaped as one long sentence or as many
100-character sentences, and reports its peak resident memory (`VmHWM`, `PEAK_RSS`) and wall time.
Three modes:

    bounded     the defaults: lines over 1 MiB skipped unread, > 1000 sentences or a sentence
                over 20,000 characters rejected; windows go through the model batch_size at a time
    unlimited   the three limits lifted (0), windows still batch_size at a time
    one-pass    limits lifted and every window of a batch in one model pass (the encoding before
                this change), as the control

    python experiments/bench_worst_paper.py [--sizes 0,10000,...] [--model DIR] [--out FILE]

Without --model a tiny random BERT (the test suite's, hidden 32, 128 positions) is built in a
temporary directory: the memory figures are about the pipeline's scaling, not a real model's size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "experiments" / "results"
WORDS = "the model learns a representation of scientific text with sentence vectors".split()

# The peak resident memory of the process running it. VmHWM, not `ru_maxrss`: Linux carries ru_maxrss over exec
# (the replaced address space's peak is kept), so a child started by a parent whose peak is higher reported the
# parent's peak, not its own (`bench_train.py` reads VmHWM for the same reason).
PEAK_RSS = r"""
def peak_rss_mb():
    line = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
"""

CHILD = PEAK_RSS + r"""
import json, sys, time
from aspire.config import load_config
from aspire.index.build import build_index
from aspire.index.config import IndexBuildConfig
model, corpus, out, mode = sys.argv[1:5]
if mode == "one-pass":  # the control: every window of a batch through the model at once
    from aspire.encoders.contextual import ContextualSentenceEncoder
    forward = ContextualSentenceEncoder.forward
    ContextualSentenceEncoder.forward = lambda self, inputs, max_rows=None: forward(self, inputs)
overrides = ["index.kind=flat"]
if mode != "bounded":
    overrides += ["encode.max_line_bytes=0", "encode.max_sentences=0", "encode.max_sentence_chars=0"]
config = load_config(IndexBuildConfig, None, overrides)
start = time.perf_counter()
index, _ = build_index(out, model, corpus, config)
print(json.dumps({"peak_rss_mb": peak_rss_mb(),
                  "seconds": time.perf_counter() - start, "worst_indexed": "worst" in index.positions,
                  "reason": next((r["reason"] for r in index.rejected if r.get("paper_id") == "worst"), "")}))
"""


def text(n_chars: int, offset: int = 0) -> str:
    """`n_chars` characters of words (rotated by `offset`)."""
    words = WORDS[offset % len(WORDS):] + WORDS[: offset % len(WORDS)]
    one = " ".join(words) + " "
    return (one * (n_chars // len(one) + 1))[:n_chars].strip()


def write_corpus(path: Path, size: int, shape: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(200):
            sents = [text(90, i + j).capitalize() + "." for j in range(6)]
            f.write(json.dumps({"paper_id": f"p{i}", "title": text(40, i), "abstract": sents}) + "\n")
        if size:
            if shape == "sentence":
                abstract = [text(size) + "."]
            else:
                abstract = [text(99, j) + "." for j in range(max(1, size // 100))]
            f.write(json.dumps({"paper_id": "worst", "title": "the worst paper", "abstract": abstract}) + "\n")


def run(model: str, corpus: Path, out: Path, mode: str, threads: int) -> dict:
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", CHILD, model, str(corpus), str(out), mode], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0,10000,100000,400000,1600000,6400000",
                        help="worst-paper sizes in characters (0: no worst paper)")
    parser.add_argument("--one-pass-max", type=int, default=400_000, help="largest size run in the one-pass control")
    parser.add_argument("--unlimited-max", type=int, default=1_600_000, help="largest size run with limits lifted")
    parser.add_argument("--model", help="model directory (default: a tiny random BERT)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_worst_paper.md")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = args.model
        if model is None:
            sys.path.insert(0, str(REPO / "tests"))
            from conftest import build_tiny_model

            model = str(build_tiny_model(tmp / "tiny-bert"))
        for shape in ("sentence", "sentences"):
            for size in sizes:
                corpus = tmp / f"{shape}-{size}.jsonl"
                write_corpus(corpus, size, shape)
                for mode, limit in (("bounded", None), ("unlimited", args.unlimited_max), ("one-pass", args.one_pass_max)):
                    if limit is not None and size > limit:
                        continue
                    result = run(model, corpus, tmp / f"idx-{shape}-{size}-{mode}", mode, args.threads)
                    rows.append({"shape": shape, "size": size, "mode": mode, "line_bytes": corpus.stat().st_size, **result})
                    print(json.dumps(rows[-1]), flush=True)
    write_table(args, rows)


def write_table(args, rows: list[dict]) -> None:
    lines = [
        "# Peak memory of an index build as the worst paper grows",
        "",
        f"Command: `python experiments/bench_worst_paper.py --sizes {args.sizes} --threads {args.threads}"
        + (f" --model {args.model}" if args.model else "") + "`",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; model: "
        + (args.model or "tiny random BERT (hidden 32, 2 layers, 128 positions)")
        + f"; corpus: 200 ordinary papers + one worst paper; {args.threads} thread(s); peak RSS of a fresh child process.",
        "",
        "| worst paper shape | worst paper chars | mode | worst paper | peak RSS (MB) | build (s) |",
        "|---|---:|---|---|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['shape']} | {r['size']:,} | {r['mode']} | error: {r['error'][:60]} | | |")
            continue
        status = "none" if r["size"] == 0 else "indexed" if r["worst_indexed"] else f"rejected: {r['reason'][:70]}"
        lines.append(f"| {r['shape']} | {r['size']:,} | {r['mode']} | {status} | {r['peak_rss_mb']:.0f} | {r['seconds']:.1f} |")
    save(args.out, lines, rows)


def save(out: Path, lines: list[str], rows: list[dict]) -> None:
    """The table as `out` (markdown) and the rows beside it as JSON."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
