"""The int8 recipe of the ONNX backend: a fused transformer graph with int8 weights.

`backends.quantize_int8` exports the transformer with eager attention (the SDPA export hides the
attention pattern behind NaN guards that ONNX Runtime's fusion does not recognise); `build_int8` here then
1. fuses it with ONNX Runtime's transformer optimizer (`onnxruntime.transformers.optimizer`, model type
   "bert", Python fusions only): embeddings + LayerNorm, attention, bias + GELU, residual + LayerNorm
   become one contrib op each (`EmbedLayerNormalization`, `Attention`, `BiasGelu`, `SkipLayerNormalization`);
2. quantizes the weights of the attention (-> `QAttention`) and of every MatMul but the feed-forward
   output projections (`down_projections`, left fp32) dynamically (`quantize_dynamic`: int8 weights per
   output channel, activations quantized per tensor at run time). A recipe quantizing the output
   projections (and the embeddings) so too lost 0.47 CSFCube MAP on MiniLM.

An activation's scale is one per tensor: over every row of a session run, padding positions included. Run in the
length groups of `backends.GroupedRows`, a sentence's int8 vector depended on the papers encoded with it:
all-MiniLM-L6-v2 on 24 CSFCube abstracts, sentence cosine between batch size 1 and 24 min 0.9953, about the int8
error itself (min 0.9966 to the exact vectors). The backend therefore runs the int8 graph one row a session run
(`backends.onnx_transformer`, its tag ending `/per-row`): the vectors are the same at every batch size.

`matmul_nbits` (8-bit block weights, int8 compute with activations quantized per block) is not part of the
recipe: on the output projections it kept the sentence cosines but moved CSFCube MAP by +0.78 and NDCG%20
by -0.35 (outside the 0.3-point bar), and everywhere it ran slower than the dynamic int8 kernels on the
2-core AMD EPYC measured. It stays for `experiments/screen_int8_recipes.py`
(experiments/results/bench_backends_shared.md, every recipe tried). Where the fusion finds no pattern
(another architecture) the graph keeps its MatMuls, quantized the same way. Measured on MiniLM and the
tests' tiny BERT; on MPNet (all-mpnet-base-v2) it exports and runs, with sentence cosines to the exact
vectors of min 0.9912 / median 0.9951 over 106 sentences of 16 CSFCube abstracts (speed and CSFCube not
measured there; experiments/results/bench_backends_shared.md).
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from pathlib import Path

import numpy as np

BITS, BLOCK = 8, 32
RECIPE = "fused-qatt-pc"  # names the cached int8 file: change it whenever this recipe changes
# quantize_dynamic's advice (a root-logger warning, two wordings across versions) to run its pre-processing, which this
# recipe replaces by `fuse`: nothing a user of `aspire encode` or `index build` can act on (it showed even under
# --quiet), so `build_int8` drops it (`without_preprocess_advice`)
PREPROCESS_ADVICE = re.compile(r"Please consider (to run )?pre-processing before quantization")

log = logging.getLogger(__name__)


def fuse(src: Path, dst: Path, config) -> dict[str, int]:
    """ONNX Runtime's BERT fusions on `src` -> `dst`; returns how many of each fused op it made."""
    from onnxruntime.transformers import optimizer

    fused = optimizer.optimize_model(
        str(src), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size,
        opt_level=0,  # Python fusions only: the saved graph stays portable, the session optimizes the rest
    )
    fused.save_model_to_file(str(dst))
    return {op: n for op, n in fused.get_fused_operator_statistics().items() if n}


