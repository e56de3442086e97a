"""Where things live: the shared data root and the cache root, named once.

- `DATA`: the real data sets (`../shared/data` beside the clone; see its README). Commands take it as a
  default for their `--data` options; nothing under `aspire/` spells the path again.
- `cache_root()`: `$ASPIRE_CACHE`, else `~/.cache/aspire`; models, vectors, sentence splits and exported
  graphs each keep a sub-folder of it.
- A training run's folder, as `aspire.train.checkpoint` writes it: `RUN/checkpoint-000120/model/` (the model in
  Hugging Face format) and the pointers `RUN/latest`, `RUN/best` (JSON {"checkpoint": "checkpoint-000120", ...}).
  `run_model(RUN)` is the model a run folder stands for (`aspire.encoders.pretrained.resolve_model` takes one, or
  one of its pointers: `RUN/best`, `RUN/latest` stand for the checkpoint each names).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from aspire.io import NonFiniteConstant, loads_unique

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def cache_root() -> Path:
    """`$ASPIRE_CACHE`, else `~/.cache/aspire` (read at call time, so tests may point it elsewhere). A `~` in it is the
    home folder, as a shell would expand it (a quoted `"~/big/cache"`, a Dockerfile's ENV or a systemd unit pass it
    unexpanded, and the cache went into a folder named `~` under the working folder)."""
    return Path(os.environ.get("ASPIRE_CACHE") or Path.home() / ".cache" / "aspire").expanduser()


LATEST, BEST, STATE_FILE, MODEL_DIR = "latest", "best", "trainer_state.pt", "model"  # a training run's folder
CHECKPOINT = re.compile(r"^checkpoint-\d{6,}$")  # six digits at least: `checkpoint_name(1_000_000)` has seven


def run_model(run_dir: str | Path) -> Path | None:
    """The model folder of a training run's `best` checkpoint (the lowest dev loss), else of its `latest`; None
    when `run_dir` has neither pointer. ValueError naming the pointer when it is not a run's pointer (a bare `NaN` /
    `Infinity`, which `aspire.train.checkpoint.write_pointer` never writes and `read_pointer` refuses, or a key
    twice, is such damage), or names a checkpoint without a model."""
    found = run_pointer(run_dir)
    return None if found is None else found[2]


def run_pointer(run_dir: str | Path, names: tuple[str, ...] = (BEST, LATEST)) -> tuple[str, dict, Path] | None:
    """(the pointer `run_model` follows, `best` else `latest` (the first of `names` there); its JSON record; the model
    folder it names), None when `run_dir` has none of them; ValueError as `run_model` gives it."""
    for name in names:
        pointer = Path(run_dir) / name
        if not pointer.is_file():
            continue
        try:
            record = loads_unique(pointer.read_text(encoding="utf-8"), finite=True)
            checkpoint = record["checkpoint"]
        except NonFiniteConstant as err:
            raise ValueError(f"{pointer}: not a training run's pointer: a bare {err.constant}, which is not JSON "
                             "(`write_pointer` refuses a non-finite number)") from None
        except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested too deeply
            raise ValueError(f"{pointer}: not a training run's pointer (JSON naming its checkpoint)") from None
        model = Path(run_dir) / str(checkpoint) / MODEL_DIR
        if not (isinstance(checkpoint, str) and CHECKPOINT.match(checkpoint)) or not (model / "config.json").is_file():
            raise ValueError(f"{pointer} names {checkpoint!r}, which holds no {MODEL_DIR}/config.json")
        return name, record, model
    return None


def model_folder(path: str | Path) -> Path:
    """`path` (a leading `~` is the home folder, as `resolve_model` reads it), or where a training run's folder keeps
    the model it stands for (`run_model`): for code that reads a model folder's own files (its document_model.json,
    say) rather than loading it through `resolve_model`, so that both read the same folder."""
    path = Path(path).expanduser()
    if (path / "config.json").is_file():  # a model folder loads as itself, run pointers beside it or not
        return path
    if is_pointer_file(path):  # `RUN/best`, `RUN/latest`: the checkpoint that pointer names
        return run_pointer(path.parent, (path.name,))[2]
    return run_model(path) or path


def is_pointer_file(path: str | Path) -> bool:
    """Whether `path` is a training run's pointer file (`RUN/best`, `RUN/latest`), which stands for the checkpoint it
    names: the form users type for a run's best weights (`--model runs/X/best`)."""
    path = Path(path)
    return path.name in (BEST, LATEST) and path.is_file()
