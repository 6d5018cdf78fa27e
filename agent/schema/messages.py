"""The words of the schema's messages (agent.schema.validate): what a type expects
(describe: 'a number > 0', 'one of 'grbl', 'dnc''), how a value was written (found: numbers as
typed, strings quoted, 'a list of 2 items'), and the 'did you mean' of a misspelt name.

SchemaDefinitionError is a schema that uses a type these words (and the validator) do not
know: a programming error, not a config one.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from agent.schema.yaml_lines import Node

NO_META: Mapping[str, Any] = types.MappingProxyType({})
_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
_FOUND_MAX = 60


class SchemaDefinitionError(TypeError):
    """The schema uses a type this module cannot validate: a programming error, not a config one."""


def describe(tp: Any, meta: Mapping[str, Any] = NO_META) -> str:
    """What a value of `tp` with `meta` constraints looks like, for messages: 'a number > 0'."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        others = [a for a in args if a is not type(None)]
        text = " or ".join(describe(a, meta) for a in others)
        return text + " or null" if len(others) < len(args) else text
    if origin is Literal:
        return "one of " + ", ".join(_show(a) for a in args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(_show(m.value) for m in tp)
    bounds = _bounds_text(meta)
    min_len = meta.get("min_len")
    if tp in (str, int, float, bool):
        base = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}[tp]
        if tp is str and min_len:
            return base + f" of at least {_count(min_len, 'character')}"
        return f"{base} {bounds}" if bounds and tp is not bool else base
    if tp is type(None):
        return "null"
    if tp is Any or tp is object:
        return "any value"
    if origin is tuple or tp is tuple:
        if args and (len(args) != 2 or args[1] is not Ellipsis):
            return f"a list of {len(args)} " + _plural(args, meta)
        text = "a list of " + _plural(args[:1], meta)
    elif origin is list or tp is list:
        text = "a list of " + _plural(args[:1], meta)
    elif origin is dict or tp is dict or is_dataclass_type(tp):
        text = "a mapping"
    else:
        raise SchemaDefinitionError(f"agent.schema.validate cannot validate values of type {tp!r}")
    return text + (f" with at least {_count(min_len, 'item')}" if min_len else "")


def is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def finite(v: int | float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int too large for a float
        return False


def _bounds_text(meta: Mapping[str, Any]) -> str:
    return " and ".join(f"{op} {_num(meta[key])}" for key, op in _BOUNDS if key in meta)


def _num(x: Any) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x) if isinstance(x, float) else str(x)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _plural(args: tuple[Any, ...], meta: Mapping[str, Any]) -> str:
    names = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}
    if len(set(args)) != 1:
        return "items"
    tp = args[0]
    if tp in names:
        bounds = _bounds_text(meta)
        return f"{names[tp]} {bounds}" if bounds and tp is not bool else names[tp]
    if is_dataclass_type(tp) or get_origin(tp) is dict:
        return "mappings"
    return "items"


_YAML11_BOOLS = frozenset({"yes", "no", "on", "off", "y", "n"})
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _clip(text: str) -> str:
    return text if len(text) <= _FOUND_MAX else text[: _FOUND_MAX - 3] + "..."


def found(node: Node) -> str:
    """How a value was written, for 'found ...': numbers as typed, strings quoted."""
    if node.kind == "mapping":
        return f"a mapping of {_count(len(node.entries), 'key')}" if node.entries else "{}"
    if node.kind == "sequence":
        return f"a list of {_count(len(node.items), 'item')}" if node.items else "an empty list"
    v = node.value
    if v is None:
        return "an empty value" if node.text == "" else f"{node.text} (null)"
    if isinstance(v, bool):
        return node.text
    if isinstance(v, str):
        # Files are read as YAML 1.2: what YAML 1.1 tools made a boolean or a number is text.
        if v.lower() in _YAML11_BOOLS:
            return f"{_clip(repr(v))} (text in YAML 1.2, not a boolean: write true or false)"
        if _SEXAGESIMAL.fullmatch(v):
            return f"{_clip(repr(v))} (text, not the base-60 number YAML 1.1 read)"
        return _clip(repr(v))
    if isinstance(v, int | float):
        text = _clip(node.text)
        if finite(v):
            return text
        return f"{text} (too large)" if isinstance(v, int) else f"{text} (not a finite number)"
    if isinstance(v, bytes):
        return "binary data"
    return f"{_clip(node.text)} (a {type(v).__name__})"


def suggest(word: str, names: list[str], *, list_all: bool = False) -> str:
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if list_all and names:
        return "; expected one of: " + ", ".join(names)
    return ""
