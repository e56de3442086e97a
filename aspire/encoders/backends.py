"""Inference backends for the contextual sentence encoder: the exact torch model, torch in bfloat16, ONNX
Runtime, or OpenVINO.

`load_encoder(name, backend="torch" | "onnx" | "openvino", quantize=None | "bf16" | "int8")` swaps only the transformer's
forward pass (word pieces -> `last_hidden_state`, (R, T, D)). Tokenisation, the windows of long abstracts and
the mean pooling of word pieces per sentence stay in torch, in `ContextualSentenceEncoder`, unchanged (in
fp32: the fast forwards return fp32 hidden states); no exported graph holds the sentence pooling. A fast
forward (`GroupedRows`) runs a batch's rows in length groups, without computing padding; the int8 graph runs
every row alone (`onnx_transformer`), so that a paper's vectors do not depend on the papers encoded with it.
Elsewhere the groups move a vector by rounding only (MiniLM, 32 CSFCube abstracts of 434-2,817 characters, batch
size 1 vs 32, max abs difference: ONNX Runtime fp32 0, OpenVINO f32 6e-7 as the exact model's own; bf16 one bf16
step, 3e-3 to 4e-3, sentence cosine >= 0.99997, a third to a half of bf16's distance to the exact vectors).

- `backend="torch", quantize="bf16"` (`Bf16Transformer`): a bfloat16 copy of the model, on the model's
  device. On CPUs with AMX or AVX512-BF16 oneDNN computes its matrix products natively (about 3x the fp32
  forward of all-MiniLM-L6-v2 on a 2-core Sapphire Rapids; sentence cosine to the exact vectors >= 0.9999,
  experiments/results/bench_backends_bf16.md); elsewhere bf16 is emulated and slow (a warning says so).
- `backend="openvino"` (`OpenVinoTransformer`; needs `pip install openvino`): the plain ONNX export compiled
  by OpenVINO's CPU plugin at f32, or with `quantize="bf16"` at bf16 inference precision (OpenVINO keeps
  what it judges sensitive, e.g. normalisation, in fp32). The fastest path measured on the 2-core Sapphire
  Rapids, and the one whose speed held under load (its own thread pool; torch's OpenMP threads lose their
  time to other jobs): experiments/results/bench_backends_bf16.md.
- `backend="onnx"`: ONNX Runtime on the CPU, the plain export (fp32: differs from the exact model by the
  runtime's arithmetic only), or the int8 recipe (`quantize="int8"`, `aspire.encoders.onnx_int8`): an
  eager-attention export fused by ONNX Runtime's transformer optimizer; attention and MatMul weights int8
  per output channel with activations quantized per tensor at run time, but the feed-forward output
  projections fp32. One row a session run (the rows side by side, a thread each), as a scale is per run.

OpenVINO's compiled model is cached too, under `$ASPIRE_CACHE/openvino/` (OpenVINO's own model cache).
The exported graph (ONNX Runtime's, and OpenVINO's input) is cached under `$ASPIRE_CACHE/onnx/` (default
`~/.cache/aspire/onnx/`), keyed by the exact encoder's fingerprint, the opset and the int8 recipe's name. It is
written to a temporary file and renamed into place, so an interrupted export is never read back, and its size and
SHA-256 are recorded beside it (`FILE.sha256`): a cached file that differs from its record, or has none, is
exported again with a warning. The record also holds a hash of every field of the model's config
(`config_digest`), wider than the fingerprint's list (`aspire.encoders.identity`), so a model whose config.json
changed is exported again rather than run on the old config's graph (a record written before the hash was kept says
nothing, and its file is used). For an adapted model the hash covers its active adapter's peft settings too
(`model_digest`): LoRA's scale (alpha / r), DoRA, IA3's feed-forward modules are folded into the graph but are no
weights (a changed `lora_alpha` once ran the old alpha's graph: tiny BERT, alpha 8 -> 32, vectors 0.43 from the
exact model's, under one version-1 fingerprint). A fast encoder's fingerprint adds the
backend's tag (`torch-bf16`; for ONNX Runtime and OpenVINO the precision and a hash of the graph, and `/per-row` for
the int8 graph run one row a session run) to the exact one's, so vector caches and indexes keyed by it never mix exact
and fast vectors, nor vectors of two precisions, nor int8 vectors of length groups and of single rows.
The fast backends are for inference only: training keeps the exact model (`backend="torch"`, no quantize).

Loading from the cache (`load_recorded`): the first load of a model on ONNX Runtime or OpenVINO builds the exact
torch model (its weights give the fingerprint, the export is made from it) and writes a load record under
`$ASPIRE_CACHE/onnx/loads/` (`load_record_path`), keyed by what that load read: the model's folders (every file's
name, size and modification time), the settings given, the backend and precision, the versions of torch,
transformers and tokenizers, and the code of `aspire.encoders`. A later load with the same key reads the record
and builds only what inference needs: the tokenizer (the Rust tokenizer the first load saved,
`aspire.encoders.recorded_tokenizer`; transformers' own class for a model with control codes), the cached graph
(checked against its SHA-256) and the fingerprint the record holds, the one the first load computed, so indexes
and vector caches keyed by it accept the encoder. No torch model is built and transformers is not imported (a
one-off `aspire search`: 0.6 s instead of 5 s for the model). Anything that does not match (no record, a changed
file, another precision on this CPU) loads the exact model as before.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import logging
import os
import tempfile
import threading
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from aspire.encoders import onnx_int8, recorded_tokenizer
from aspire.encoders.contextual import ContextualSentenceEncoder
from aspire.encoders.identity import config_digest, versioned
from aspire.encoders.pretrained import read_settings, resolve_checkpoint, resolve_model
from aspire.io import write_text
from aspire.paths import cache_root
from aspire.storage import check_record, on_disk_full, record_path, recorded, remove_cache_file, write_record

log = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "openvino")
QUANTIZATIONS = {"torch": ("bf16",), "onnx": ("int8",), "openvino": ("bf16",)}  # backend -> its reduced precisions (None: fp32)
OPSET = 17
RUNTIME_CACHE_CAPACITY = 200  # input shapes whose kernels OpenVINO's CPU plugin keeps (`openvino_compiled`)
INT8_RECIPE = onnx_int8.RECIPE  # names the cached int8 file
LOAD_RECORD_VERSION = 2  # `load_record`'s format (2: with the version-1 fingerprint, `legacy_fingerprint`)
PER_ROW_TAG = "/per-row"  # the int8 backend's tag suffix: one row a session run (`onnx_transformer`)
CONFIG_KEY = "config_sha256"  # the exported graph's record entry holding its model's `model_digest`


class _LastHiddenState(nn.Module):
    """The transformer as a function of tensors -> last_hidden_state, the form `torch.onnx.export` traces."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state


