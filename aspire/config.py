"""Nested-dataclass configs loaded from YAML with checked dotted overrides.

A config is a dataclass whose fields are plain values or further dataclasses. `load_config(cls,
path, overrides)` reads a YAML file (which may name a `base:` file it extends), applies
`section.key=value` overrides, and fails with `ConfigError` on any unknown key, so a typo never
silently falls back to a default; a YAML syntax error or a key given twice in one mapping is a
`ConfigError` naming the file, line and column. Numeric fields declared with `ranged(default, ge=..., gt=...,
le=..., lt=...)` are checked against their bounds when loaded (a float must also be finite), so an
out-of-range value fails at load time naming its key. `save_config` writes the resolved config
beside an artifact. A model's own config (a Hugging Face `config.json`) is read for one thing across the package:
how many word pieces the model reads (`position_limit`).

Values are typed as YAML types them (PyYAML, YAML 1.1), with three YAML 1.2 readings where 1.1's would mislead:
`1e-3` and `1.5e3` are numbers (1.1 wants a dot and a signed exponent, else text); a date or time is its text; and
a number written in a form whose value YAML 1.1 and 1.2 disagree on (`010`, octal 8 in 1.1 and 10 in 1.2; base 60,
`1:30`) is a ConfigError where a number is wanted. A string field keeps the text as written (`name=0123` is
"0123", `name=1.10` is "1.10", never the number's text "83" or "1.1").
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import math
import numbers
import re
import types
import typing
from pathlib import Path
from typing import Any, Sequence, TypeVar

import yaml

from aspire.io import write_text

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override names an unknown key or holds a value of the wrong type."""


def ranged(default: Any, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None) -> Any:
    """A dataclass field with bounds, checked by `check_ranges` (None is allowed where the type allows it)."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    return dataclasses.field(default=default, metadata={"range": bounds})


_BOUND_TESTS = {"ge": (lambda v, b: v >= b, ">="), "gt": (lambda v, b: v > b, ">"),
                "le": (lambda v, b: v <= b, "<="), "lt": (lambda v, b: v < b, "<")}


def range_problem(value: Any, bounds: dict) -> str | None:
    """Why `value` breaks `bounds` (a `ranged` field's), or None when it is within them."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = type(value)
        if kind.__module__ == "numpy":  # np.int64(5) once read "must be a number, got 5"
            return f"must be a Python int or float, got {kind.__module__}.{kind.__name__} {value!r}: convert it with int() or float()"
        return f"must be a number, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    broken = [f"{sign} {bound}" for key, bound in bounds.items()
              for test, sign in [_BOUND_TESTS[key]] if not test(value, bound)]
    return f"must be {' and '.join(broken)}, got {value!r}" if broken else None


def is_whole(value: Any, minimum: int | None = None) -> bool:
    """Whether `value` is a whole number >= `minimum` (None: of any sign, where the caller checks its range itself):
    an int or a numpy integer (`numbers.Integral`), not a bool (a float, 2.0 included, a string of digits or True is
    none). The one test behind the commands' and modules' count checks."""
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and (minimum is None or value >= minimum))


def is_bool(value: Any) -> bool:
    """Whether `value` is a bool, a numpy bool or a boolean array / tensor (a mask): never a position, though
    `operator.index` and `torch.as_tensor(..., dtype=long)` read True as 1. The one test behind the position checks
    (`aspire.batch`'s sentence selections and `DocBatch.index`, `aspire.data.facets`' selections)."""
    return isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


POSITIONS_AFTER_PADDING = ("roberta", "xlm-roberta", "camembert", "mpnet")  # position ids start after the padding id


def position_limit(model_config: Any) -> int | None:
    """The most word pieces a Hugging Face model reads, from its config (a transformers config or any object with
    its attributes, or the mapping of its `config.json`): its position embeddings, 2 fewer for the RoBERTa family
    (`POSITIONS_AFTER_PADDING`); None when the config does not say (no whole number of positions) or the model has
    no absolute positions (`position_biased_input: false`, DeBERTa's relative attention: its
    `max_position_embeddings` is no limit, it reads longer inputs). The one rule of the contextual encoder's window,
    the teacher's alignment length and the cross-encoder's `max_length`."""
    def get(key: str) -> Any:
        if isinstance(model_config, collections.abc.Mapping):
            return model_config.get(key)
        return getattr(model_config, key, None)

    positions = get("max_position_embeddings")
    if not is_whole(positions) or get("position_biased_input") is False:
        return None
    return positions - 2 if get("model_type") in POSITIONS_AFTER_PADDING else positions


