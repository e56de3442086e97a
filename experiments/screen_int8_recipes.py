"""Screen ONNX int8 recipes for all-MiniLM-L6-v2: time ONNX Runtime's forward alone, interleaved, and the
cosine of each recipe's sentence vectors to the exact torch ones.

The feeds are what `encode` gives the session: the first N CSFCube abstracts, longest first, batches of 32,
each batch's rows in `length_groups` cut to their longest row. Every repetition runs every recipe once
(interleaved, so machine load hits all alike); the table gives the minimum and the median over the
repetitions and the ratio of the previous recipe's minimum to each one's. Only the session is timed:
tokenisation and pooling (about 13% of `encode` with int8, cProfile) are the same for every recipe.

    python experiments/screen_int8_recipes.py [--limit 100] [--reps 5] [--only "fused,current"]

Recipes ("raw": the default SDPA export; "fused": an eager-attention export fused by ONNX Runtime's
transformer optimizer; "dyn": `quantize_dynamic`, int8 weights per output channel, activations per tensor;
"excl-down": the feed-forward output projections left out; "+QAtt": the fused attention quantized too;
"nbitsB bK": MatMulNBits, B-bit weights in blocks of K, activations int8 per block):
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import onnx
import torch

from aspire.data import Paper
from aspire.encoders import load_encoder
from aspire.encoders.backends import (
    InferenceEncoder,
    OnnxTransformer,
    cached_onnx_model,
    export_onnx,
    length_groups,
    onnx_session,
)
from aspire.encoders.onnx_int8 import down_projections, fuse, matmul_nbits

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "csfcube" / "abstracts-csfcube-preds.jsonl"
RESULTS = Path(__file__).resolve().parent / "results"


def dynamic(src, dst, exclude_down=True, ops=("MatMul",)):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=list(ops),
                     nodes_to_exclude=down_projections(src) if exclude_down else [],
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return dst


def nbits(src, dst, bits=8, block=32):
    matmul_nbits(src, dst, bits, block)
    return dst


def recipes(raw: Path, fused: Path, tmp: Path) -> dict:
    """name -> a function building that recipe's graph (a path) from the raw and the fused fp32 exports."""
    return {
        "raw fp32": lambda: raw,
        "raw dyn excl-down (previous recipe mm-pc-r2)": lambda: dynamic(raw, tmp / "a.onnx"),
        "raw dyn all": lambda: dynamic(raw, tmp / "b.onnx", exclude_down=False),
        "fused fp32": lambda: fused,
        "fused dyn excl-down, attention fp32": lambda: dynamic(fused, tmp / "c.onnx"),
        "fused dyn excl-down +QAtt (committed recipe fused-qatt-pc)":
            lambda: dynamic(fused, tmp / "d.onnx", ops=("MatMul", "Attention")),
        "fused dyn all +QAtt": lambda: dynamic(fused, tmp / "e.onnx", exclude_down=False, ops=("MatMul", "Attention")),
        "fused dyn excl-down +QAtt, down nbits8 b32 (dropped: CSFCube)":
            lambda: nbits(dynamic(fused, tmp / "f0.onnx", ops=("MatMul", "Attention")), tmp / "f.onnx"),
        "raw nbits8 b32": lambda: nbits(raw, tmp / "g.onnx"),
        "raw nbits8 b128": lambda: nbits(raw, tmp / "h.onnx", block=128),
        "raw nbits4 b32": lambda: nbits(raw, tmp / "i.onnx", bits=4),
        "fused nbits8 b16": lambda: nbits(fused, tmp / "j.onnx", block=16),
        "fused nbits8 b32": lambda: nbits(fused, tmp / "k.onnx"),
        "fused nbits8 b64": lambda: nbits(fused, tmp / "l.onnx", block=64),
        "fused nbits8 b128": lambda: nbits(fused, tmp / "m.onnx", block=128),
        "fused +QAtt, other MatMuls nbits8 b32":
            lambda: nbits(dynamic(fused, tmp / "n0.onnx", exclude_down=False, ops=("Attention",)), tmp / "n.onnx"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated substrings of recipe names (default all)")
    parser.add_argument("--out", type=Path, default=RESULTS / "screen_int8_recipes.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = [json.loads(line) for line in open(DATA, encoding="utf-8")][: args.limit]
    papers = [Paper(r["paper_id"], r["title"], r["abstract"]) for r in rows]
    exact = load_encoder("minilm")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        eager = copy.deepcopy(exact.model)
        eager.set_attn_implementation("eager")
        export_onnx(eager, tmp / "eager.onnx")
        print("fusions:", fuse(tmp / "eager.onnx", tmp / "fused.onnx", exact.model.config))
        wanted = [w for w in args.only.split(",") if w]
        build = {n: f for n, f in recipes(cached_onnx_model(exact, None), tmp / "fused.onnx", tmp).items()
                 if not wanted or any(w in n for w in wanted)}
        sessions = {name: onnx_session(f()) for name, f in build.items()}
    feeds = []
    order = sorted(range(len(papers)), key=lambda i: -(len(papers[i].title) + sum(map(len, papers[i].sentences))))
    for lo in range(0, len(papers), 32):
        inputs = exact.tokenize([papers[i] for i in order[lo : lo + 32]])
        lengths = inputs.attention_mask.sum(1)
        for rows_ in length_groups(lengths.tolist()):
            n = int(lengths[rows_[0]])
            feeds.append({"input_ids": inputs.input_ids[rows_, :n].numpy(),
                          "attention_mask": inputs.attention_mask[rows_, :n].numpy(),
                          "token_type_ids": inputs.token_type_ids[rows_, :n].numpy()})

    def run_all(session):
        names = [i.name for i in session.get_inputs()]
        for feed in feeds:
            session.run(["last_hidden_state"], {k: feed[k] for k in names})

    for session in sessions.values():
        run_all(session)  # warm-up
    times = {name: [] for name in sessions}
    load_before = os.getloadavg()
    for _ in range(args.reps):
        for name, session in sessions.items():
            start = time.perf_counter()
            run_all(session)
            times[name].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    want = exact.encode(papers, batch_size=32)
    base = next((min(t) for n, t in times.items() if "previous recipe" in n), None)
    out = {}
    print(f"load average before {load_before}, after {load_after}")
    print("| recipe | min s | median s | previous recipe / this | cosine min | cosine median |\n|---|---:|---:|---:|---:|---:|")
    for name, session in sessions.items():
        got = InferenceEncoder(OnnxTransformer(exact.model, session, name), exact.tokenizer, **exact.settings()).encode(
            papers, batch_size=32)
        cos = torch.nn.functional.cosine_similarity(want.emb[want.mask], got.emb[got.mask], dim=-1)
        out[name] = {"times_s": times[name], "cos_min": cos.min().item(), "cos_median": cos.median().item()}
        ratio = f"{base / min(times[name]):.2f}" if base else "-"
        print(f"| {name} | {min(times[name]):.2f} | {statistics.median(times[name]):.2f} | {ratio} | "
              f"{cos.min():.4f} | {cos.median():.5f} |")
    args.out.write_text(json.dumps({"papers": len(papers), "reps": args.reps, "load_before": load_before,
                                    "load_after": load_after, "recipes": out}, indent=2))


if __name__ == "__main__":
    main()