@dataclass
class HiddenStates:
    """A fast forward's output: what `ContextualSentenceEncoder` reads of a transformers model's (without importing
    transformers, which a load from a record never needs)."""

    last_hidden_state: Tensor  # (R, T, D) float32


def _takes_token_types(model: nn.Module) -> bool:
    """Whether the transformer reads token_type_ids; an adapted model (peft's `forward(*args, **kwargs)`) passes
    them on to its base model, which is asked."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "token_type_ids" in inspect.signature(base.forward).parameters


def export_onnx(model: nn.Module, path: Path) -> None:
    """Export `model`'s forward (input_ids, attention_mask[, token_type_ids]) -> last_hidden_state to `path`,
    batch and sequence axes dynamic. The example batch holds padding, so the traced graph keeps the mask. An
    adapted model (peft) is exported with its active adapter folded into the weights (`adapters.merged`, on a
    copy): the same function as a plain graph, as fast as its base's (the LoRA branch's extra products gone). The
    graph is fp32 (as its file name says): a model whose weights are another float dtype (a checkpoint saved in fp16
    or bf16, which transformers 5 loads in that dtype) is exported from an fp32 copy; its fp16 graph failed to load
    in ONNX Runtime and OpenVINO (LayerNormalization's inputs bound to float and float16)."""
    if hasattr(model, "merge_and_unload"):
        from aspire.encoders.adapters import merged

        model = merged(model)
    if any(p.is_floating_point() and p.dtype != torch.float32 for p in [*model.parameters(), *model.buffers()]):
        model = copy.deepcopy(model).float()
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 2, 0, 0]])  # (2, 5), ids in any vocabulary
    mask = (ids != 0).long()
    args = (ids, mask, torch.zeros_like(ids)) if _takes_token_types(model) else (ids, mask)
    names = ["input_ids", "attention_mask", "token_type_ids"][: len(args)]
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]}
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
        # the tracer warns that shape checks become constants; tests check padded batches of other shapes
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # the attention mask's advanced indexing becomes Gather arithmetic, wrong for negative indices: its
        # indices are aranges, never negative (tests/test_search_batch_onnx.py runs the graph and checks each)
        warnings.filterwarnings("ignore", message=r"Exporting aten::index operator of advanced indexing",
                                category=UserWarning)
        torch.onnx.export(
            _LastHiddenState(model).eval(), args, str(path), input_names=names, output_names=["last_hidden_state"],
            dynamic_axes=axes, opset_version=OPSET, dynamo=False,
        )