def _union_args(tp: Any) -> tuple:
    """The members of a union annotation (`int | None` -> (int, NoneType)), or `(tp,)` for any other."""
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


def _wants_int(tp: Any) -> bool:
    """Whether a field annotated `tp` (a type, or its text under `from __future__ import annotations`) holds an
    integer: `int`, or `int | None` (`Optional[int]`), whose value checked against its bounds must be whole too."""
    if isinstance(tp, str):
        return tp.replace(" ", "") in ("int", "int|None", "None|int", "Optional[int]", "typing.Optional[int]")
    args = _union_args(tp)
    return int in args and all(a in (int, type(None)) for a in args)


def check_ranges(config: Any, where: str = "") -> None:
    """Raise ConfigError naming the first `ranged` field of `config` (one level) outside its bounds, or not whole
    where it is declared `int` or `int | None`."""
    for f in dataclasses.fields(config):
        if "range" not in f.metadata:
            continue
        value = getattr(config, f.name)
        problem = range_problem(value, f.metadata["range"])
        if problem is None and _wants_int(f.type) and value is not None and not isinstance(value, int):
            problem = f"must be an integer, got {value!r}"
        if problem:
            raise ConfigError(f"{where + '.' if where else ''}{f.name}: {problem}")


class _Int(int):
    """An integer read from YAML, with the text it was written as (`text`): a string field takes the text."""

    text: str


class _Float(float):
    """A float read from YAML, with the text it was written as (`text`)."""

    text: str


_OCTAL_11 = re.compile(r"[-+]?0[0-7_]+")  # YAML 1.1's octal; YAML 1.2 reads the same digits as a decimal


def _yaml11_only(value: Any) -> str | None:
    """Why the number `value` (as `parse_yaml` read it) has another value in YAML 1.2, and how to write it, or None."""
    text = getattr(value, "text", None)
    if not isinstance(value, (_Int, _Float)) or text is None:
        return None
    if ":" in text:  # no leading 0 to drop here, unlike the octal
        return (f"{text} is the base-60 number {value!r} in YAML 1.1 and text in YAML 1.2: write {value!r} for the "
                "number (or quote it, for text)")
    if _OCTAL_11.fullmatch(text):
        decimal = int(text.replace("_", ""), 10)
        if decimal != value:
            return (f"{text} is the octal number {value!r} in YAML 1.1 but {decimal} in YAML 1.2: write the number "
                    "without its leading 0 (or quote it, for text)")
    return None


def _type_name(value: Any) -> str:
    """`value`'s type as a message names it (a number `parse_yaml` read is an int or a float)."""
    return "int" if isinstance(value, _Int) else "float" if isinstance(value, _Float) else type(value).__name__


