"""The scorer settings a document model was trained with, as the defaults of every command that scores with it.

Training saves its `model` section in the checkpoint's `document_model.json` (`MODEL_FILE`, written by
`aspire.train.document_model`): a kind trained through the OT distance (`ot`, `ts+ot`) reads `ot_tau` and `ot_eps`
there, kind `att` reads `att_tau` (`aspire.train.config.kind_reads`). Scored with that scorer and given none of its
options, such a model was scored with the scorer's defaults (tau 1, eps 0.05), whatever it was trained with, without
a word. `trained_defaults` is the one place every path takes them from: evaluation's scorer options
(`aspire.cli.evaluate_options.eval_options`, ensemble members) and the search config an index is built or searched
with (`aspire.index.config.trained_search_config`: `aspire index build`, `aspire search`, the page, the benchmarks'
`--search-pipeline`). An option given keeps its value; one line (INFO) says which settings were taken and from
which file. A model without the file (`minilm`, `mpnet`, a plain Hugging Face folder) or trained at the scorer's
defaults gets nothing: its options, figures and experiment names stay as they were.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
from pathlib import Path
from typing import Mapping, Sequence

from aspire.encoders.pretrained import MODELS, SHIPPED
from aspire.io import read_json
from aspire.paths import model_folder

log = logging.getLogger(__name__)

MODEL_FILE = "document_model.json"  # a trained document model's kind and settings, beside its weights
# model.kind -> the scorer it trains through whose settings it records (`aspire.train.config.kind_reads`; tests check)
TRAINED_SCORER = {"ot": "ot", "ts+ot": "ot", "att": "attention"}
# a scorer -> {its setting in document_model.json's `model` section: (the scorer's keyword, the scorer's default)}
SCORER_SETTINGS = {"ot": {"ot_tau": ("tau", 1.0), "ot_eps": ("eps", 0.05)}, "attention": {"att_tau": ("tau", 1.0)}}
# the scorer keywords and the scorers that read them (`aspire.scoring`; tests check): one run's scorers share them
KEYWORD_READERS = {"tau": ("ot", "attention", "hybrid"), "eps": ("ot", "hybrid")}


def model_file(model: str | os.PathLike) -> Path:
    """Where `model` (as `--model` takes it) keeps its `document_model.json`: a shipped model's folder, a model
    folder, or the checkpoint a training run's folder or pointer file stands for (`aspire.paths.model_folder`, the
    folder `resolve_model` loads). A short name (`MODELS`) is not loaded or unpacked for it: only the shipped models
    can hold one. A folder that is no model is left for loading it to name."""
    name = str(model)
    return (SHIPPED / name if name in MODELS else model_folder(name)) / MODEL_FILE


def trained_settings(model: str | os.PathLike) -> tuple[Path, str | None, dict[str, tuple[str, float]]]:
    """(`model`'s document_model.json, the scorer its kind trains through and records settings of (None: none, or no
    file), {keyword: (setting, value)} of those settings it recorded off the scorer's defaults). ValueError naming the
    file, and the key, when the file is there but not a document model's, or a setting is not a number > 0."""
    file = model_file(model)
    if not file.is_file():
        return file, None, {}
    meta = read_json(file, "document model settings", mapping=True, finite=True)
    section = meta.get("model")
    if not isinstance(section, dict):
        raise ValueError(f"{file}: damaged, no `model` section of settings (a JSON object)")
    scorer = TRAINED_SCORER.get(section.get("kind")) if isinstance(section.get("kind"), str) else None
    off = {}
    for key, (keyword, default) in SCORER_SETTINGS.get(scorer, {}).items():
        value = section.get(key, default)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"{file}: model.{key} must be a finite number > 0, got {value!r}")
        if value != default:
            off[keyword] = (key, float(value))
    return file, scorer, off


def trained_defaults(model: str | os.PathLike, scorers: Sequence[str], given: Mapping, flag: str = "--{}",
                     say: bool = True) -> dict:
    """`given` (the scorer keywords a run was given, e.g. {"tau": 2.0}) with the settings `model` was trained with
    (`trained_settings`) that the run's `scorers` read and `given` lacks. One INFO line names them, the file, those
    taken and those given otherwise, and how to choose others (`flag` formats a keyword as the command takes it:
    `--tau`, `search.ot_tau`). A keyword another of the run's scorers reads too (`KEYWORD_READERS`: `--tau` of
    `ot` and `attention` fused) is one value for both, so it is not taken: the line says to give it. `say=False`: no
    line (a check before the run that says them)."""
    file, scorer, settings = trained_settings(model)
    out = dict(given)
    if scorer not in scorers or not settings:
        return out
    parts = []
    for keyword, (_, value) in settings.items():
        name = flag.format(keyword)
        if keyword in given:
            if given[keyword] != value:
                parts.append(f"{name} {given[keyword]:g} as given")
        elif others := [s for s in scorers if s != scorer and s in KEYWORD_READERS[keyword]]:  # one value for all
            parts.append(f"{name} not taken, as {'+'.join(others)} read(s) it too: give it")
        else:
            out[keyword] = value
            parts.append(f"{name} {value:g} taken")
    if parts and say:
        trained = ", ".join(f"model.{key} {value:g}" for key, value in settings.values())
        log.info("scorer %s: the model was trained with %s (%s): %s; give %s to score otherwise", scorer, trained, file,
                 "; ".join(parts), "/".join(flag.format(k) for k in settings))
    return out