def quantize_int8(model: nn.Module, dst: Path) -> None:
    """The int8 graph of `model` at `dst` (`aspire.encoders.onnx_int8`): an export with eager attention (on
    a copy; the model itself is left as it is), ONNX Runtime's transformer fusions, int8 weights per
    channel but for the feed-forward output projections (fp32)."""
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")  # the SDPA export hides attention from the fusion
    with tempfile.TemporaryDirectory(dir=dst.parent, prefix=".export-") as tmp:
        raw = Path(tmp) / "eager.onnx"
        export_onnx(eager, raw)
        onnx_int8.build_int8(raw, dst, model.config)


def model_digest(model: nn.Module) -> str:
    """`config_digest` of the transformer `model` as `export_onnx` folds it: with its active adapter's peft settings
    for an adapted (peft) model, whose scale (alpha / r, rsLoRA), DoRA or IA3 feed-forward modules the graph computes;
    every field but the naming ones, wider than the fingerprint's list (`aspire.encoders.identity`)."""
    adapter = model.peft_config[model.active_adapter] if hasattr(model, "merge_and_unload") else None
    return config_digest(model.config, adapter)


def onnx_model_path(fingerprint: str, quantize: str | None) -> Path:
    """Where the export of the exact encoder with `fingerprint` is cached."""
    variant = f"{quantize}-{INT8_RECIPE}" if quantize else "fp32"
    return cache_root() / "onnx" / f"{fingerprint}-opset{OPSET}-{variant}.onnx"


def _write_atomically(path: Path, write, extra: dict | None = None) -> Path:
    """`write(tmp_path)`, record its size and SHA-256 beside `path`, with `extra` (`aspire.storage.write_record`), then
    rename the temporary file to `path` (same folder, so the rename is atomic). The record goes first: another process
    loading the model in between found the graph without its record, removed it as unrecorded, and this export then
    failed with a FileNotFoundError (the record made of a file no longer there). A disk that fills up is one
    DiskFullError naming the folder; the temporary file is removed on any failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # made by `write` as any file is (the umask's mode): mkstemp's owner-only 0o600 stayed on the graph, which the
    # other users of a shared cache could then not read (each warned, removed it and exported again)
    tmp = str(path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"))
    try:
        with on_disk_full(path.parent, f"the exported model {path.name}"):
            write(Path(tmp))
            write_record(path, extra, source=tmp)
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def cached_onnx_model(encoder: ContextualSentenceEncoder, quantize: str | None, fingerprint: str | None = None) -> Path:
    """The ONNX file of `encoder`'s transformer (exported, and quantized, on first use; then read back). `fingerprint`:
    `encoder.fingerprint()` where the caller has it (it hashes every weight; `load_encoder` hashes them once for this
    and the load record), else it is computed here.

    A cached file is used only when it matches the size and SHA-256 recorded when it was written and was exported
    for a model of the same config and adapter settings (`model_digest`, in that record), in fp32 (`_graph_problem`);
    else one warning says why and it is exported again (a cache is never trusted)."""
    path = onnx_model_path(encoder.fingerprint() if fingerprint is None else fingerprint, quantize)
    config = model_digest(encoder.model)
    if path.is_file():
        problem = check_record(path)
        if problem is None:
            problem = _graph_problem(path, encoder.model, config)
        if problem is None:
            log.info("reading cached ONNX model %s", path)
            return path
        log.warning("exported model %s is not used, %s: exporting it again", path, problem)
        remove_cache_file(path)
    build = quantize_int8 if quantize == "int8" else export_onnx
    log.info("exporting %s to ONNX%s (%s)", encoder.name or "the encoder",
             " and quantizing it to int8" if quantize == "int8" else "", path)
    return _write_atomically(path, lambda tmp: build(encoder.model, tmp), {CONFIG_KEY: config})


def _graph_problem(path: Path, model: nn.Module, config: str) -> str | None:
    """Why the graph at `path` does not fit `model`, whose config hashes to `config` (`model_digest`), or None: its
    record says it was exported for another config, it leaves out the token types the model reads (exports of
    adapted models made before their base's inputs were asked), or it holds fp16 or bf16 weights (exports of such
    models made before `export_onnx` exported them in fp32: ONNX Runtime and OpenVINO refused them)."""
    import onnx

    made_for = recorded(path, CONFIG_KEY)
    if made_for is not None and made_for != config:
        return (f"it was exported for a model config (and adapter settings) hashing to {made_for}, this model's hashes "
                f"to {config}")
    graph = onnx.load(str(path), load_external_data=False).graph
    inputs = [i.name for i in graph.input]
    if _takes_token_types(model) and "token_type_ids" not in inputs:
        return f"its inputs {inputs} leave out the token_type_ids the model reads"
    half = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    if any(weights.data_type in half for weights in graph.initializer):  # its output still says FLOAT
        return "it holds float16 or bfloat16 weights, not FLOAT (fp32) ones"
    return None


def length_groups(lengths: list[int], slack: float = 0.05) -> list[list[int]]:
    """Row positions grouped by length, longest first, so that padding every row of a group to its first
    (longest) row adds at most `slack` times the group's real word pieces."""
    groups: list[list[int]] = []
    real = 0
    for r in sorted(range(len(lengths)), key=lambda r: -lengths[r]):
        if groups and lengths[groups[-1][0]] * (len(groups[-1]) + 1) <= (1 + slack) * (real + lengths[r]):
            groups[-1].append(r)
            real += lengths[r]
        else:
            groups.append([r])
            real = lengths[r]
    return groups