def block_quantize(weight: np.ndarray, bits: int = BITS, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """A MatMul weight (K, N) -> MatMulNBits' packed weight (N, ceil(K / block), block * bits / 8) uint8 and
    scales (N * ceil(K / block),): symmetric, the stored value is round(w / scale) + 2**(bits-1) (the
    op's default zero point), K padded with zeros to whole blocks. `block` must be a power of two >= 16, the only
    block sizes ONNX Runtime's MatMulNBits loads (another one once wrote a graph no session could open, and an odd
    block at 4 bits failed with a numpy broadcast error). A weight that is not 2-D, or holds NaN or inf, is a
    ValueError (an inf made its block's scale inf: every other weight of the block was stored as 0, silently)."""
    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 16 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 16 (MatMulNBits' block_size), got {block!r}")
    if np.ndim(weight) != 2:
        raise ValueError(f"block_quantize: weight must be 2-D (K, N), got shape {np.shape(weight)}")
    if not np.isfinite(weight).all():
        raise ValueError(f"block_quantize: weight {np.shape(weight)} holds {int((~np.isfinite(weight)).sum())} "
                         "NaN or inf value(s); int8 blocks need finite weights")
    k, n = weight.shape
    blocks = -(-k // block)
    w = np.pad(weight.T.astype(np.float32), ((0, 0), (0, blocks * block - k))).reshape(n, blocks, block)
    qmax = 2 ** (bits - 1) - 1
    scale = np.abs(w).max(-1) / qmax  # (N, blocks)
    scale[scale == 0] = 1.0
    q = (np.clip(np.rint(w / scale[..., None]), -qmax - 1, qmax) + 2 ** (bits - 1)).astype(np.uint8)
    if bits == 4:  # two values a byte, the first in the low nibble
        q = q[..., 0::2] | (q[..., 1::2] << 4)
    return q, scale.reshape(-1).astype(np.float32)


def matmul_nbits(src: Path, dst: Path, bits: int = BITS, block: int = BLOCK) -> int:
    """Every MatMul of `src` whose second input is a constant 2-D weight -> MatMulNBits (`block_quantize`,
    accuracy_level 4: int8 compute); written to `dst`. A weight several MatMuls read is quantized once (one packed
    initializer, not one of the same name per reader). Returns how many MatMuls were replaced."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    weights = {t.name: t for t in graph.initializer if len(t.dims) == 2}
    nodes, replaced, count = [], {}, 0  # replaced: weight name -> (packed name, scales name, K, N)
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in weights:
            nodes.append(node)
            continue
        if node.input[1] not in replaced:
            w = numpy_helper.to_array(weights[node.input[1]])  # (K, N)
            try:
                q, scale = block_quantize(w, bits, block)
            except ValueError as err:
                raise ValueError(f"matmul_nbits: initializer {node.input[1]!r} of MatMul {node.name!r}: {err}") from None
            q_name, s_name = f"{node.input[1]}_q{bits}", f"{node.input[1]}_scales"
            graph.initializer.extend([numpy_helper.from_array(q, q_name), numpy_helper.from_array(scale, s_name)])
            replaced[node.input[1]] = (q_name, s_name, *w.shape)
        q_name, s_name, k, n = replaced[node.input[1]]
        nodes.append(helper.make_node(
            "MatMulNBits", [node.input[0], q_name, s_name], list(node.output), name=f"{node.name}_nbits",
            domain="com.microsoft", K=k, N=n, bits=bits, block_size=block, accuracy_level=4,
        ))
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    still_read = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name not in replaced or t.name in still_read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(dst))
    return count


def down_projections(path: Path) -> list[str]:
    """MatMul nodes whose constant weight narrows the width: the feed-forward output (intermediate -> hidden)."""
    import onnx

    graph = onnx.load(str(path)).graph
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    return [
        node.name for node in graph.node
        if node.op_type == "MatMul" and len(shape := shapes.get(node.input[1], ())) == 2 and shape[0] > shape[1]
    ]


def _not_advice(record: logging.LogRecord) -> bool:
    """A root-logger filter: False (dropped) for ONNX Runtime's pre-processing advice (`PREPROCESS_ADVICE`) alone."""
    return not (record.name == "root" and PREPROCESS_ADVICE.match(record.getMessage()))


@contextlib.contextmanager
def without_preprocess_advice():
    """Within the block, the root logger drops `PREPROCESS_ADVICE` (`build_int8` says at DEBUG that it quantizes
    without that pre-processing); every other record, ONNX Runtime's other warnings too, passes as before."""
    root = logging.getLogger()
    root.addFilter(_not_advice)
    try:
        yield
    finally:
        root.removeFilter(_not_advice)


def build_int8(raw: Path, dst: Path, config) -> None:
    """The int8 graph at `dst` from `raw`, an eager-attention export of a Hugging Face encoder with `config`:
    `fuse`, then dynamic int8 but for the `down_projections`. The fused graph lives in a temporary folder
    beside `dst`."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=dst.parent, prefix=".int8-") as tmp:
        fused = Path(tmp) / "fused.onnx"
        fuse(raw, fused, config)
        log.debug("quantizing the fused graph without ONNX Runtime's pre-processing (the fusion stands for it)")
        with without_preprocess_advice():
            quantize_dynamic(
                str(fused), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                op_types_to_quantize=["MatMul", "Attention"], nodes_to_exclude=down_projections(fused),
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # shape inference misses some outputs
            )
