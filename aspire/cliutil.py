"""What every `aspire` command shares: common options, one config-override form, quiet libraries,
and user errors reported as one line.

- Common options (`add_common_options`): `--device`, `--batch-size` where they apply, and everywhere
  `--quiet` (no progress bars or info messages) and `--log-level` (DEBUG also shows the traceback of
  an error).
- Config overrides have one form, `section.key=value`: the dotted path of the key in the command's
  YAML config (`train.lr=1e-5`, `index.kind=hnsw`, `search.rerank=ot`). `normalize_overrides` also
  reads two older forms, each with a one-line deprecation note on stderr: `--section.key=value`
  (once `python -m aspire.train`'s) and, for commands whose config is one section of a file (search
  and serve read the index's `search:` section), the bare `key=value`.
- `setup_logging` sends log records and progress bars to stderr (results go to stdout) and silences
  library noise: transformers' weight-loading bars and advisory warnings, Hugging Face hub bars,
  the tokenizers fork warning and spaCy's regex FutureWarning.
- `run_command` turns a user error (bad option value, missing file, bad JSON, unknown model or paper
  id, bad config key) into `error: <message>` on stderr and exit status 2, never a traceback; a command
  whose stdout reader went away (`aspire search ... | head`) stops quietly with status 141 (`aspire search` with
  `--run-out` stops printing instead and goes on to write its run file).
- `print_json`: what a command prints as JSON is strict JSON (`aspire.jsonsafe`: a NaN loss or metric is null,
  named under "non_finite"), as every file aspire writes.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib.util
import json
import logging
import math
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from aspire.jsonsafe import dumps
from aspire.storage import is_empty_folder

EXIT_USER_ERROR = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Help text keeps the layout of descriptions and epilogs (examples) and shows each option's
    default where it has a value and its help does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" not in text and action.default not in (None, False, argparse.SUPPRESS)
                and action.option_strings and action.nargs != 0):
            text += " (default: %(default)s)"
        return text


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)$")


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose error for a value outside an option's choices (a mistyped command, scorer or
    backend) names the nearest choice first: "invalid choice: 'serach'; did you mean 'search'? (choose from ...)".
    Subcommand parsers are of the same class."""

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but `section.key=value` items after an option (`-q train.max_steps=2`) still join the
        command's overrides: argparse takes positionals in one run, so it called them unrecognized arguments."""
        namespace, extra = self.parse_known_args(args, namespace)
        if extra and isinstance(getattr(namespace, "overrides", None), list) and all(
                "=" in item and not item.startswith("-") for item in extra):
            namespace.overrides += extra
        elif extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return namespace

    def error(self, message: str):
        found = _INVALID_CHOICE.search(message)
        if found:
            choices = re.findall(r"'([^']*)'", found["choices"])
            near = difflib.get_close_matches(found["given"], choices, n=1, cutoff=0.6)
            if near:
                message = (f"{message[:found.start()]}invalid choice: {found['given']!r}; did you mean {near[0]!r}? "
                           f"(choose from {found['choices']})")
        super().error(message)


def command_parser(prog: str, doc: str | None, examples: str, **kwargs) -> argparse.ArgumentParser:
    """An argparse parser whose description is the first line of `doc` and whose epilog lists `examples`."""
    purpose = (doc or "").strip().split("\n")[0]
    return Parser(prog=prog, description=purpose, epilog="examples:\n" + examples.rstrip(),
                  formatter_class=Formatter, allow_abbrev=False, **kwargs)


def _int_at_least(low: int, wording: str, name: str) -> Callable[[str], int]:
    """An argparse type: an integer >= `low`, else ArgumentTypeError "expected <wording>, got ..."."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wording}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {wording}, got {value}")
        return value

    parse.__name__ = name
    return parse


positive_int = _int_at_least(1, "a positive integer", "positive_int")  # argparse type: an integer >= 1
non_negative_int = _int_at_least(0, "an integer >= 0", "non_negative_int")  # >= 0, where 0 means "no limit"


def number_list(text: str) -> list[float]:
    """argparse type: comma-separated finite numbers, such as a fusion's weights ("0.3,0.7")."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected finite numbers, got {text!r}")
    return values


def on_cpu(device: str | None) -> bool:
    """Whether `device` (a --device value; None: the default, the CPU) names the CPU, as torch reads it: `cpu`,
    `cpu:0`."""
    return device is None or str(device).split(":", 1)[0] == "cpu"