class GroupedRows(nn.Module):
    """Stands in for a Hugging Face encoder inside `ContextualSentenceEncoder`: the same call, the
    `last_hidden_state` (fp32) computed by a fast runtime (`run_rows`, one per backend).

    No padding is computed: the rows of a right-padded batch are run in `length_groups`, each cut to its
    longest row, and positions past a row's length come back as zeros (pooling never reads them). With
    `per_row`, every row is run alone (a group of one, cut to its length), for a runtime whose result for a row
    depends on the rows run with it (the int8 graph's per-run activation scales, `onnx_transformer`).
    The exact torch model is kept (`exact`) for its config and weights: the encoder's fingerprint hashes
    them together with `backend_tag`, and `save_pretrained` saves the exact weights. Loaded from a load
    record (`model=None`), it has no weights: `config` gives the few fields encoding reads
    (`RecordedConfig`), the record the fingerprint.
    """

    slack = 0.05  # `length_groups`' padding bound
    per_row = False  # run each row alone (no length groups)
    cpu_only = True  # the runtime reads and writes CPU memory

    def __init__(self, model: nn.Module | None, backend_tag: str, config=None) -> None:
        super().__init__()
        self.exact = None if model is None else model.eval()
        self.config = model.config if config is None else config
        self.backend_tag = backend_tag
        super().train(False)

    def run_rows(self, feed: dict[str, Tensor]) -> Tensor:
        """input_ids, attention_mask, token_type_ids (r, n) of rows n long -> last_hidden_state (r, n, D) float32."""
        raise NotImplementedError

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> HiddenStates:
        if self.cpu_only and input_ids.device.type != "cpu":
            raise ValueError(f"the {self.backend_tag} backend runs on the CPU; inputs are on {input_ids.device}")
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        if token_type_ids is None:
            given["token_type_ids"] = torch.zeros_like(input_ids)  # what the torch model assumes
        lengths = attention_mask.sum(1)  # (R,)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        if not torch.equal(attention_mask.bool(), positions < lengths[:, None]):
            raise ValueError(f"the {self.backend_tag} backend needs right-padded batches (tokenizer padding_side='right')")
        hidden = input_ids.new_zeros(*input_ids.shape, self.config.hidden_size, dtype=torch.float32)  # (R, T, D)
        if self.per_row:  # longest first: rows run side by side (`OnnxTransformer.streams`) end together
            groups = [[r] for r in sorted(range(len(lengths)), key=lambda r: -int(lengths[r]))]
        else:
            groups = length_groups(lengths.tolist(), self.slack)
        feeds = [{name: given[name][rows, : int(lengths[rows[0]])] for name in given} for rows in groups]
        for rows, out in zip(groups, self.run_groups(feeds)):
            hidden[rows, : out.shape[1]] = out  # (len(rows), n, D)
        return HiddenStates(last_hidden_state=hidden)

    def run_groups(self, feeds: list[dict[str, Tensor]]) -> list[Tensor]:
        """`run_rows` of every feed, in order (one after another; a runtime with streams overrides this)."""
        return [self.run_rows(feed) for feed in feeds]

    def save_pretrained(self, path, **kwargs) -> None:
        if self.exact is None:
            raise ValueError(f"this {self.backend_tag} encoder was loaded from its cached export, without the "
                             "torch weights: load the model with backend='torch' to save it")
        self.exact.save_pretrained(path, **kwargs)


class OnnxTransformer(GroupedRows):
    """The transformer's forward in an ONNX Runtime session on the CPU (`GroupedRows`). `streams` > 1: a batch's
    groups run side by side, that many session runs at a time (Python threads; ONNX Runtime lets go of the GIL),
    each on the session's own threads (`onnx_transformer` gives an int8 graph's sessions one thread each)."""

    def __init__(self, model: nn.Module | None, session, backend_tag: str, config=None, streams: int = 1) -> None:
        super().__init__(model, backend_tag, config)
        self.session = session
        self.streams = streams
        self.input_names = [i.name for i in session.get_inputs()]

    def run_rows(self, feed: dict[str, Tensor]) -> Tensor:
        (out,) = self.session.run(["last_hidden_state"], {name: feed[name].numpy() for name in self.input_names})
        return torch.from_numpy(out)

    def run_groups(self, feeds: list[dict[str, Tensor]]) -> list[Tensor]:
        if self.streams == 1 or len(feeds) <= 1:
            return super().run_groups(feeds)
        with ThreadPoolExecutor(min(self.streams, len(feeds))) as pool:
            return list(pool.map(self.run_rows, feeds))  # in order


