"""How a model is run on a benchmark, as two objects passed down instead of a score of keyword parameters.

`EvalOptions` holds everything but the model, the scorer and the data: the encoding, the scorer's and
encoder's options, the vector cache, batch size and device, and the facet handling of pool sets
(`query_text`, `cand_sentences`; see `aspire.evaluate.facets`) and the control code of a facet's queries
(`facet_code`, for models trained with facet codes; see `aspire.encoders.codes.query_code`). `checked(scorer, faceted)` validates the
combination once, at the top, and returns the options to run with. `Stages` holds the search pipeline's
stages every ranking benchmark runs after (or instead of) the model: BM25, its fusion with the model, a
cross-encoder rerank. Every runner (`run_csfcube`, `run_pools`, `run_reviewers`, `run_context2doc`) takes
`(model, scorer, out, exp, options, stages)`, and `aspire.evaluate.cli` builds both from the command line.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence
from urllib.parse import quote

from aspire.data.facets import FACET_CODE_CHOICES
from aspire.scoring import SCORER_NAMES

# the evaluation's vocabularies, each named once
ENCODINGS = ("contextual", "independent", "abstract", "pass")  # pass: the contextual pass's whole-abstract vector
SENTENCE_SCORERS = SCORER_NAMES  # the sentence scorers of aspire.scoring's registry (names: no torch loads)
SCORERS = SENTENCE_SCORERS + ("abstract",)  # + the whole-abstract cosine (aspire.scoring.vector.VectorCosine)
QUERY_TEXTS = ("abstract", "facet", "title+facet")
CAND_SENTENCES = ("all", "facet")
BM25_EXP = "bm25"  # the experiment name of a BM25 run
# what each encoding's encoder call takes (`encode_independent` / `encode_abstract`), and the type of each value
ENCODE_OPTIONS = {"independent": ("max_length", "normalize", "pooling"),
                  "abstract": ("max_length", "normalize", "pooling", "joiner")}
# each one's value when left out (the encoder calls' defaults; max_length 0: the encoder's own, as when left out)
ENCODE_DEFAULTS = {"max_length": 0, "normalize": False, "pooling": "mean", "joiner": None}


def check_encode_options(encoding: str, options: dict) -> None:
    """ValueError naming the key when `options` are not what `encoding`'s encoder call takes: an unknown key (a
    typo would otherwise fail only at encoding, after any members before it had run) or a value of the wrong type."""
    valid = ENCODE_OPTIONS.get(encoding, ())
    if options and not valid:
        raise ValueError(f"the {encoding} encoding takes no encode options, got {sorted(options)}")
    for key, value in options.items():
        if key not in valid:
            raise ValueError(f"unknown encode option {key!r} for the {encoding} encoding; valid: {list(valid)}")
        if key == "max_length" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise ValueError(f"encode option max_length must be an integer >= 0 (0: the encoder's), got {value!r}")
        if key == "normalize" and not isinstance(value, bool):
            raise ValueError(f"encode option normalize must be true or false, got {value!r}")
        if key == "pooling" and value not in ("mean", "cls"):
            raise ValueError(f"encode option pooling must be 'mean' or 'cls', got {value!r}")
        if key == "joiner" and not (value is None or isinstance(value, str)):
            raise ValueError(f"encode option joiner must be a string (or null: a title/abstract pair), got {value!r}")


def non_default_encode_options(encoding: str, options: dict | None) -> dict:
    """`options` less those of `encoding`'s encoder call (`ENCODE_OPTIONS`) given at their value when left out
    (`ENCODE_DEFAULTS`, of the same type: `max_length: false` is not 0): the options that change its vectors, so
    that `{pooling: mean}` and `{}` are one run and one vector cache entry. An option the encoding does not take is
    kept, for its encoder call to refuse."""
    valid = ENCODE_OPTIONS.get(encoding, ())
    return {k: v for k, v in (options or {}).items()
            if not (k in valid and type(v) is type(ENCODE_DEFAULTS[k]) and v == ENCODE_DEFAULTS[k])}


def default_exp(model: str, scorer: str, encoding: str = "contextual", scorer_options: dict | None = None,
                query_text: str = "abstract", cand_sentences: str = "all") -> str:
    """The experiment name of a run given no `exp`: model, encoding, scorer, its options, query text
    and candidate sentences.

    >>> default_exp("runs/x/model", "abstract", query_text="title+facet")
    'model-abstract-abstract-query-title-facet'
    >>> default_exp("minilm", "ot", scorer_options={"tau": 1}, cand_sentences="facet")
    'minilm-contextual-ot-tau1-cands-facet'
    >>> default_exp("minilm", "hybrid", scorer_options={"weights": {"whole": 1.0, "facet": 0.5}})
    'minilm-contextual-hybrid-weights-facet0.5-whole1'
    """
    enc_name = scorer_encoding(scorer, encoding)
    opts = _entries_name(scorer_options or {})
    query = "" if query_text == "abstract" else f"-query-{query_text.replace('+', '-')}"
    cands = "" if cand_sentences == "all" else f"-cands-{cand_sentences}"
    return f"{Path(str(model)).name}-{enc_name}-{scorer}{opts}{query}{cands}"


def options_exp(model: str, scorer: str, options: EvalOptions) -> str:
    """`default_exp` of a run with `options`, naming also how the model encodes when that is not its default: the
    encode options of its encoding less those at their default (`non_default_encode_options`:
    `-encode-max-length-256-encode-normalize-true`), the encoder's backend and quantization
    (`-backend-openvino-quantize-int8`), the papers' code (`-doc-code-method`) and the facet queries' code
    (`-facet-code-none`). Two runs that differ only there once shared one name, so the second replaced the first's
    ranked files and results without a word; a run on the defaults keeps its name.

    >>> options_exp("minilm", "ot", EvalOptions(facet_code="none", encoder_options={"backend": "openvino", "quantize": None}))
    'minilm-contextual-ot-backend-openvino-facet-code-none'
    >>> options_exp("m", "minl2", EvalOptions(encoder_options={"code": None}))
    'm-contextual-minl2-doc-code-none'
    >>> options_exp("minilm", "abstract", EvalOptions(encode_options={"max_length": 256, "joiner": " ", "pooling": "mean"}))
    'minilm-abstract-abstract-encode-joiner-%20-encode-max-length-256'
    """
    base = default_exp(model, scorer, options.encoding, options.scorer_options, options.query_text,
                       options.cand_sentences)
    encode = non_default_encode_options(scorer_encoding(scorer, options.encoding), options.encode_options)
    parts = [f"-encode-{k.replace('_', '-')}-{_name_value(v, k)}" for k, v in sorted(encode.items())]
    defaults = {"backend": "torch", "quantize": None}  # load_encoder's: left out of the name
    names = {"code": "doc-code"}
    parts += [f"-{names.get(k, k.replace('_', '-'))}-{_name_value(v, k)}"
              for k, v in sorted(options.encoder_options.items()) if not (k in defaults and v == defaults[k])]
    if options.facet_code != "auto":
        parts.append(f"-facet-code-{options.facet_code}")
    return base + "".join(parts)


def scorer_encoding(scorer: str, encoding: str) -> str:
    """The encoding `scorer` runs with when asked for `encoding`: the `abstract` scorer's is `abstract` (whole
    abstracts) unless it reads the contextual pass (`pass`); a sentence scorer's is the one asked for."""
    return "abstract" if scorer == "abstract" and encoding != "pass" else encoding


