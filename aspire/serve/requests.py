"""The page's requests as pydantic models, and the one way client input is parsed and checked.

Every check failure becomes `RequestError(status, message)`: a 4xx answer whose message names the
field, the rule and (shortened) the value given. Numbers are judged as a client would expect:

- JSON bodies are parsed with `parse_json`: integers of more than MAX_INT_DIGITS digits, non-finite
  numbers (`NaN`, `Infinity`, `1e400`), non-ASCII digits and an object repeating a field (`{"k": 1, "k": 5}`,
  once the last taken without a word, as a query string's repeated field is not) are refused before any
  model sees them;
- query-string integers must be plain ASCII digits (`int()` alone would take "١٢" or " 12 ");
- the models are strict: `k` is an integer, not `3.0`, `"3"` or `true`.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from aspire.config import apply_overrides, parse_overrides
from aspire.index.config import RERANKERS, STAGES, SearchConfig
from aspire.text import cut_whole

MAX_K = 50
MAX_SHORTLIST = 5000
MIN_TAU = 1e-6  # the range over which OT scores are tested finite (tests/test_numerics.py); 1e-300 gives NaN
MAX_TAU = 1e4
MAX_SELECTED = 256
MAX_ID_CHARS = 256
MAX_FILTER_CHARS = 200
MAX_LIST = 100
MAX_OFFSET = 10**9
MAX_INT_DIGITS = 18  # larger integers are no count a client means (and int() of 4,301 digits fails)
_ASCII_INT = re.compile(rf"[0-9]{{1,{MAX_INT_DIGITS}}}")


class RequestError(ValueError):
    """A request the service refuses: `status` is the HTTP status to answer (4xx), `message` says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _short(value: Any, limit: int = 40) -> str:
    """A value for an error message, at most `limit` characters (never the full text of a huge input); the cut never
    parts a letter from its combining marks (once "e" + U+0301 was cut to a bare "e")."""
    if value is None or isinstance(value, bool):  # as the client wrote it in JSON (once "got True", "got None")
        text = json.dumps(value)
    elif isinstance(value, str):
        text = repr(value[: limit + 1])
    elif isinstance(value, (list, dict)):
        text = f"a {'list' if isinstance(value, list) else 'JSON object'} of {len(value)}"
    else:
        text = repr(value)
    return text if len(text) <= limit else cut_whole(text, limit - 1) + "…"


def _query_int(value: Any) -> Any:
    """A query-string integer: 1 to MAX_INT_DIGITS ASCII digits, nothing else; from Python (`find_papers`), an
    integer, not a bool or a float (`limit=True` was a page of 1, `limit=2.0` one of 2, where a search's `k` is
    strict)."""
    if isinstance(value, str):
        if not _ASCII_INT.fullmatch(value):
            raise ValueError("not a plain integer")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("not an integer")
    return int(value)


QueryInt = Annotated[int, BeforeValidator(_query_int)]


class PapersQuery(BaseModel):
    """`GET /api/papers?q=&limit=&offset=`: papers whose id starts with q or whose title holds its words."""

    model_config = ConfigDict(extra="forbid")
    q: Annotated[str, Field(max_length=MAX_FILTER_CHARS)] = ""
    limit: Annotated[QueryInt, Field(ge=1, le=MAX_LIST)] = 20
    offset: Annotated[QueryInt, Field(ge=0, le=MAX_OFFSET)] = 0


class PaperQuery(BaseModel):
    """`GET /api/paper?id=`: one paper."""

    model_config = ConfigDict(extra="forbid")
    id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]