class Bf16Transformer(GroupedRows):
    """The transformer's forward in torch with bfloat16 weights and activations (`GroupedRows`): a bf16 copy
    of the exact model, on the exact model's device. On CPUs with AMX or AVX512-BF16 oneDNN runs its matrix
    products natively; the hidden states come back as fp32, so sentence pooling sums in fp32."""

    cpu_only = False

    def __init__(self, model: nn.Module, backend_tag: str) -> None:
        super().__init__(model, backend_tag)
        self.bf16 = copy.deepcopy(model).to(torch.bfloat16).eval()
        self.takes_token_types = _takes_token_types(model)

    def run_rows(self, feed: dict[str, Tensor]) -> Tensor:
        if not self.takes_token_types:
            feed = {k: v for k, v in feed.items() if k != "token_type_ids"}
        return self.bf16(**feed).last_hidden_state.float()


class OpenVinoTransformer(GroupedRows):
    """The transformer's forward compiled by OpenVINO's CPU plugin from the plain ONNX export (`GroupedRows`).

    `compiled` has one stream per thread (`openvino_compiled`): a batch's length groups run side by side, one
    group a stream, each stream on one thread. No thread waits on another inside a matrix product, so the speed
    holds when other jobs share the cores (a 2-thread stream lost 2-3x of its speed there)."""

    def __init__(self, model: nn.Module | None, compiled, backend_tag: str, config=None) -> None:
        import openvino

        super().__init__(model, backend_tag, config)
        self.queue = openvino.AsyncInferQueue(compiled, int(compiled.get_property("NUM_STREAMS")))
        self.input_names = [port.get_any_name() for port in compiled.inputs]
        self._lock = threading.Lock()  # one run at a time: `wait_all` waits on every request of the shared queue
        self.queue.set_callback(self._keep)

    @staticmethod
    def _keep(request, userdata: tuple[dict[int, Tensor], int]) -> None:
        done, index = userdata  # this run's results (threads sharing the encoder once read each other's)
        done[index] = torch.from_numpy(request.get_output_tensor(0).data.copy())  # the request reuses its buffer

    def run_groups(self, feeds: list[dict[str, Tensor]]) -> list[Tensor]:
        """`run_rows` of every feed, in order, side by side on the streams; one call at a time (a thread waits)."""
        done: dict[int, Tensor] = {}
        with self._lock:
            try:
                for index, feed in enumerate(feeds):
                    self.queue.start_async({name: feed[name].numpy() for name in self.input_names}, (done, index))
            finally:  # a failed start leaves no request running into the next call
                self.queue.wait_all()
        return [done.pop(index) for index in range(len(feeds))]

    def run_rows(self, feed: dict[str, Tensor]) -> Tensor:
        return self.run_groups([feed])[0]


class InferenceEncoder(ContextualSentenceEncoder):
    """A `ContextualSentenceEncoder` over a fast backend: the same encoding methods; `train()` refuses.
    `recorded_fingerprint`, `recorded_legacy`: the fingerprints a load record holds (`load_record`), for an encoder
    without weights, and `recorded_settings` the settings it was recorded with."""

    recorded_fingerprint: str | None = None
    recorded_legacy: str | None = None  # the version-1 fingerprint recorded beside it
    recorded_settings: dict | None = None

    def train(self, mode: bool = True) -> InferenceEncoder:
        if mode:
            raise RuntimeError(f"the {self.model.backend_tag} backend is for inference only; train the exact model (backend='torch', quantize=None)")
        return super().train(False)

    def fingerprints(self) -> tuple[str, str]:
        """The exact model's fingerprints (current, version 1); for an encoder loaded from its load record (no
        weights to hash), the ones recorded, and while its settings differ from the recorded ones (another control
        code in force, `using_code`; a changed `max_length`), hashes of them and the settings in force: the vector
        cache and the index once took such an encoder's vectors under one code for another's."""
        if self.recorded_fingerprint is None:
            return super().fingerprints()
        now = self.settings()
        if now == self.recorded_settings:
            return self.recorded_fingerprint, self.recorded_legacy
        settings = json.dumps(now, sort_keys=True)
        return (versioned(hashlib.sha256(f"{self.recorded_fingerprint}/{settings}".encode()).hexdigest()),
                hashlib.sha256(f"{self.recorded_legacy}/{settings}".encode()).hexdigest()[:16])

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self.model.cpu_only else super().device