def _entries_name(options: Mapping) -> str:
    """`options` in an experiment name: each entry `-KEYVALUE` (`_name_value`), sorted by key (`-eps0.05-tau1`)."""
    entries = sorted(options.items(), key=lambda kv: str(kv[0]))
    return "".join(f"-{_name_text(str(k))}{_name_value(v, k)}" for k, v in entries)


def _name_value(v, key="") -> str:
    """An option's value in an experiment name, which is a folder's and files' name: `none`, `true` / `false`, a
    number as `exact_g` writes it, a string with `_name_text`, a list or tuple as its items joined by `,` and a
    mapping as its entries (`_entries_name`: `{"whole": 1.0, "facet": 0.5}` is `-facet0.5-whole1`; it once raised a
    TypeError). ValueError naming `key` for a value of any other type."""
    if isinstance(v, Mapping):
        return _entries_name(v)
    if isinstance(v, (list, tuple)):
        return ",".join(_name_value(x, key) for x in v)
    if v is None or isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str):
        return _name_text(v)
    if not isinstance(v, numbers.Real):
        raise ValueError(f"option {key!r}: an experiment name takes numbers, strings, booleans, null, lists and "
                         f"mappings of them, got {type(v).__name__} {v!r}")
    return exact_g(v)


def _name_text(text: str) -> str:
    """`text` in an experiment name: letters, digits and `_.~[]` as they are, every other character `%XX` (its UTF-8
    bytes), `-` (which separates the name's parts) and `,` (a list's items) included, so that the name is a valid
    folder name and reads back one way (a joiner `" "` is `%20`)."""
    return quote(text, safe="[]").replace("-", "%2D")