class SearchBody(BaseModel):
    """`POST /api/search`: rank papers by the selected sentences of an indexed paper.

    `sentences` are 0-based positions of the paper's sentences; a repeat is merged and their order does not count
    (as `aspire search --sentences`: `aspire.index.config.check_selection`); the answer echoes them merged and sorted.
    `k`, `stages` (the first stage: dense "ann", lexical "bm25", fused "ann,bm25" or "whole"), `rerank`,
    `shortlist` (what the first stage passes to a re-ranker, and the depth of each list the fused stage fuses:
    refused with rerank "none" after another first stage) and `tau` (the OT
    temperature, for rerank "ot" alone) default to the server's search config. `cross_encoder` (true / false,
    default false, whatever the search config says) adds the cross-encoder stage last; the server must hold one.
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    paper_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    sentences: Annotated[list[int], Field(min_length=1, max_length=MAX_SELECTED)]
    k: Annotated[int, Field(ge=1, le=MAX_K)] | None = None
    stages: Literal[STAGES] | None = None
    rerank: Literal[RERANKERS] | None = None
    shortlist: Annotated[int, Field(ge=1, le=MAX_SHORTLIST)] | None = None
    tau: Annotated[float, Field(ge=MIN_TAU, le=MAX_TAU, allow_inf_nan=False)] | None = None
    cross_encoder: bool | None = None

    @model_validator(mode="after")
    def _shortlist_holds_k(self) -> SearchBody:
        if self.shortlist is not None and self.k is not None and self.shortlist < self.k:
            raise ValueError(f"shortlist ({self.shortlist}) must be at least k ({self.k})")
        return self


def check_overrides(overrides: Sequence[str] | str) -> None:
    """Refuse a `k` or `shortlist` override (`search.k=100`) beyond what a page request may ask (MAX_K,
    MAX_SHORTLIST): ValueError naming it, where searches once used the bound without a word. An index's saved
    search config beyond them is served within them (`/api/info` says the defaults in use). An `ot_tau` override
    outside the temperatures a request may ask (MIN_TAU..MAX_TAU) is refused too: served, the page refused to send
    back its own default temperature.

    A `cross_encoder` override is refused too: the page's searches take the cross-encoder stage one request at a
    time (`cross_encoder: true`), never from the config (`search.cross_encoder=true` was taken and read by nothing)."""
    bounds = {"k": MAX_K, "shortlist": MAX_SHORTLIST}
    given = [o.removeprefix("search.") for o in ([overrides] if isinstance(overrides, str) else overrides)]
    # read as `Searcher.open` reads them: its config loader drops a leading "--" (`--k=100` once passed unchecked,
    # served as k=50 without a word; `--cross_encoder=true` was taken)
    given = [o[2:] if o.startswith("--") else o for o in given]
    cross = [o for o in given if o.split("=", 1)[0].strip() == "cross_encoder"]
    if cross:
        raise ValueError(f"search.{cross[0]}: the page's searches turn the cross-encoder stage on one request at a "
                         "time (the page's cross-encoder choice, a request's cross_encoder: true), never from the "
                         "search config: leave it out, and give --cross-encoder DIR to offer the stage")
    given = [o for o in given if o.split("=", 1)[0] in (*bounds, "ot_tau")]
    asked = apply_overrides(SearchConfig(), given, "search")
    named = parse_overrides(given)  # the keys given (`asked` holds the last value of each)
    for key, most in bounds.items():
        if key in named and getattr(asked, key) > most:
            raise ValueError(f"search.{key}={getattr(asked, key)}: the page serves at most {key}={most}")
    if "ot_tau" in named and not MIN_TAU <= asked.ot_tau <= MAX_TAU:
        raise ValueError(f"search.ot_tau={asked.ot_tau:g}: the page serves OT temperatures in [{MIN_TAU:g}, "
                         f"{MAX_TAU:g}] (a request's tau too)")


RULES = {  # field -> what a valid value is (the message's second half)
    "q": f"a string of at most {MAX_FILTER_CHARS} characters",
    "limit": f"an integer in 1..{MAX_LIST}",
    "offset": f"an integer in 0..{MAX_OFFSET}",
    "id": f"a non-empty paper id of at most {MAX_ID_CHARS} characters",
    "paper_id": f"a non-empty string of at most {MAX_ID_CHARS} characters",
    "sentences": f"a non-empty list of at most {MAX_SELECTED} sentence positions (integers)",
    "k": f"an integer in 1..{MAX_K}",
    "stages": "one of " + ", ".join(repr(s) for s in STAGES),
    "rerank": "one of " + ", ".join(repr(r) for r in RERANKERS),
    "shortlist": f"an integer in 1..{MAX_SHORTLIST}",
    "tau": f"a number in [{MIN_TAU:g}, {MAX_TAU:g}]",
    "cross_encoder": "true or false",
}


def check(model: type[BaseModel], data: Any) -> BaseModel:
    """`data` validated as `model`, or RequestError(400) naming the first bad field and its rule."""
    if not isinstance(data, dict):
        raise RequestError(400, f"the request must be a JSON object, got {_json_type(data)}")
    unknown = sorted(set(data) - set(model.model_fields))
    if unknown:
        raise RequestError(400, f"unknown field(s) {', '.join(_short(u) for u in unknown[:10])}; valid: "
                                f"{', '.join(model.model_fields)}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        if not field:  # a model-level rule (e.g. shortlist >= k): its own message
            raise RequestError(400, str(err["msg"]).removeprefix("Value error, ")) from None
        if field == "sentences" and len(err["loc"]) > 1:  # one item of the list: named (once "got a list of 1")
            raise RequestError(400, f"sentences must be {RULES[field]}; its item {err['loc'][1]} is "
                                    f"{_short(err['input'])}, not an integer") from None
        raise RequestError(400, _message(field, err["type"], data.get(field))) from None


def _json_type(value: Any) -> str:
    """What JSON calls `value`'s kind ("null", "array", "string", "number", "true"/"false"), for an error message: the
    client sent JSON, not Python (`type(None).__name__` once told it "got NoneType", a list "got list")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, numbers.Number):
        return f"the number {_short(value)}"
    if isinstance(value, (list, tuple)):
        return f"an array of {len(value)}"
    return type(value).__name__  # not from JSON (a Python caller's object): its Python type


