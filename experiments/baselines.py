"""CSFCube baseline table: pretrained minilm / mpnet under each scorer, beside SPECTER's published row.

    python experiments/baselines.py run --models minilm mpnet     # encode once per mode (cached), score, save
    python experiments/baselines.py table                         # experiments/results/baselines.md

Every row is one `python -m aspire.evaluate csfcube ...` command (printed in the table); `run` calls the
same function in-process and keeps each row's results.json under experiments/results/baselines/.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aspire.benchmarks import csfcube  # noqa: E402
from aspire.evaluate.csfcube import run_csfcube  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "csfcube"
RESULTS = REPO / "experiments" / "results" / "baselines"
# sentence-transformers pipelines of these models: word-piece limit, and a final Normalize layer
ST_MAX_LENGTH = {"minilm": 256, "mpnet": 384}

ROWS = {
    # key: (label, encoding, scorer, scorer options, whether the ST pipeline's limit/normalisation apply)
    "independent-minl2": ("(a) sentences encoded independently, min-L2", "independent", "minl2", {}, True),
    "contextual-minl2": ("(b) contextual sentences, min-L2", "contextual", "minl2", {}, False),
    "contextual-ot-tau0.5": ("(c) contextual sentences, OT tau=0.5", "contextual", "ot", {"tau": 0.5}, False),
    "contextual-ot-tau5000": ("(c) contextual sentences, OT tau=5000", "contextual", "ot", {"tau": 5000.0}, False),
    "abstract": ("(d) whole-abstract vector (title + abstract), cosine", "abstract", "abstract", {}, True),
}
# SPECTER's published row (data README / CSFCube paper), MAP / NDCG%20
SPECTER = {"background": (43.95, 66.70), "method": (22.44, 37.41), "result": (36.79, 56.67), "all": (34.23, 53.28)}


REFERENCE = """Reference figures these rows are checked against (test protocol, MAP / NDCG%20, all):
all-MiniLM-L6-v2 whole-abstract vector 39.28 / 59.50 (background 51.98 / 71.69, method 25.38 / 45.29,
result 41.18 / 62.31); all-mpnet-base-v2 whole-abstract vector 41.52 / 62.15 (background 54.18 / 73.99,
method 29.06 / 48.47, result 42.02 / 64.68); all-MiniLM-L6-v2 on independently encoded sentences
31.51 / 54.28.
"""


NOTES = """Notes:
- Contextual rows: one pass over `title [SEP] abstract` (the encoder's defaults: the model's word-piece
  limit, overflow windows for the 41 longer abstracts), vectors not normalised; OT with the scorer's
  default eps = 0.05. The query is the facet's sentences only, encoded in the whole abstract's context.
- Rows (a) and (d) follow the sentence-transformers pipelines (word-piece limit 256 / 384, vectors
  L2-normalised); row (d) encodes the one string "title abstract". Both minilm rows reproduce their
  references to 0.01: (a) 31.51 / 54.28 and (d) 39.28 / 59.50 with every facet. Encoding (title,
  abstract) as a text pair instead (the abstract in segment 1) gives 39.03 / 59.51.
- The mpnet whole-abstract row reproduces its reference to 0.01 on every facet (41.52 / 62.15). Its contextual
  rows read vectors encoded once by the first contextual command (4,722 s wall; the whole-abstract encoding
  took 6,938 s, the independent sentences 8,798 s): all on the shared 2-core machine, paused for other benchmarks in between, so these are not
  speed figures (mpnet costs about 8x minilm to encode).
- Untrained, mpnet's contextual sentences match its whole-abstract vector (min-L2 41.29 / 63.15), unlike
  MiniLM's; OT temperatures and fusions are in mpnet_sentence_matching.md.
