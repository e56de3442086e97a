"""The main job on embedded defaults: encode CSFCube with `minilm` and evaluate it end to end.

    python -m aspire.demo [--model minilm] [--data ../shared/data/csfcube] [--out runs/demo] [--backend torch]

Encodes the 4,205 CSFCube abstracts once (one contextual pass a paper gives its sentence vectors and its
whole-abstract vector; cached), ranks every facet's pools with single match (min-L2), multi match (OT,
τ = 5000, ε = 0.05), the whole-abstract vector and the aspect hybrid (the whole vector plus the facet's
sentences against each candidate's whole vector), and prints the test-protocol MAP / NDCG%20 per facet beside
SPECTER's published row, and where each run's seconds went (model load, encoding, ranking, metrics). Then the
shipped aspect model (`--aspect-model`, default `aspire-minilm`: the hybrid trained here, a LoRA adapter over
minilm) gets its rows from one pass of its own: its hybrid (whole + facet, its one weighting) and its whole-abstract
vector; `--aspect-model none` leaves them out.

The encoder's backend is `--backend auto` by default (`aspire.encoders.choice`): OpenVINO at bf16 on a CPU
with AMX or AVX512-BF16 (the table within 0.3 MAP of the exact model's, experiments/results/first_minutes.md),
else the exact torch model; one line says which. `--backend torch` runs the exact model (what
`aspire evaluate` runs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from aspire.cliutil import (
    add_backend_options,
    add_common_options,
    backend_options,
    check_folder,
    check_folders,
    command_parser,
    run_command,
    setup_logging,
)
from aspire.encoders.choice import add_auto_backend_option, resolve_backend
from aspire.encoders.pretrained import ASPECT_MODEL, MODEL_HELP, check_model
from aspire.evaluate.cache import default_cache_dir
from aspire.paths import cache_root

REPO = Path(__file__).resolve().parents[1]
SPECTER = {"background": (43.95, 66.70), "method": (22.44, 37.41), "result": (36.79, 56.67), "all": (34.23, 53.28)}
RUNS = (  # label, scorer, its options, encoding: every row reads the one contextual pass
    ("contextual min-L2 (single match)", "minl2", {}, "contextual"),
    ("contextual OT, tau=5000 (multi match)", "ot", {"tau": 5000.0}, "contextual"),
    ("whole-abstract vector (same pass)", "abstract", {}, "pass"),
    ("aspect hybrid: whole + facet (same pass)", "hybrid", {}, "contextual"),
)
ASPECT_RUNS = (  # the shipped aspect model's rows: one contextual pass of its own
    ("aspect hybrid: whole + facet (same pass)", "hybrid", {}, "contextual"),
    ("whole-abstract vector (same pass)", "abstract", {}, "pass"),
)
EXAMPLES = """\
  aspire demo
  aspire demo --aspect-model none   # the untrained model's rows only (one encoding)
  aspire demo --model mpnet --out runs/demo-mpnet
  aspire demo --data ../shared/data/csfcube --device cuda --batch-size 64 --quiet
  aspire demo --backend torch   # the exact model, as aspire evaluate runs it