def _plain(value: Any, where: str) -> Any:
    """`value` with every number `parse_yaml` read as a plain int or float (a list or mapping, item by item);
    ConfigError naming `where` for a number YAML 1.1 and 1.2 read differently (`_yaml11_only`)."""
    if isinstance(value, (_Int, _Float)):
        problem = _yaml11_only(value)
        if problem:
            raise ConfigError(f"{where}: {problem}")
        return int(value) if isinstance(value, int) else float(value)
    if isinstance(value, dict):
        return {_plain(k, where): _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    return value


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML/CLI value to the annotated type `tp`, or raise ConfigError naming `where`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as err:
                errors.append(str(err))
        if len(errors) == 1:  # `int | None`: the int's own reason
            raise ConfigError(errors[0])
        raise ConfigError(f"{where}: {value!r} matches none of {tp}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping for {tp.__name__}, got {value!r}")
        return _from_dict(tp, value, where)
    if origin in (list, tuple, Sequence, collections.abc.Sequence):  # get_origin(Sequence[str]) is the abc's
        given = value
        if isinstance(value, str):  # a quoted flow list, `'[a, b]'`
            value = parse_yaml(value, where)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {given!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        given = value
        if isinstance(value, str):  # a quoted flow mapping, `'{a: 1}'`
            value = parse_yaml(value, where)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {given!r}")
        key_tp, value_tp = typing.get_args(tp) or (Any, Any)
        return {_coerce(k, key_tp, where): _coerce(v, value_tp, f"{where}.{k}") for k, v in value.items()}
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {list(typing.get_args(tp))}")
        return _plain(value, where)
    if tp is Any:
        return _plain(value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
        value = _plain(value, where)
        try:
            converted = tp(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}") from None
        if tp is int and isinstance(value, float) and converted != value:
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return converted
    if tp is str:
        if value is None:  # str(None) would be the text "None"
            raise ConfigError(f"{where}: expected a string, got null (no value)")
        if isinstance(value, bool):  # str(True) would be "True", whatever the user typed
            raise ConfigError(f"{where}: expected a string, got the boolean {str(value).lower()} (unquoted yes, no, "
                              f"on, off, true and false are booleans in YAML): quote the text")
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        if isinstance(value, (_Int, _Float)):  # the text as written: `0123` stays "0123" (str(83) would not)
            return value.text
        return str(value)
    return _plain(value, where)


def _from_dict(cls: type[T], data: dict, where: str = "") -> T:
    types_ = _field_types(cls)
    unknown = sorted(map(str, set(data) - set(types_)))  # a key YAML read as a number is unknown too
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(
            f"unknown config key(s) {[prefix + k for k in unknown]}; valid keys under "
            f"{where or 'the top level'}: {sorted(types_)}"
        )
    kwargs = {k: _coerce(v, types_[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    config = cls(**kwargs)
    check_ranges(config, where)
    return config


def from_dict(cls: type[T], data: dict) -> T:
    """Build config `cls` from a plain nested dict (e.g. one saved beside a model), checked as a file is."""
    return _from_dict(cls, data)


def _section(tp: Any) -> type | None:
    """The dataclass a field annotated `tp` holds (`Optim` or `Optim | None`), or None when it is no section (or
    `tp` is None: a field not known)."""
    found = [a for a in _union_args(tp) if dataclasses.is_dataclass(a) and isinstance(a, type)]
    return found[0] if len(found) == 1 else None


def _holds_mapping(tp: Any) -> bool:
    """Whether a field annotated `tp` holds a mapping as one value, not a section (`dict[str, float]`, `dict`,
    `dict | None`); False for None (a field not known)."""
    return _section(tp) is None and any(a is dict or typing.get_origin(a) in (dict, collections.abc.Mapping)
                                        for a in _union_args(tp))


def _merge(base: dict, update: dict, where: str = "", cls: type | None = None) -> dict:
    """`base` with `update` laid over it, section by section. A section `update` leaves empty (`train:` with
    every key under it commented out: null) is a ConfigError: laid over `base`'s section it would drop that
    section whole, silently, once any override filled it in again. Given the config class `cls`, a field typed
    as a mapping (`term_scale: dict[str, float]`) is one value, not a section: a mapping given for it replaces
    `base`'s whole, as a list does (`{}` empties it), so a key of `base`'s never survives unasked."""
    out = dict(base)
    fields = _field_types(cls) if cls is not None else {}
    for key, value in update.items():
        name, old, tp = f"{where}{key}", out.get(key), fields.get(key)
        if _holds_mapping(tp) and (value is None or isinstance(value, dict)):
            out[key] = value
        elif isinstance(value, dict) and isinstance(old, dict):
            out[key] = _merge(old, value, f"{name}.", _section(tp))
        elif value is None and isinstance(old, dict):
            raise ConfigError(f"{name}: a section with nothing under it; give its keys or remove the line")
        elif isinstance(old, dict) and not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping of its keys, got {_type_name(value)} {value!r}")
        elif isinstance(value, dict) and old is not None:  # `train.lr.x=1`, `model.encoder={a: 1}`
            raise ConfigError(f"{name}: is one value ({_type_name(old)} {old!r}), not a section; got the mapping "
                              f"{value!r}")
        else:
            out[key] = value
    return out


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping holding one key twice (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges are not keys of their own
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: SafeLoader's own error says so
                    break
                if first is not key_node.start_mark:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice (first at line {first.line + 1}, column "
                                    f"{first.column + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> _Int:
    value = _Int(yaml.constructor.SafeConstructor.construct_yaml_int(loader, node))
    value.text = node.value
    return value


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> _Float:
    value = _Float(yaml.constructor.SafeConstructor.construct_yaml_float(loader, node))
    value.text = node.value
    return value


# YAML 1.2's floats that YAML 1.1 reads as text: no dot (`1e-3`) or an unsigned exponent (`1.5e3`)
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.constructor.SafeConstructor.construct_scalar)
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))


class _Dumper(yaml.SafeDumper):
    """yaml.SafeDumper that quotes a string `parse_yaml` would read as a number (`"1e-3"`), so a saved config
    loads back unchanged."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))


def parse_yaml(text: str, source: str | Path) -> Any:
    """The YAML document `text` (from `source`, a file or `override 'x=y'`), with safe types only; a
    syntax error or a key given twice raises ConfigError `SOURCE:LINE:COLUMN: what is wrong`, one line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(source)
        what = "; ".join(" ".join(str(part).split()) for part in (err.context, err.problem) if part)
        raise ConfigError(f"{where}: {what or 'invalid YAML'}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: invalid YAML: {' '.join(str(err).split())}") from None


def read_yaml(path: str | Path, _below: tuple[Path, ...] = (), cls: type | None = None) -> dict:
    """Read a YAML config, following `base: other.yaml` (relative to the file) recursively, its sections laid
    over the base's key by key (`_merge`; given the config class `cls`, a mapping-typed field replaces the base's
    whole). A syntax error or a key given twice is a ConfigError naming the file, line and column (`parse_yaml`);
    so is a `base` that is not a file name, names no file, or leads back to a file that names it (a cycle)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    if path.resolve() in _below:
        chain = " -> ".join(str(p) for p in (*_below, path.resolve()))
        raise ConfigError(f"{path}: its base files lead back to it ({chain})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 ({err.reason} at byte {err.start})") from None
    data = parse_yaml(text, path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str) or not base.strip():
            raise ConfigError(f"{path}: base: expected the name of a YAML file, got {base!r}")
        if not (path.parent / base).is_file():
            raise ConfigError(f"{path}: base: config file not found: {path.parent / base}")
        below = read_yaml(path.parent / base, (*_below, path.resolve()), cls)  # its own errors name it
        try:
            data = _merge(below, data, cls=cls)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None
    return data


def parse_overrides(overrides: Sequence[str], cls: type | None = None) -> dict:
    """`["train.lr=1e-5", "--model.name=mpnet"]` -> nested dict; values parsed as YAML (flow lists and
    mappings too; `key=` is the empty string). A key given again wins over the earlier value, key by key: a
    mapping given for a section keeps the earlier overrides of its other keys (`train.lr=3 train={seed: 1}`).
    Given the config class `cls`, a mapping given again for a mapping-typed field replaces the earlier one whole
    (`_merge`)."""
    nested: dict = {}
    for item in overrides:
        text = item[2:] if item.startswith("--") else item
        if "=" not in text:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        dotted, raw = text.split("=", 1)
        keys = dotted.split(".")
        node, section = nested, cls
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with an earlier override")
            section = _section(_field_types(section).get(key)) if section is not None else None
        value = parse_yaml(raw, f"override {item!r}") if raw != "" else ""
        earlier = node.get(keys[-1])
        tp = _field_types(section).get(keys[-1]) if section is not None else None
        merged = isinstance(earlier, dict) and isinstance(value, dict) and not _holds_mapping(tp)
        node[keys[-1]] = _merge(earlier, value, f"{dotted}.", _section(tp)) if merged else value
    return nested


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Build `cls` from defaults, then the YAML file at `path`, then dotted `overrides`. Sections merge key by key;
    a list- or mapping-typed field given again is replaced whole (`loss.term_scale={ot: 2}` drops the file's
    other scales, and so does the dotted `loss.term_scale.ot=2`; `loss.term_scale={}` empties it), never merged into."""
    data = read_yaml(path, cls=cls) if path is not None else {}
    data = _merge(data, parse_overrides(overrides, cls), cls=cls)
    return _from_dict(cls, data)


def apply_overrides(config: T, overrides: Sequence[str], where: str = "") -> T:
    """A copy of a loaded `config` with dotted `overrides` applied (unknown keys raise ConfigError)."""
    data = _merge(to_dict(config), parse_overrides(overrides, type(config)), f"{where}." if where else "",  # its errors name `where` too
                  type(config))
    return _from_dict(type(config), data, where)


def to_dict(config: Any) -> dict:
    return dataclasses.asdict(config)


def save_config(config: Any, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically: `aspire.io.write_text`)."""
    write_text(path, yaml.dump(json.loads(json.dumps(to_dict(config))), Dumper=_Dumper, sort_keys=False))