def _message(field: str, kind: str, value: Any) -> str:
    """A ValidationError's first error as one sentence a user can act on."""
    if field not in RULES:
        return f"invalid request: {kind}"
    if kind == "missing":
        return f"{field} is required: {RULES[field]}"
    if field == "sentences" and kind == "too_short":
        return "empty selection: select at least one sentence"
    if field == "sentences" and kind == "too_long":
        return f"too many sentences selected: {len(value)} (at most {MAX_SELECTED})"
    if kind == "string_unicode":  # once "must be a non-empty string of at most 256 characters" for one character
        return f"{field} is not Unicode text (a lone surrogate such as \\ud800 names no character); got {_short(value)}"
    if kind == "string_too_long":
        return f"{field} too long: {len(value)} characters; it must be {RULES[field]}"
    if field in ("rerank", "stages") and kind == "literal_error":
        return f"unknown {field} {_short(value)}; valid: {RULES[field].removeprefix('one of ')}"
    return f"{field} must be {RULES[field]}; got {_short(value)}"


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise RequestError(400, f"the body holds an integer of {len(text.lstrip('-'))} digits "
                                f"(at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise RequestError(400, f"the body holds the number {_short(text)}, which is not finite")
    return value


def _constant(name: str):
    raise RequestError(400, f"the body holds {name}, which is not JSON (numbers must be finite)")


def _object(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise RequestError(400, f"the body repeats the field {_short(repeated)}: give each field once")
    return obj


def parse_json(raw: bytes) -> Any:
    """Strict JSON from a request body: UTF-8, finite numbers, bounded integers, no field repeated in an object;
    RequestError(400) else."""
    try:
        return json.loads(raw.decode("utf-8"), parse_int=_int, parse_float=_float, parse_constant=_constant,
                          object_pairs_hook=_object)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(400, f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise RequestError(400, "the body's JSON is nested too deeply") from None