@dataclass(frozen=True)
class RecordedConfig:
    """The fields of a transformer's config that encoding reads (`ContextualSentenceEncoder`), from a load record."""

    model_type: str
    hidden_size: int
    max_position_embeddings: int


def _model_dirs(name_or_path: str | Path) -> tuple[Path, Path]:
    """(the model's folder, the folder of its weights and tokenizer: the base's for an adapter model), as
    `ContextualSentenceEncoder.from_pretrained` reads them."""
    path = resolve_model(name_or_path)
    return path, ContextualSentenceEncoder.weights_folder(path, read_settings(path), {})


def load_record_path(name_or_path: str | Path, backend: str, quantize: str | None, settings: dict,
                     dirs: tuple[Path, Path] | None = None) -> Path:
    """Where the load record of this model, backend, precision and settings lives (see the module's doc): a hash
    of everything the exact load reads, so that a changed file or version gives another record. `dirs`: the model's
    folders (`_model_dirs`), when the caller has them."""
    digest = hashlib.sha256()
    given = {"model": str(name_or_path), "backend": backend, "quantize": quantize, "settings": settings,
             "version": LOAD_RECORD_VERSION}
    digest.update(json.dumps(given, sort_keys=True, default=str).encode())
    for package in ("torch", "transformers", "tokenizers"):
        digest.update(f"{package}={importlib.metadata.version(package)}".encode())
    for code in sorted(Path(__file__).parent.glob("*.py")):  # how weights become vectors and a fingerprint
        digest.update(code.name.encode() + code.read_bytes())
    for folder in dict.fromkeys(dirs or _model_dirs(name_or_path)):
        digest.update(str(folder.resolve()).encode())
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                stat = file.stat()
                digest.update(f"{file.relative_to(folder)}/{stat.st_size}/{stat.st_mtime_ns}".encode())
    return cache_root() / "onnx" / "loads" / f"{digest.hexdigest()[:24]}.json"


def write_load_record(record: Path, encoder: InferenceEncoder, exact_fingerprint: str, graph: Path,
                      tokenizer_dir: Path) -> None:
    """Record what a later load of the same model needs (`load_recorded`), with `exact_fingerprint`, the exact torch
    encoder's fingerprint; a record that cannot be written is a warning (the next load builds the torch model again),
    never a failed load."""
    tokenizer = type(encoder.tokenizer)
    config = encoder.model.config  # the exact model's (`GroupedRows`)
    fingerprint, legacy = encoder.fingerprints()
    content = {
        "version": LOAD_RECORD_VERSION, "name": encoder.name, "fingerprint": fingerprint, "legacy_fingerprint": legacy,
        "exact_fingerprint": exact_fingerprint, "backend_tag": encoder.model.backend_tag, "graph": graph.name,
        "tokenizer": {"class": f"{tokenizer.__module__}:{tokenizer.__qualname__}", "dir": str(tokenizer_dir),
                      "size": len(encoder.tokenizer),
                      # the Rust tokenizer itself, when it encodes as transformers does (no control codes)
                      "recorded": None if encoder.codes else recorded_tokenizer.record_spec(encoder.tokenizer)},
        "config": asdict(RecordedConfig(config.model_type, config.hidden_size,
                                        getattr(config, "max_position_embeddings", 512))),
        "settings": encoder.settings(),
    }
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        write_text(record, json.dumps(content, indent=1) + "\n")
    except OSError as err:
        log.warning("could not write the load record %s (%s): the next load builds the torch model again", record, err)


def _recorded_tokenizer(spec: dict):
    """The tokenizer a load record holds (`aspire.encoders.recorded_tokenizer`: no transformers import), else the
    class it names (as `AutoTokenizer` chose it) from its folder."""
    if spec.get("recorded"):
        tokenizer = recorded_tokenizer.rebuild(spec["recorded"])
    else:
        module, _, qualname = spec["class"].partition(":")
        tokenizer = getattr(importlib.import_module(module), qualname).from_pretrained(spec["dir"])
    if len(tokenizer) != spec["size"]:
        raise ValueError(f"the tokenizer holds {len(tokenizer)} tokens, the record {spec['size']}")
    return tokenizer