def search_exp(model: str, pipeline: Sequence[str]) -> str:
    """The default experiment name of a benchmark scored through search: `MODEL-search-KEY-VALUE-...`."""
    return "-".join([Path(str(model)).name, "search", *[o.replace("=", "-") for o in pipeline]])


@dataclass(frozen=True)
class EvalOptions:
    encoding: str = "contextual"  # contextual | independent | pass (abstract scorer only; abstract: set by it)
    scorer_options: dict = field(default_factory=dict)  # e.g. {"tau": 1.0} for OT
    cache_dir: str | Path | None = None  # vector cache; None: no cache
    batch_size: int = 32
    device: str | None = None  # torch device; None: the model's
    encode_options: dict = field(default_factory=dict)  # independent / abstract encodings: ENCODE_OPTIONS
    query_text: str = "abstract"  # abstract scorer on a faceted set: abstract | facet | title+facet
    cand_sentences: str = "all"  # sentence scorers on a faceted set: all | facet
    encoder_options: dict = field(default_factory=dict)  # load_encoder: backend, quantize, code (the papers' code)
    facet_code: str = "auto"  # a facet's queries: auto (its code, if the model has one) | none | background | method | result

    def checked(self, scorer: str, faceted: bool) -> "EvalOptions":
        """These options for `scorer` on a faceted (or not) set; ValueError naming what does not fit."""
        if self.facet_code not in FACET_CODE_CHOICES:
            raise ValueError(f"unknown facet code {self.facet_code!r}; valid: {list(FACET_CODE_CHOICES)}")
        encoding = self.encoding
        if encoding not in ENCODINGS:  # the abstract scorer once ran a typo as its own encoding, without a word
            raise ValueError(f"unknown encoding {encoding!r}; valid: {list(ENCODINGS)}")
        if scorer == "abstract":
            encoding = "pass" if encoding == "pass" else "abstract"
            if encoding == "pass" and self.encode_options:
                raise ValueError(f"encoding 'pass' takes no encode options (it is the contextual pass), got "
                                 f"{sorted(self.encode_options)}")
        elif encoding in ("abstract", "pass"):
            raise ValueError(f"encoding {encoding!r} only goes with scorer 'abstract'")
        check_encode_options(encoding, self.encode_options)
        if self.query_text not in QUERY_TEXTS:
            raise ValueError(f"unknown query text {self.query_text!r}; valid: {list(QUERY_TEXTS)}")
        if self.query_text != "abstract":
            if scorer != "abstract":
                raise ValueError(f"query text {self.query_text!r} goes with scorer 'abstract'; sentence scorers "
                                 "select the facet's sentences themselves")
            if not faceted:
                raise ValueError(f"query text {self.query_text!r} needs a faceted pool set")
        if self.cand_sentences not in CAND_SENTENCES:
            raise ValueError(f"unknown candidate sentences {self.cand_sentences!r}; valid: {list(CAND_SENTENCES)}")
        if self.cand_sentences != "all":
            if scorer not in SENTENCE_SCORERS:
                raise ValueError(f"candidate sentences {self.cand_sentences!r} go with a sentence scorer "
                                 f"{list(SENTENCE_SCORERS)}, not {scorer!r}")
            if not faceted:
                raise ValueError(f"candidate sentences {self.cand_sentences!r} need a faceted pool set")
        return replace(self, encoding=encoding)

    def record(self) -> dict:
        """The options that decide the figures, for a results file (the cache and batch size do not). Record the
        options a scorer runs with, `checked(scorer, faceted).record()`: unchecked, `encoding` is the one asked
        for, not the one the `abstract` scorer runs with."""
        return {"encoding": self.encoding, "scorer_options": dict(self.scorer_options), "device": self.device,
                "encode_options": dict(self.encode_options), "encoder_options": dict(self.encoder_options),
                "query_text": self.query_text, "cand_sentences": self.cand_sentences, "facet_code": self.facet_code}