def device_name(text: str) -> str:
    """argparse type: a torch device that exists here (`cpu`, `cuda`, `cuda:1`, `mps`, or another type whose torch module
    says it is available, such as `xpu`; `cpu:N` is `cpu`). A type torch parses but nothing runs on (`meta`) is refused."""
    if text == "cpu":
        return text  # always there: parsing it needs no torch
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"unknown device {text!r}; use cpu, cuda, cuda:N or mps") from None
    if device.type == "cpu":
        return "cpu"  # `cpu:N` is the same CPU: named one way, so the fast backends and vector caches see it
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise argparse.ArgumentTypeError(f"device {text!r}: no CUDA device is available here")
        if device.index is not None and device.index >= count:
            raise argparse.ArgumentTypeError(f"device {text!r}: only {count} CUDA device(s) here")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError(f"device {text!r}: MPS is not available here")
    if device.type not in ("cuda", "mps"):  # a type torch parses but no model runs on here (meta, xpu without one,
        # lazy, hpu, ...): it once passed, and the command failed with a traceback after the model had loaded
        backend = getattr(torch, device.type, None)
        available = getattr(backend, "is_available", None)
        if not callable(available) or not available():
            raise argparse.ArgumentTypeError(f"device {text!r}: no {device.type} device is available here; use cpu, "
                                             "cuda, cuda:N or mps")
    return text


def device_or_auto(text: str) -> str:
    """argparse type: `auto` (the trainer picks: the local GPU under torchrun when there is one) or a device."""
    if text == "auto":
        return text
    try:
        return device_name(text)
    except argparse.ArgumentTypeError as err:  # the list of devices names auto too, which this option takes
        raise argparse.ArgumentTypeError(str(err).replace("; use cpu,", "; use auto, cpu,")) from None


def log_level(text: str) -> str:
    """argparse type: a logging level name, any case."""
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.upper()


def add_common_options(parser: argparse.ArgumentParser, *, device: bool | Callable[[str], str] = False,
                       batch_size: bool = False,
                       device_help: str = "torch device (cpu, cuda, cuda:N, mps); default: cpu",
                       batch_size_help: str = "papers encoded per forward pass", batch_size_default: int | None = None,
                       ) -> None:
    """Add `--quiet` and `--log-level`, plus `--device` (checked by `device_name`, or by `device` when it
    is a function) and `--batch-size` when asked."""
    group = parser.add_argument_group("common options")
    if device:
        group.add_argument("--device", type=device if callable(device) else device_name, help=device_help)
    if batch_size:
        group.add_argument("--batch-size", type=positive_int, default=batch_size_default, help=batch_size_help)
    group.add_argument("-q", "--quiet", action="store_true",
                       help="no progress bars or info messages: only results, warnings and errors")
    group.add_argument("--log-level", type=log_level, default="INFO",
                       help="DEBUG, INFO, WARNING or ERROR; DEBUG also prints the traceback of an error")


def quiet_libraries() -> None:
    """Silence third-party noise. Environment variables are only defaults: a user's own settings win."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # also transformers' "Loading weights" bar
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # tokenizer length / advisory warnings
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the fork warning
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"spacy(\.|$)")
    if "transformers" in sys.modules:  # already imported: the environment is read only at import
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


class _TqdmHandler(logging.StreamHandler):
    """Writes log records with `tqdm.write`, so a message never lands in the middle of a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm.auto import tqdm

        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


def setup_logging(args: argparse.Namespace) -> None:
    """aspire's log records to stderr at `--log-level` (WARNING under `--quiet`), other libraries'
    from WARNING up (at DEBUG, theirs too), and quiet libraries."""
    quiet_libraries()
    level = "WARNING" if getattr(args, "quiet", False) and args.log_level in ("DEBUG", "INFO") else args.log_level
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _TqdmHandler):
            root.removeHandler(handler)
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    if level != "DEBUG":  # a library that sets its own logger to DEBUG at import (bm25s does) stays below WARNING
        handler.addFilter(lambda record: record.name.split(".")[0] == "aspire" or record.levelno >= logging.WARNING)
    root.addHandler(handler)
    root.setLevel("DEBUG" if level == "DEBUG" else max(logging.WARNING, logging.getLevelName(level)))
    logging.getLogger("aspire").setLevel(level)


def print_json(obj, **kwargs) -> None:
    """Print `obj` as strict JSON (`jsonsafe.dumps`; `kwargs` as `json.dumps` takes them) and flush."""
    print(dumps(obj, **kwargs), flush=True)


def show_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False)


def error_message(err: BaseException) -> str:
    """One line saying what went wrong, from an exception a user's input caused."""
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.strerror}: {err.filename}"
    if isinstance(err, json.JSONDecodeError):
        return f"invalid JSON: {err}"
    return str(err) or type(err).__name__


