"""Validate a line-tracked YAML tree (agent.schema.yaml_lines.Node) into frozen dataclasses.

The dataclass is the schema: its type hints say what each key holds, `field(metadata=...)` adds
  gt / ge / lt / le : numeric bounds (element-wise on lists and mapping values)
  min_len           : least number of items (or characters)
  doc               : one-line help, quoted when a required key is missing
  internal=True     : not settable from the file
Supported types: str, int, float, bool, Literal[...], Enum, X | None (and other unions),
tuple[X, ...], tuple[X, Y], list[X], dict[K, V], nested dataclasses, Any (plain value passes).

Every mistake in the tree is collected in one pass (a wrong key does not hide the next one) as a
ConfigIssue naming file, line, dotted path, what was expected and what was found (the words:
agent.schema.messages). Unknown keys are errors, with a "did you mean" when one is close.
Cross-field rules: a dataclass may define `check(self) -> list[tuple[str, str]]`, and callers may
pass more per-class checks; each returns (relative path, message) pairs reported at that path's
line. They run on every object that built.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from agent.schema.messages import (
    NO_META,
    SchemaDefinitionError,
    describe,
    finite,
    found,
    is_dataclass_type,
    suggest,
)
from agent.schema.yaml_lines import (
    ConfigIssue,
    Node,
    config_error,
    join_path,
    load_yaml,
    split_path,
)

T = TypeVar("T")
Check = Callable[[Any], Iterable[tuple[str, str]]]

_INVALID: Any = object()  # a value that could not be converted; its issue is already recorded


def validate(
    tp: type[T],
    node: Node,
    file: str,
    *,
    path: str = "",
    checks: Mapping[type, Check] | None = None,
) -> tuple[T | None, list[ConfigIssue]]:
    """Convert `node` to `tp`: (the value, []) or (None, every issue sorted by line)."""
    run = _Run(file, checks or {})
    value = run.convert(tp, node, path, NO_META)
    if run.issues or value is _INVALID:
        return None, sorted(run.issues, key=lambda i: i.line)
    return value, []


def build(
    tp: type[T],
    node: Node,
    file: str,
    *,
    path: str = "",
    checks: Mapping[type, Check] | None = None,
) -> T:
    """Like validate, but raise one ConfigError listing every issue."""
    value, issues = validate(tp, node, file, path=path, checks=checks)
    if issues or value is None:
        raise config_error(issues)
    return value


def load(tp: type[T], path: str | Path, *, checks: Mapping[type, Check] | None = None) -> T:
    """Read a YAML file and build `tp` from it."""
    return build(tp, load_yaml(path), str(path), checks=checks)


class _Run:
    """One validation pass: the conversion functions, and the issues found so far."""

    def __init__(self, file: str, checks: Mapping[type, Check]) -> None:
        self.file = file
        self.checks = checks
        self.issues: list[ConfigIssue] = []

    def add(self, line: int, path: str, message: str) -> None:
        self.issues.append(ConfigIssue(self.file, line, path, message))

    def expected(self, tp: Any, meta: Mapping[str, Any], node: Node, path: str) -> Any:
        self.add(node.line, path, f"expected {describe(tp, meta)}, found {found(node)}")
        return _INVALID

    def convert(self, tp: Any, node: Node, path: str, meta: Mapping[str, Any]) -> Any:
        origin = get_origin(tp)
        if tp is Any or tp is object:
            return node.plain()
        if origin in (Union, types.UnionType):
            return self.union(tp, node, path, meta)
        if origin is Literal:
            return self.choice(tp, get_args(tp), node, path, lambda a: a)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            members = list(tp)
            value = self.choice(tp, [m.value for m in members], node, path, lambda a: a)
            return value if value is _INVALID else tp(value)
        if is_dataclass_type(tp):
            return self.dataclass(tp, node, path)
        if tp in (bool, int, float, str):
            return self.scalar(tp, node, path, meta)
        if tp is type(None):
            return None if node.is_null else self.expected(tp, meta, node, path)
        if origin is tuple or tp is tuple or origin is list or tp is list:
            return self.sequence(tp, node, path, meta)
        if origin is dict or tp is dict:
            return self.mapping(tp, node, path, meta)
        raise SchemaDefinitionError(f"agent.schema.validate cannot validate values of type {tp!r}")

    def union(self, tp: Any, node: Node, path: str, meta: Mapping[str, Any]) -> Any:
        args = get_args(tp)
        if node.is_null and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:
            trial = _Run(self.file, self.checks)
            value = trial.convert(others[0], node, path, meta)
            if trial.issues and all(i.path == path for i in trial.issues):
                return self.expected(tp, meta, node, path)  # say "or null" too
            self.issues.extend(trial.issues)
            return value
        for option in others:  # first option that takes the value without complaint wins
            trial = _Run(self.file, self.checks)
            value = trial.convert(option, node, path, meta)
            if not trial.issues and value is not _INVALID:
                return value
        return self.expected(tp, meta, node, path)

    def choice(
        self, tp: Any, options: Iterable[Any], node: Node, path: str, pick: Callable[[Any], Any]
    ) -> Any:
        opts = list(options)
        if node.kind == "scalar":
            for opt in opts:
                if type(opt) is type(node.value) and opt == node.value:
                    return pick(opt)
        msg = f"expected {describe(tp)}, found {found(node)}"
        if node.kind == "scalar" and isinstance(node.value, str):
            names = [o for o in opts if isinstance(o, str)]
            msg += suggest(node.value, names)
        self.add(node.line, path, msg)
        return _INVALID

    def scalar(self, tp: type, node: Node, path: str, meta: Mapping[str, Any]) -> Any:
        v = node.value
        if node.kind != "scalar":
            return self.expected(tp, meta, node, path)
        if tp is bool:
            return v if isinstance(v, bool) else self.expected(tp, meta, node, path)
        if tp is str:
            if not isinstance(v, str):
                return self.expected(tp, meta, node, path)
            if len(v) < meta.get("min_len", 0):
                return self.expected(tp, meta, node, path)
            return v
        # numbers: YAML booleans are not numbers, whatever Python thinks
        if isinstance(v, bool) or not isinstance(v, int | float) or not finite(v):
            return self.expected(tp, meta, node, path)
        if tp is int:
            if isinstance(v, float):
                if not v.is_integer():
                    return self.expected(tp, meta, node, path)
                v = int(v)
        else:
            v = float(v)
        if not _within(v, meta):
            return self.expected(tp, meta, node, path)
        return v

    def sequence(self, tp: Any, node: Node, path: str, meta: Mapping[str, Any]) -> Any:
        args = get_args(tp)
        is_tuple = get_origin(tp) is tuple or tp is tuple
        if node.kind != "sequence":
            return self.expected(tp, meta, node, path)
        if is_tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            if len(node.items) != len(args):
                return self.expected(tp, meta, node, path)
            item_types = list(args)
        else:
            item_types = [args[0] if args else Any] * len(node.items)
        if len(node.items) < meta.get("min_len", 0):
            return self.expected(tp, meta, node, path)
        inner = _element_meta(meta)
        out = [
            self.convert(t, item, join_path(path, i), inner)
            for i, (t, item) in enumerate(zip(item_types, node.items, strict=True))
        ]
        if any(v is _INVALID for v in out):
            return _INVALID
        return tuple(out) if is_tuple else out

    def mapping(self, tp: Any, node: Node, path: str, meta: Mapping[str, Any]) -> Any:
        args = get_args(tp)
        key_tp, value_tp = args if len(args) == 2 else (Any, Any)
        if node.kind != "mapping":
            return self.expected(tp, meta, node, path)
        if len(node.entries) < meta.get("min_len", 0):
            return self.expected(tp, meta, node, path)
        inner = _element_meta(meta)
        out: dict[Any, Any] = {}
        ok = True
        for k, v in node.entries:
            kpath = join_path(path, k.name)
            key = self.convert(key_tp, k, kpath, NO_META)
            value = self.convert(value_tp, v, kpath, inner)
            if key is _INVALID or value is _INVALID:
                ok = False
            else:
                out[key] = value
        return out if ok else _INVALID

    def dataclass(self, cls: type, node: Node, path: str) -> Any:
        if node.kind != "mapping":
            return self.expected(cls, NO_META, node, path)
        fields = _settable_fields(cls)
        hints = _hints(cls)
        kwargs: dict[str, Any] = {}
        ok = True
        for k, v in node.entries:
            name = k.name
            fpath = join_path(path, name)
            f = fields.get(name)
            if f is None:
                self.add(k.line, fpath, "unknown key" + suggest(name, list(fields), list_all=True))
                ok = False
                continue
            value = self.convert(hints[name], v, fpath, f.metadata)
            if value is _INVALID:
                ok = False
            else:
                kwargs[name] = value
        present = {k.name for k, _ in node.entries}
        for name, f in fields.items():
            if name not in present and _required(f):
                help_text = f" ({f.metadata['doc']})" if f.metadata.get("doc") else ""
                expect = describe(hints[name], f.metadata)
                msg = f"required key is missing: expected {expect}{help_text}"
                self.add(node.line, join_path(path, name), msg)
                ok = False
        if not ok:
            return _INVALID
        try:
            obj = cls(**kwargs)
        except (TypeError, ValueError) as exc:  # a __post_init__ that refuses the values
            self.add(node.line, path, f"invalid {cls.__name__}: {exc}")
            return _INVALID
        self.run_checks(obj, node, path)
        return obj

    def run_checks(self, obj: Any, node: Node, path: str) -> None:
        found: list[tuple[str, str]] = []
        own = getattr(obj, "check", None)
        if callable(own):
            found.extend(own())
        extra = self.checks.get(type(obj))
        if extra is not None:
            found.extend(extra(obj))
        for rel, message in found:
            parts = split_path(rel) if rel else []
            target = path
            for part in parts:
                target = join_path(target, part)
            self.add(node.line_of(parts), target, message)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    try:
        return get_type_hints(cls)
    except (NameError, TypeError) as exc:
        raise SchemaDefinitionError(f"cannot resolve the type hints of {cls!r}: {exc}") from exc


@functools.cache
def _settable_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {
        f.name: f
        for f in dataclasses.fields(cls)
        if f.init and not f.metadata.get("internal", False)
    }


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _element_meta(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """Bounds apply to each item of a list or mapping; min_len to the container itself."""
    return {k: v for k, v in meta.items() if k in ("gt", "ge", "lt", "le")} or NO_META


def _within(v: int | float, meta: Mapping[str, Any]) -> bool:
    return (
        ("gt" not in meta or v > meta["gt"])
        and ("ge" not in meta or v >= meta["ge"])
        and ("lt" not in meta or v < meta["lt"])
        and ("le" not in meta or v <= meta["le"])
    )
