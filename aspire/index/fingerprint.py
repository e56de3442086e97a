"""The model an index was built with: the encoder's fingerprints as an index records them, the check that an encoder
in use is that model, and the error that says how it differs.

`SentenceIndex` records `model_fingerprint(encoder)` and `encoder_include_title(encoder)` when built and takes
`model_fingerprints(encoder)` (the fingerprint and its version-1 form, `aspire.encoders.identity`) in `check_model` /
`load`, which raise `ModelMismatchError` (`check_fingerprint`); the commands restate that error with the model, backend
and precision on each side (`restate_mismatch`). A version-1 fingerprint an index records (16 hex digits, built before
2026-11-30) is matched by the encoder's version-1 fingerprint, with a warning.
"""

from __future__ import annotations

import warnings

from aspire.encoders.identity import fingerprint_version


class ModelMismatchError(ValueError):
    """The index was built with a different model (or encoding settings) than the one in use; `fingerprints`:
    (the index's, the encoder's)."""

    def __init__(self, message: str, fingerprints: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.fingerprints = fingerprints


def model_mismatch(what: str, name: str, built: str, used: str) -> ModelMismatchError:
    """The error for an encoder whose fingerprint `used` is not the `built` one of the index (`what`); the
    commands restate it with `restate_mismatch`."""
    return ModelMismatchError(f"{what} was built with model {name!r} (fingerprint {built!r}); the encoder in use "
                              f"has fingerprint {used!r}: rebuild the index, or encode with the model, backend and "
                              "precision it was built with", (built, used))


def describe_backend(backend: str | None, quantize: str | None) -> str:
    return f"backend {backend} {quantize or 'fp32'}" if backend else "a backend it does not record"


def restate_mismatch(err: ModelMismatchError, built: tuple[str, str | None, str | None],
                     used: tuple[str, str, str | None], doing: str) -> ModelMismatchError:
    """A command's restatement of `err`, with its fingerprints: which of model, backend and precision differ
    between the index (`built`: its model name, recorded backend and precision) and the encoder `doing` (e.g.
    "this search encodes papers") uses (`used`, the same three), and what to do."""
    (built_name, *built_backend), (name, *backend) = built, used
    left_out = [flag for flag, differs in (("--model", name != built_name),
                                           ("--backend/--quantize", backend != built_backend)) if differs]
    if built_backend[0] is None:
        advice = "give the --backend/--quantize it was built with"
    elif left_out:
        advice = f"leave out {' and '.join(left_out)} to use the index's, or rebuild the index with these"
    else:  # the same names: the model's weights or settings changed since the index was built
        advice = "the same model name and backend with other weights or settings: rebuild the index"
    fingerprints = f" (fingerprints {err.fingerprints[0]}, {err.fingerprints[1]})" if err.fingerprints else ""
    return ModelMismatchError(f"the index was built with model {built_name!r}, {describe_backend(*built_backend)}; "
                              f"{doing} with model {name!r}, {describe_backend(*backend)}: {advice}{fingerprints}",
                              err.fingerprints)


def check_fingerprint(what: str, name: str, built: str, used: str, legacy: str | None = None) -> None:
    """Raise ModelMismatchError unless the encoder with fingerprint `used` (and version-1 fingerprint `legacy`) made
    `what`, recorded as model `name` with fingerprint `built`. A version-1 `built` (`fingerprint_version`) is matched
    by `legacy`, with a warning, and a mismatch then names the encoder's version-1 fingerprint, the one comparable."""
    if used == built:
        return
    if fingerprint_version(built) == 1 and legacy is not None:
        if legacy == built:
            warnings.warn(f"{what} was built with model {name!r} under a version-1 fingerprint ({legacy}), which the "
                          "encoder in use matches in weights and settings; that version does not cover the model "
                          "config, adapter settings and vocabulary: rebuild it to have them checked", stacklevel=3)
            return
        used = f"{legacy} (version 1; {used} now)"
    raise model_mismatch(what, name, built, used)


def model_fingerprint(encoder) -> str:
    """The encoder's fingerprint string (`fingerprint` is a method on ContextualSentenceEncoder)."""
    fp = encoder.fingerprint
    return fp() if callable(fp) else str(fp)


def model_fingerprints(encoder) -> tuple[str, str | None]:
    """(the encoder's fingerprint, its version-1 fingerprint or None), from one pass over its weights, as
    `SentenceIndex.check_model` takes them."""
    both = getattr(encoder, "fingerprints", None)
    return tuple(both()) if callable(both) else (model_fingerprint(encoder), None)


def encoder_include_title(encoder) -> bool:
    """Whether `encoder` makes a paper's title its sentence 0 (`include_title`; an encoder without the setting
    does not), as `aspire.index.corpus.encode_corpus` reads it: what an index built with it records."""
    return bool(getattr(encoder, "include_title", False))