def load_recorded(record: Path, backend: str, quantize: str | None) -> InferenceEncoder | None:
    """The fast encoder a load record describes, without the torch model (see the module's doc), or None when
    there is no usable record (the reason logged): the caller loads the exact model instead."""
    if not record.is_file():
        log.debug("no load record %s: loading the torch model", record)
        return None
    try:
        content = json.loads(record.read_text(encoding="utf-8"))
        if content.get("version") != LOAD_RECORD_VERSION:
            raise ValueError(f"format {content.get('version')}, not {LOAD_RECORD_VERSION}")
        graph = cache_root() / "onnx" / content["graph"]
        if not graph.is_file():
            raise ValueError(f"its graph {graph} is gone")
        problem = check_record(graph)
        if problem is not None:
            raise ValueError(f"its graph {graph.name} is not used, {problem}")
        digest = json.loads(record_path(graph).read_text(encoding="utf-8"))["sha256"][:12]  # `file_digest`'s
        config = RecordedConfig(**content["config"])
        tokenizer = _recorded_tokenizer(content["tokenizer"])
        if backend == "openvino":
            compiled, precision = openvino_compiled(graph, quantize or "f32")
            fast = OpenVinoTransformer(None, compiled, f"openvino-{precision}-{digest}", config)
        else:
            fast = onnx_transformer(None, graph, digest, quantize, config)
        if fast.backend_tag != content["backend_tag"]:
            raise ValueError(f"this load gives backend {fast.backend_tag}, the record {content['backend_tag']}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError) as err:
        log.info("load record %s not used (%s): loading the torch model", record.name, err)
        return None
    encoder = InferenceEncoder(fast, tokenizer, name=content["name"], **content["settings"])
    encoder.recorded_fingerprint, encoder.recorded_legacy = content["fingerprint"], content["legacy_fingerprint"]
    encoder.recorded_settings = encoder.settings()
    log.debug("loaded %s on %s from its cached export (fingerprint %s)", content["name"], fast.backend_tag,
             encoder.recorded_fingerprint)
    return encoder


def file_digest(path: Path) -> str:
    """A short hash of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def onnx_session(path: Path, threads: int | None = None):
    """An ONNX Runtime CPU session on `path` using `threads` threads (default torch's thread count,
    `OMP_NUM_THREADS`), one graph node at a time, all of ONNX Runtime's graph optimizations (the defaults,
    stated)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_transformer(model: nn.Module | None, graph: Path, digest: str, quantize: str | None,
                     config=None) -> OnnxTransformer:
    """The ONNX Runtime forward of the exported `graph` (`digest`: a hash of its bytes), tagged
    `onnx-opset17-fp32-<digest>` or, for `quantize="int8"`, `onnx-opset17-int8-<recipe>-<digest>/per-row`.

    The int8 graph quantizes its activations with one scale per tensor per session run (`aspire.encoders.onnx_int8`),
    so in length groups a row's vector depended on the rows run with it (MiniLM, CSFCube: sentence cosine 0.994
    between batch sizes 1 and 32). It runs each row alone (`GroupedRows.per_row`): a row's vector is the same in
    every batch (and, on 24 of the abstracts, closer to the exact ones: min sentence cosine 0.9949, 0.9928 in
    length groups). The rows run side by side, one single-thread session run a thread, as many at a time as
    torch's threads: MiniLM on 200
    CSFCube abstracts, 2 threads of a 2-core AMD EPYC, 0.89-1.00x the time of length groups on a 2-thread session
    when the CPU was otherwise idle, 0.7-0.8x while other jobs ran; one row at a time on the 2-thread session
    took 1.1-1.3x. The tag's `/per-row` keeps vectors and indexes made in length groups (tagged without it) apart
    from these."""
    tag = f"onnx-opset{graph.stem.rpartition('-opset')[2]}-{digest}"  # the name but the fingerprint (`onnx_model_path`)
    if quantize != "int8":
        return OnnxTransformer(model, onnx_session(graph), tag, config)
    fast = OnnxTransformer(model, onnx_session(graph, threads=1), f"{tag}{PER_ROW_TAG}", config,
                           streams=torch.get_num_threads())
    fast.per_row = True
    return fast


def openvino_compiled(path: Path, precision: str):
    """OpenVINO's CPU plugin compiled from the ONNX file `path` at inference `precision` ("f32" or "bf16", set
    explicitly: OpenVINO's default is bf16 on CPUs with AMX), with one single-thread stream for each of
    torch's threads (`OpenVinoTransformer` runs length groups side by side). Returns (compiled model, the
    precision it runs at: a CPU without bf16 runs f32)."""
    try:
        import openvino
    except ImportError as err:
        raise ImportError("the openvino backend needs OpenVINO: pip install openvino (or aspire[openvino])") from err
    threads = torch.get_num_threads()
    core = openvino.Core()
    compiled = core.compile_model(str(path), "CPU", {
        # the compiled model is cached on disk (keyed by OpenVINO on the graph, these settings and the CPU): a later
        # process imports it instead of compiling again (the one-off `aspire search` and the demo's second model)
        "CACHE_DIR": str(cache_root() / "openvino"),
        "INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": threads,
        "PERFORMANCE_HINT": "THROUGHPUT",
        # the plugin keeps kernels for every input shape it meets (default: 5,000 of them), and a corpus's length
        # groups are thousands of shapes: 2.26 GB peak over 2,000 ACL abstracts, still growing; 200 kept: 1.54 GB,
        # flat, about as fast (experiments/results/search_batch.md)
        "CPU_RUNTIME_CACHE_CAPACITY": RUNTIME_CACHE_CAPACITY,
    })
    actual = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    if actual != precision:
        log.warning("OpenVINO runs at %s on this CPU, not %s (no native bf16)", actual, precision)
    return compiled, actual