class MissingPackage(ImportError):
    """A package an option needs is not installed here (`missing_packages`): the user's setup, said in one line naming
    the package and its install, as a missing file is."""


# Exceptions that report a user's mistake (a file, a value, an id, a package not installed). Others are bugs: they keep
# their traceback.
USER_ERRORS = (ValueError, KeyError, OSError, MissingPackage)


def parse_and_run(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                  run: Callable[[argparse.Namespace], int], common: Sequence[argparse.ArgumentParser] = ()) -> int:
    """Add the common options to each parser of `common` (a command's subcommands), parse `argv`, set up
    logging and `run_command` the parsed `run(args)`."""
    for sub in common:
        add_common_options(sub)
    args = parser.parse_args(argv)
    setup_logging(args)
    return run_command(lambda: run(args), args)


def run_command(run: Callable[[], int], args: argparse.Namespace | None = None) -> int:
    """Call `run()`; a user error becomes one `error:` line on stderr and exit status 2.

    With `--log-level DEBUG` the exception propagates instead, traceback and all.
    """
    try:
        status = run()
        sys.stdout.flush()  # output still buffered meets a closed pipe here, not at interpreter exit
        return status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as err:
        if not stdout_reader_gone():
            if args is not None and getattr(args, "log_level", None) == "DEBUG":
                raise
            print(f"error: {error_message(err)}", file=sys.stderr)
            return EXIT_USER_ERROR
        # the reader of stdout went away (`aspire search ... | head`): stop quietly, as Unix tools do
        # (status 128 + SIGPIPE); stdout goes to /dev/null so the flush at exit cannot fail again
        silence_stdout()
        return EXIT_BROKEN_PIPE
    except USER_ERRORS as err:
        if args is not None and getattr(args, "log_level", None) == "DEBUG":
            raise
        print(f"error: {error_message(err)}", file=sys.stderr)
        return EXIT_USER_ERROR


def check_paths(**paths: str | None) -> None:
    """Each given path exists, file or folder (None and `-`, stdin, pass); FileNotFoundError naming the option
    otherwise (`query_file=...` is `--query-file`). Commands call it first, so that a wrong path is reported
    before torch, transformers or faiss are imported."""
    for name, path in paths.items():
        if path is not None and path != "-" and not os.path.exists(path):
            raise FileNotFoundError(2, f"No such file or directory (--{name.replace('_', '-')})", path)


def check_folders(**paths: str | None) -> None:
    """Each given path is a folder or can be made one (the nearest existing path at or above it is a folder):
    NotADirectoryError naming the option otherwise (`merge_into=...` is `--merge-into`; FileExistsError for a symbolic
    link to nothing, FileNotFoundError for an empty path; PermissionError, with the system's reason, where no folder can
    be made in it: read-only, not the user's to write, `/proc`), before any work (a file there once failed only when
    the first file was written, after the encoding)."""
    for name, path in paths.items():
        if path is not None:
            check_folder(path, f"--{name.replace('_', '-')}")


def check_folder(path: str | os.PathLike, option: str, write: bool = True) -> None:
    """`check_folders` of one path, its errors naming `option` as given (a config key: `train.out_dir`); `write` False
    for a folder the command only reads (`index merge --shards`): it must be a folder, not one the user may write."""
    if not str(path):  # Path("") is the current folder: an empty `--out "$UNSET"` once passed, and no folder
        # could be made there (os.makedirs("") fails) after the work
        raise FileNotFoundError(f"{option}: expected a folder path, got an empty string")
    _refuse_dangling_link(path, option)
    found = _nearest_existing(Path(path))
    if not found.is_dir():
        raise NotADirectoryError(f"{option} {path}" + ("" if found == Path(path) else f": {found}")
                                 + " is a file, not a folder")
    if not write:
        return
    try:  # a folder made and removed: a read-only or pseudo file system (`ASPIRE_CACHE=/proc/x`) or one the user may
        # not write once passed, and the first write failed after the work ("No such file or directory: /proc/x")
        os.rmdir(tempfile.mkdtemp(prefix=".aspire-probe-", dir=found))
    except OSError as err:
        where = "" if found == Path(path) else f" (in {found})"
        raise PermissionError(f"{option} {path}: no folder can be made there{where}: {err.strerror}") from None


def _refuse_dangling_link(path: str | os.PathLike, option: str) -> None:
    """FileExistsError naming `option` when `path` is a symbolic link to nothing: no folder can be made there (it
    once passed as a path still to be made, and the first write failed after the work)."""
    if os.path.islink(path) and not os.path.exists(path):
        raise FileExistsError(f"{option} {path} is a symbolic link to {os.readlink(path)}, which does not exist")