"""


def row_settings(model: str, key: str) -> tuple[dict, list[str]]:
    """(run_csfcube keyword arguments but the cache and batch size, the equivalent CLI command)."""
    _, encoding, scorer, opts, st_pipeline = ROWS[key]
    encode_options = {"max_length": ST_MAX_LENGTH[model], "normalize": True} if st_pipeline else {}
    if scorer == "abstract":
        encode_options["joiner"] = " "  # one string "title abstract", as sentence-transformers' encode sees it
    exp = f"{model}-{key}"
    cmd = ["python", "-m", "aspire.evaluate", "csfcube", "--model", model, "--scorer", scorer]
    if scorer != "abstract":
        cmd += ["--encoding", encoding]
    for k, v in opts.items():
        cmd += [f"--{k}", f"{v:g}"]
    if encode_options:
        cmd += ["--max-length", str(encode_options["max_length"]), "--normalize"]
    if "joiner" in encode_options:
        cmd += ["--joiner", encode_options["joiner"]]
    cmd += ["--exp", exp, "--out", f"runs/csfcube/{exp}"]
    kwargs = dict(model=model, scorer=scorer, exp=exp, encoding=encoding if scorer != "abstract" else "contextual",
                  scorer_options=opts, encode_options=encode_options)
    return kwargs, cmd


def run_row(out: str, model: str, scorer: str, exp: str, cache_dir, batch_size: int, **options) -> dict:
    from aspire.evaluate.options import EvalOptions

    return run_csfcube(DATA, model, scorer, out, exp, EvalOptions(cache_dir=cache_dir, batch_size=batch_size, **options))


def run(models: list[str], rows: list[str], cache_dir: str | None, batch_size: int) -> None:
    from aspire.evaluate.cache import default_cache_dir

    RESULTS.mkdir(parents=True, exist_ok=True)
    for model in models:
        for key in rows:
            kwargs, cmd = row_settings(model, key)
            with tempfile.TemporaryDirectory() as tmp:
                res = run_row(tmp, cache_dir=cache_dir or default_cache_dir(), batch_size=batch_size, **kwargs)
            res["command"] = shlex.join(cmd)
            (RESULTS / f"{model}-{key}.json").write_text(json.dumps(res, indent=1))
            print(f"{model:7s} {key:24s} {csfcube.format_table(res)}  timings {res['timings_s']}", flush=True)


def table(models: list[str]) -> str:
    groups = csfcube.GROUPS
    head = "| model | setting | " + " | ".join(f"{g} MAP / NDCG%20" for g in groups) + " |"
    lines = [head, "|" + "---|" * (2 + len(groups))]
    lines.append("| SPECTER | published row (= the shipped ranked pools, re-scored here) | "
                 + " | ".join(f"{SPECTER[g][0]:.2f} / {SPECTER[g][1]:.2f}" for g in groups) + " |")
    commands = []
    for model in models:
        for key, (label, *_rest) in ROWS.items():
            path = RESULTS / f"{model}-{key}.json"
            _, cmd = row_settings(model, key)
            if not path.is_file():
                lines.append(f"| {model} | {label} | " + " | ".join("not run" for _ in groups) + " |")
                commands.append(f"- {model} {label}: `{shlex.join(cmd)}` (not run yet)")
                continue
            res = json.loads(path.read_text())
            t = res["test"]
            lines.append(f"| {model} | {label} | "
                         + " | ".join(f"{t[g]['MAP']:.2f} / {t[g]['NDCG%20']:.2f}" for g in groups) + " |")
            tm = res["timings_s"]
            enc = "read from cache" if tm["encode_from_cache"] else f"encode {tm['encode']:.0f} s wall"
            commands.append(f"- {model} {label}: `{res['command']}` ({enc}, score {tm['score']:.0f} s wall)")
    return "\n".join(lines) + "\n\nCommands (from the repository root):\n\n" + "\n".join(commands) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("run")
    pr.add_argument("--models", nargs="+", default=["minilm", "mpnet"], choices=sorted(ST_MAX_LENGTH))
    pr.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    pr.add_argument("--cache-dir")
    pr.add_argument("--batch-size", type=int, default=32)
    pt = sub.add_parser("table")
    pt.add_argument("--models", nargs="+", default=["minilm", "mpnet"], choices=sorted(ST_MAX_LENGTH))
    args = parser.parse_args()
    if args.cmd == "run":
        run(args.models, args.rows, args.cache_dir, args.batch_size)
    else:
        text = table(args.models)
        (REPO / "experiments" / "results" / "baselines.md").write_text(
            "# CSFCube baselines (test protocol: mean of the two folds; MAP and NDCG%20 in percent)\n\n"
            + text + "\n" + REFERENCE + "\n" + NOTES
        )
        print(text)


if __name__ == "__main__":
    main()