def bf16_is_native() -> bool:
    """Whether this CPU computes bfloat16 matrix products natively (AVX512-BF16 or AMX; oneDNN's check)."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def load_encoder(
    name_or_path: str | Path = "minilm", device: str | torch.device | None = None, *, backend: str = "torch",
    quantize: str | None = None, **settings,
) -> ContextualSentenceEncoder:
    """`minilm` (default), `mpnet`, or a local Hugging Face directory -> ContextualSentenceEncoder on `device`.

    `backend="torch"` (default) is the exact model, with `quantize="bf16"` its forward in bfloat16
    (`Bf16Transformer`, on `device`). `"onnx"` runs the transformer in ONNX Runtime, with `quantize="int8"`
    for dynamic int8 weights; `"openvino"` in OpenVINO at f32, with `quantize="bf16"` at bf16 precision; both
    on the CPU (`device` None or "cpu"). bf16 is fast only on CPUs with AMX or AVX512-BF16. `settings` are
    the encoder's (see `ContextualSentenceEncoder`). A training run's folder loads its best (else latest) checkpoint,
    which the encoder's `loaded_checkpoint` names (from the one read of the run's pointer that picked the weights).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown encoder backend {backend!r}; valid: {list(BACKENDS)}")
    if quantize is not None and quantize not in QUANTIZATIONS[backend]:
        valid = ", ".join(f"{q!r} (backend={b!r})" for b, qs in QUANTIZATIONS.items() for q in qs)
        raise ValueError(f"quantize={quantize!r} does not go with backend={backend!r}; valid: {valid} or None")
    if backend != "torch" and device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"the {backend} backend runs on the CPU; got device {str(device)!r}")
    folder, loaded = resolve_checkpoint(name_or_path)
    saved = read_settings(folder)  # read once: the checks, the load record and the load all use it
    # a setting the encoder does not take (in the settings file or the keywords) or a missing base, named before
    # a load record is read
    dirs = folder, ContextualSentenceEncoder.weights_folder(folder, saved, settings, "load_encoder's keywords")
    record = None
    if backend != "torch":  # an exported graph: a load record may spare building the torch model
        record = load_record_path(name_or_path, backend, quantize, settings, dirs)
        recorded = load_recorded(record, backend, quantize)
        if recorded is not None:
            recorded.loaded_checkpoint = loaded
            return recorded
    exact = ContextualSentenceEncoder.from_folder(folder, saved, str(name_or_path), settings,
                                                  "load_encoder's keywords")  # its tokenizer's files checked
    exact.loaded_checkpoint = loaded
    if device is not None:
        exact = exact.to(device)
    if quantize is None and backend == "torch":
        return exact
    if exact.adapter_scope == "query":
        raise ValueError(f"{name_or_path}: a model with a query adapter runs on the exact torch backend only "
                         f"(got backend={backend!r}, quantize={quantize!r}): the fast backends compile one encoding")
    if backend == "torch":  # quantize="bf16"
        if exact.device.type == "cpu" and not bf16_is_native():
            log.warning("this CPU has no native bfloat16 (AVX512-BF16 or AMX): --quantize bf16 will be slow")
        # an adapted model's bf16 vectors before its token types were passed on carried "torch-bf16": another tag
        fast = Bf16Transformer(exact.model, "torch-bf16/segments" if hasattr(exact.model, "get_base_model") else "torch-bf16")
    else:  # an exported graph, named by the exact fingerprint: the weights hashed once, for it and the load record
        exact_fingerprint = exact.fingerprint()
        path = cached_onnx_model(exact, quantize if backend == "onnx" else None, exact_fingerprint)
        if backend == "openvino":
            compiled, precision = openvino_compiled(path, quantize or "f32")
            fast = OpenVinoTransformer(exact.model, compiled, f"openvino-{precision}-{file_digest(path)}")
        else:
            fast = onnx_transformer(exact.model, path, file_digest(path), quantize)
    encoder = InferenceEncoder(fast, exact.tokenizer, name=exact.name, **exact.settings())
    encoder.loaded_checkpoint = loaded
    if record is not None:  # the fingerprints as the record keeps them: once its settings change (another code, a
        # `max_length`), this encoder and one loaded from the record hash them alike (they once differed)
        encoder.recorded_fingerprint, encoder.recorded_legacy = encoder.fingerprints()
        encoder.recorded_settings = encoder.settings()
        write_load_record(record, encoder, exact_fingerprint, path, dirs[1])
    return encoder