def _nearest_existing(path: Path) -> Path:
    """`path`, or the nearest folder above it, that exists (what the rest of `path` would be made in)."""
    return next(p for p in (path, *path.absolute().parents) if p.exists())


def input_file(path: str | Path, option: str) -> Path:
    """`path` when it is a file; OSError naming `option` when it is missing, empty or a folder."""
    if not str(path):  # Path("") is the current folder: it was called "a directory"
        raise FileNotFoundError(f"{option}: expected a file path, got an empty string")
    if Path(path).is_dir():
        raise IsADirectoryError(errno.EISDIR, f"Is a directory, not a file ({option})", str(path))
    if not Path(path).is_file():
        raise FileNotFoundError(errno.ENOENT, f"No such file or directory ({option})", str(path))
    return Path(path)


def input_folder(path: str | Path, option: str) -> Path:
    """`path` when it is a folder; OSError naming `option` when it is missing or not a folder (`input_file`'s twin)."""
    if not os.path.isdir(path):
        raise (NotADirectoryError(errno.ENOTDIR, f"Not a folder ({option})", str(path)) if os.path.exists(path)
               else FileNotFoundError(errno.ENOENT, f"No such folder ({option})", str(path)))
    return Path(path)


def file_path(text: str) -> str:
    """argparse type: a path that is not empty (an empty `--run-out "$UNSET"` would otherwise read as not given)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file path, got an empty string")
    return text


def check_out_file(path: str, option: str, **inputs: str | None) -> None:
    """An output file's check before any work: not a folder, not under a file (the nearest existing folder above it
    must be one: the rest is made), and not one of the command's `inputs` (named as `check_paths` names them), which
    writing it would replace. Raises OSError naming `option`."""
    out = Path(path)
    if out.is_dir():
        raise IsADirectoryError(errno.EISDIR, f"Is a directory, not a file ({option})", path)
    above = _nearest_existing(out.absolute().parent)
    if not above.is_dir():
        raise NotADirectoryError(f"{option} {path}: {above} is a file, not a folder")
    for name, given in inputs.items():
        if given not in (None, "-") and out.exists() and os.path.exists(given) and os.path.samefile(given, out):
            raise FileExistsError(f"{option} {path} is the --{name.replace('_', '-')} input, which writing it would "
                                  "replace; choose another file")


def check_fresh_out(out: str | os.PathLike) -> None:
    """A training command's first check of `--out`: a folder that does not exist yet (and can be made: the nearest
    existing path above it is a folder) or is empty passes; FileExistsError (NotADirectoryError under a file)
    otherwise, before any training. A run written into an earlier run's folder would replace its
    model and leave the files the new run does not write (a round, a checkpoint) beside the new ones, as
    `aspire train` refuses an `out_dir` that holds checkpoints."""
    if is_empty_folder(out):
        return
    if os.path.isdir(out):
        raise FileExistsError(f"--out {out} already holds an earlier run's files; choose another --out or "
                              "remove that folder first")
    if os.path.exists(out):
        raise FileExistsError(f"--out {out} is a file, not a folder")
    check_folders(out=out)  # under a file, or a link to nothing: it once passed, and the run failed at its first save


def silence_stdout() -> None:
    """Send stdout to /dev/null (after its reader went away), so later prints and the flush at exit cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has closed it (so a BrokenPipeError came from
    there, not from some other pipe the command wrote to). Where that cannot be told (no poll, no file
    descriptor), it says no: the error is then reported, never dropped."""
    try:
        import select

        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def normalize_overrides(items: Sequence[str], section: str | None = None) -> list[str]:
    """Config overrides in the form the config loader takes, from what the user typed.

    The one documented form is `section.key=value`. `--section.key=value` is read with a deprecation
    note. With `section` (the command reads only that section of a config file), `section.key=value`
    becomes `key=value` for the loader, and a bare `key=value` is read as `section.key=value` with a
    deprecation note. An item without `=`, or with an empty key (`=5`), raises ValueError naming it.
    """
    out = []
    for item in items:
        text = item
        if text.startswith("--"):
            text = text[2:]
            _deprecated(item, text)
        if "=" not in text:
            raise ValueError(f"config override {item!r} must look like section.key=value")
        key, value = text.split("=", 1)
        if not key.strip() or (section is not None and not key.removeprefix(section + ".").strip()):
            # `=5`, `search.=5`: once passed, and reached the config loader as a key named ""
            raise ValueError(f"config override {item!r} has an empty key; it must look like section.key=value")
        if section is not None:
            if key.startswith(section + "."):
                key = key[len(section) + 1 :]
            else:
                _deprecated(item, f"{section}.{key}={value}")
        out.append(f"{key}={value}")
    return out


def _deprecated(typed: str, canonical: str) -> None:
    print(f"note: override {typed!r} is read as {canonical!r}; write it that way "
          "(section.key=value), the old form will go", file=sys.stderr)


OVERRIDES_HELP = "config overrides, section.key=value (dotted keys of the command's YAML config)"


# backend -> its --quantize values: `aspire.encoders.backends.QUANTIZATIONS`, written out here so that parsing
# a command line does not import torch and transformers (tests/test_backends.py checks the two agree)
QUANTIZATIONS = {"torch": ("bf16",), "onnx": ("int8",), "openvino": ("bf16",)}
# backend -> the packages it needs beside torch (pyproject's extras of the same names): both fast backends run the
# graph `torch.onnx.export` writes, which needs `onnx` ("Module onnx is not installed!", a traceback, without it)
BACKEND_PACKAGES = {"torch": (), "onnx": ("onnxruntime", "onnx"), "openvino": ("openvino", "onnx")}


def missing_packages(backend: str) -> list[str]:
    """The packages of `BACKEND_PACKAGES[backend]` that are not installed here (found without importing them)."""
    return [name for name in BACKEND_PACKAGES.get(backend, ()) if importlib.util.find_spec(name) is None]


def install_hint(backend: str, missing: Sequence[str]) -> str:
    """`pip install onnx (or aspire[openvino])`: what installs the `missing` packages of `backend`."""
    return f"pip install {' '.join(missing)} (or aspire[{backend}])"


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """`--backend torch|onnx|openvino` and `--quantize bf16|int8`: the encoder's inference backend
    (`backend_options`)."""
    parser.add_argument("--backend", choices=tuple(QUANTIZATIONS), default="torch",
                        help="encoder inference: torch (the exact model, default), onnx (ONNX Runtime) or openvino "
                             "(OpenVINO), both on the CPU; a fast backend's vectors carry their own fingerprint")
    parser.add_argument("--quantize", choices=sorted({q for qs in QUANTIZATIONS.values() for q in qs}),
                        help="reduced precision, vectors with their own fingerprint: bf16 with --backend torch or "
                             "openvino (fast on CPUs with AMX or AVX512-BF16; --backend openvino --quantize bf16 is "
                             "the fastest measured), int8 with --backend onnx (dynamic int8 quantization)")


def code_option(code: str | None) -> dict:
    """The `load_encoder` keyword of a control-code option (`--code`, `--doc-code`): {} when not given (the
    model's own code), `code=None` for `none`, else that code."""
    if code is None:
        return {}
    return {"code": None if code == "none" else code}


def backend_options(args: argparse.Namespace, recorded_in: str | None = None) -> dict:
    """The `load_encoder` keywords of `--backend/--quantize` ({} for the exact torch model); `--quantize`
    with a backend it does not go with, or a fast backend with a non-CPU `--device`, raises ValueError, a fast backend
    whose packages are not installed (`missing_packages`) MissingPackage. `recorded_in`:
    what recorded `args.backend` when the user gave no --backend (`the index DIR`), named in those errors instead."""
    if args.quantize and args.quantize not in QUANTIZATIONS[args.backend]:
        needs = " or ".join(b for b, qs in QUANTIZATIONS.items() if args.quantize in qs)
        if recorded_in is not None:  # not a flag the user gave; another backend's vectors would not match
            raise ValueError(f"{recorded_in} records backend {args.backend}; --quantize {args.quantize} goes with "
                             f"--backend {needs}: leave out --quantize")
        raise ValueError(f"--quantize {args.quantize} goes with --backend {needs}")
    if args.backend == "torch":
        return {"quantize": args.quantize} if args.quantize else {}
    device = getattr(args, "device", None)
    if not on_cpu(device):
        if recorded_in is not None:  # not a flag the user gave
            raise ValueError(f"{recorded_in} records backend {args.backend}, which encodes on the CPU; got --device "
                             f"{device}: leave out --device")
        raise ValueError(f"--backend {args.backend} encodes on the CPU; got --device {device}")
    missing = missing_packages(args.backend)
    if missing:  # once a traceback from the export or the runtime's import, after the model had loaded
        needs = f"{recorded_in} records backend {args.backend}, which" if recorded_in else f"--backend {args.backend}"
        raise MissingPackage(f"{needs} needs {' and '.join(missing)}, not installed here: "
                             f"{install_hint(args.backend, missing)}")
    return {"backend": args.backend, "quantize": args.quantize}