"""


def main(argv: list[str] | None = None, prog: str = "python -m aspire.demo") -> int:
    parser = command_parser(prog, __doc__, EXAMPLES)
    parser.add_argument("--model", default="minilm", help=MODEL_HELP)
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "csfcube"), help="CSFCube folder")
    parser.add_argument("--out", default=str(REPO / "runs" / "demo"),
                        help="results folder: each row's ranked pools and results.json in OUT/SCORER (the aspect "
                             "model's in OUT/aspect/SCORER)")
    parser.add_argument("--aspect-model", default=ASPECT_MODEL,
                        help=f"the aspect model whose rows follow (default {ASPECT_MODEL}, shipped; none: leave out)")
    parser.add_argument("--cache-dir", default=str(default_cache_dir()), help="sentence-vector cache")
    add_common_options(parser, device=True, batch_size=True, batch_size_default=32,
                       device_help="torch device for encoding and scoring (default: cpu, also where CUDA is "
                                   "available: its figures are the CPU's)")
    add_backend_options(parser)
    add_auto_backend_option(parser)
    args = parser.parse_args(argv)
    setup_logging(args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return run_command(lambda: _demo(args), args)


def _demo(args) -> int:
    from aspire.benchmarks.csfcube import missing_files  # torch-free

    if not Path(args.data).is_dir():
        print(f"error: CSFCube not found at {args.data} (see ../shared/data/README.md)", file=sys.stderr)
        return 2
    # before the first encoding: a cache folder that does not exist must be one that can be made (`/proc/x` once
    # failed after the model loaded); an existing one is read as it is, a write it refuses is a warning and the run
    # goes on uncached, as `aspire evaluate`'s (a shared read-only cache holding every vector was refused)
    if os.environ.get("ASPIRE_CACHE") and not cache_root().is_dir():  # exported graphs, compiled models, mpnet
        check_folder(cache_root(), "$ASPIRE_CACHE")
    if not Path(args.cache_dir).is_dir():
        check_folder(args.cache_dir, "--cache-dir")
    check_folders(out=args.out)
    for option, name in (("--model", args.model), ("--aspect-model", args.aspect_model)):  # before the first row
        if name != "none" or option == "--model":
            try:
                check_model(name)
            except ValueError as err:
                raise ValueError(f"{option}: {err}") from None
    missing = missing_files(args.data)
    if missing:  # once found after the model loaded and the first run's heading was printed
        print(f"error: --data {args.data} is not a CSFCube folder: it lacks {', '.join(missing)} (see "
              "../shared/data/README.md)", file=sys.stderr)
        return 2

    requested = args.backend, args.quantize  # the aspect model's backend is chosen for it from the same request
    args.backend, args.quantize, note = resolve_backend(args.backend, args.quantize, args.model, args.device)
    encoder_options = backend_options(args)
    if note:
        print(note, flush=True)
    from aspire.evaluate.csfcube import run_csfcube
    from aspire.evaluate.options import EvalOptions

    rows = [("SPECTER (published ranked pools)", SPECTER)]
    seconds = []
    models = [(args.model, RUNS, Path(args.out), encoder_options, f"{args.backend} {args.quantize or 'fp32'}")]
    if args.aspect_model != "none":
        backend, quantize, aspect_note = resolve_backend(*requested, args.aspect_model, args.device)
        if aspect_note and aspect_note != note:
            print(f"{args.aspect_model}: {aspect_note}", flush=True)
        aspect_options = backend_options(argparse.Namespace(backend=backend, quantize=quantize, device=args.device))
        models.append((args.aspect_model, ASPECT_RUNS, Path(args.out) / "aspect", aspect_options,
                       f"{backend} {quantize or 'fp32'}"))
    for model, runs, out_dir, options_of_model, _ in models:
        for label, scorer, options, encoding in runs:
            print(f"\n== {model} {label}: encoding (once, cached) and ranking CSFCube pools", flush=True)
            start = time.perf_counter()
            results = run_csfcube(args.data, model, scorer, out_dir / scorer, options=EvalOptions(
                encoding=encoding, scorer_options=options, cache_dir=args.cache_dir, batch_size=args.batch_size,
                device=args.device, encoder_options=options_of_model))
            seconds.append((f"{model} {label}", results.get("timings_s", {}), time.perf_counter() - start))
            rows.append((f"{model} {label}", {g: (results["test"][g]["MAP"], results["test"][g]["NDCG%20"])
                                              for g in SPECTER}))

    used = "; ".join(f"{model} on {backend}" for model, _, _, _, backend in models)
    print(f"\nCSFCube test protocol, MAP / NDCG%20 ({used}; each row's ranked pools and results.json under {args.out}/SCORER):\n")
    print("| model | background | method | result | all |")
    print("|---|---|---|---|---|")
    for name, vals in rows:
        print(f"| {name} | " + " | ".join(f"{vals[g][0]:.2f} / {vals[g][1]:.2f}" for g in SPECTER) + " |")
    print("\nseconds: model load / encoding / ranking / metrics and files / the run")
    for label, timings, total in seconds:
        parts = [timings.get(k, 0.0) for k in ("load_model", "encode", "score")]
        cached = " (read back)" if timings.get("encode_from_cache") else ""
        print(f"  {label}: {parts[0]:.1f} / {parts[1]:.1f}{cached} / {parts[2]:.1f} / {total - sum(parts):.1f} / {total:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