def scorer_options(scorer: str | None, tau: float | None = None, eps: float | None = None,
                   window: int | None = None) -> dict:
    """The scorer's keyword options from the command line's `--tau`, `--eps` (OT) and `--window`
    (maxpassage); ValueError for `--window` without maxpassage among the scorers (comma-separated) and for a `--tau`
    or `--eps` that is not > 0. Whether the scorer reads `--tau` / `--eps` is the command line's check
    (`aspire.cli.evaluate_options`); here a scorer that does not raises a TypeError when built."""
    names = (scorer or "").split(",")
    if window is not None and "maxpassage" not in names:
        raise ValueError(f"--window goes with --scorer maxpassage, not {scorer!r}")
    for flag, value in (("--tau", tau), ("--eps", eps)):
        if value is not None and not value > 0:  # NaN too
            raise ValueError(f"{flag} must be > 0, got {value}" + (" (inf: uniform weights)" if flag == "--tau" else ""))
    return {k: v for k, v in (("tau", tau), ("eps", eps), ("window", window)) if v is not None}


@dataclass(frozen=True)
class Stages:
    """The search pipeline's stages on a benchmark: `bm25` ranks by BM25 (`k1`, `b`), alone (no model) or fused
    with the model's scores, z-scores per query, weight `alpha` on the model; `rerank` (an
    `aspire.retrieval.crossencoder.RerankOptions`) re-scores each query's top N with a cross-encoder."""

    bm25: bool = False
    alpha: float | None = None
    k1: float = 1.25
    b: float = 0.75
    rerank: object = None

    @property
    def staged(self) -> bool:
        """Whether any stage runs beyond the model's own ranking."""
        return self.bm25 or self.rerank is not None

    def checked(self, has_model: bool) -> "Stages":
        """These stages, or a ValueError when they cannot run: nothing to rank with, a fusion weight missing
        or outside [0, 1], a fusion weight with nothing to fuse (no model, or no BM25), or BM25's k1 and b out of
        range."""
        if not has_model and not self.bm25:
            raise ValueError("give a model and a scorer, BM25, or both")
        if self.alpha is not None and not (has_model and self.bm25):  # once dropped unsaid: BM25 or the model alone
            raise ValueError(f"a fusion weight alpha={self.alpha} fuses a model with BM25; these stages have "
                             + ("no model" if not has_model else "no BM25 (bm25=False)"))
        if has_model and self.bm25 and (self.alpha is None or not 0.0 <= self.alpha <= 1.0):
            raise ValueError(f"a model fused with BM25 needs a weight alpha in [0, 1], got {self.alpha}")
        if self.bm25 and not (0.0 <= self.k1 < float("inf") and 0.0 <= self.b <= 1.0):  # once found after encoding
            raise ValueError(f"BM25 needs a finite k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")
        return self

    def exp(self, base: str | None) -> str:
        """The experiment name of a staged run: the model's (`base`), `bm25`, or both fused (`BASE-bm25-aALPHA`),
        then `-ceN-wW` for a cross-encoder rerank.

        >>> Stages(bm25=True, alpha=0.815).exp("minilm-abstract-abstract")
        'minilm-abstract-abstract-bm25-a0.815'
        """
        self.checked(base is not None)
        name = base if not self.bm25 else BM25_EXP if base is None else f"{base}-bm25-a{exact_g(self.alpha)}"
        return name + (f"-ce{self.rerank.top_n}-w{exact_g(self.rerank.weight)}" if self.rerank is not None else "")


def exact_g(x: float) -> str:
    """`x` as `:g` writes it where that reads back as `x`, else every digit (`:g` keeps six significant digits, so
    two runs whose settings differ past them were given one experiment name, one folder).

    >>> exact_g(0.815), exact_g(1.0), exact_g(0.81500001)
    ('0.815', '1', '0.81500001')
    """
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


@dataclass(frozen=True)
class Member:
    """One member of an ensemble as a benchmark's runner sees it: its `name` (its folder under the ensemble's),
    `model` (`bm25`: the lexical baseline, no scorer and no options), `scorer` and `options`."""

    name: str
    model: str
    scorer: str | None
    options: EvalOptions | None

    @property
    def lexical(self) -> bool:
        return self.model == "bm25"
