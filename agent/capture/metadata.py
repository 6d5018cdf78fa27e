"""Capture metadata as files hold it: checked field by field, merged with what the command
line sets, and read from a CSV capture's YAML sidecar.

Errors are CaptureError naming the file, the field and (in a sidecar) its line; the formats
themselves are agent.capture.files's.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agent.capture.encoder import MAX_BITS, MIN_BITS, counts_per_turn
from agent.capture.model import CaptureMeta
from agent.errors import CaptureError, unreadable
from agent.schema.yaml_lines import TextLines, physical_line

_STR_FIELDS = ("machine", "joint", "cycle", "started_at")
_POSITIVE_FIELDS = ("gear_ratio", "sample_rate_hz")
# Values in a sidecar, aliases expanded: its fields and a small `extra` take a few dozen.
MAX_SIDECAR_NODES = 10_000
MAX_SIDECAR_BYTES = 1_000_000


def _plain(value: Any, source: str) -> Any:
    """A JSON- and YAML-safe copy of the `extra` metadata (numpy scalars become numbers)."""

    def default(o: Any) -> Any:
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, dt.date):  # YAML reads an unquoted timestamp as a datetime
            return o.isoformat()
        raise TypeError(f"{type(o).__name__} values cannot be stored")

    try:
        return json.loads(json.dumps(value, allow_nan=False, default=default))
    except (TypeError, ValueError, RecursionError) as e:
        raise CaptureError(source, f"field extra: {e}") from None


def check_meta(
    meta: CaptureMeta, source: str, lines: Mapping[str, int] | None = None
) -> CaptureMeta:
    """A copy of `meta` with plain, checked values; errors name the field (and its line)."""

    def fail(name: str, problem: str) -> CaptureError:
        line = (lines or {}).get(name)
        return CaptureError(f"{source}:{line}" if line else source, f"field {name}: {problem}")

    out: dict[str, Any] = {}
    for f in fields(CaptureMeta):
        value = getattr(meta, f.name)
        if f.name in _STR_FIELDS:
            if isinstance(value, dt.date):
                value = value.isoformat()
            elif isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # a YAML `joint: 3` means the joint named "3"
            elif value is None:
                value = ""
            if not isinstance(value, str):
                raise fail(f.name, f"expected a string (quote it in YAML), got {value!r}")
        elif f.name == "encoder_bits":
            if value is not None:
                try:
                    counts_per_turn(value)
                except ValueError:
                    raise fail(
                        f.name, f"expected an integer {MIN_BITS}..{MAX_BITS}, got {value!r}"
                    ) from None
                value = int(value)
        elif f.name == "extra":
            if not isinstance(value, Mapping):
                raise fail(f.name, f"expected a mapping, got {value!r}")
            value = _plain(dict(value), source)
        elif value is not None:  # the float fields
            if isinstance(value, bool) or not isinstance(
                value, int | float | np.integer | np.floating
            ):
                raise fail(f.name, f"expected a number, got {value!r}")
            try:
                value = float(value)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                raise fail(f.name, f"expected a finite number, got {value!r}")
            if f.name in _POSITIVE_FIELDS and value <= 0:
                raise fail(f.name, f"must be positive, got {value!r}")
        out[f.name] = value
    return CaptureMeta(**out)


def meta_from_mapping(raw: Any, source: str, lines: Mapping[str, int] | None = None) -> CaptureMeta:
    if raw is None:
        return CaptureMeta()
    if not isinstance(raw, Mapping):
        raise CaptureError(source, "metadata must be a mapping of field: value")
    known = [f.name for f in fields(CaptureMeta)]
    for key in raw:
        if key not in known:
            line = (lines or {}).get(str(key))
            raise CaptureError(
                f"{source}:{line}" if line else source,
                f"unknown metadata field {key!r}; expected one of {', '.join(known)}",
            )
    extra = raw.get("extra")
    values = {k: v for k, v in raw.items() if k != "extra"}
    meta = CaptureMeta(**values, extra=extra if extra is not None else {})
    return check_meta(meta, source, lines)


def merge_meta(base: CaptureMeta, override: CaptureMeta | None) -> CaptureMeta:
    """`base` with every field `override` sets (None, "" and an empty extra set nothing)."""
    if override is None:
        return base
    changes: dict[str, Any] = {}
    for f in fields(CaptureMeta):
        value = getattr(override, f.name)
        if value is None or (isinstance(value, str) and value == ""):
            continue
        if f.name == "extra":
            if value:
                changes["extra"] = {**base.extra, **value}
            continue
        changes[f.name] = value
    return replace(base, **changes)


def _expanded_nodes(root: yaml.Node) -> int:
    """Values in the document once its aliases are expanded, counted up to just past the bound:
    nine aliases of nine aliases... (a "billion laughs") stay small as a file and as a node
    tree, but json.dumps of the metadata would expand them all."""
    stack, count = [root], 0
    while stack and count <= MAX_SIDECAR_NODES:
        node = stack.pop()
        count += 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack += (key, value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return count


def read_sidecar(path: Path) -> CaptureMeta:
    source = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SIDECAR_BYTES + 1)
        if len(data) > MAX_SIDECAR_BYTES:
            raise CaptureError(
                source, f"more than {MAX_SIDECAR_BYTES:,} bytes; a sidecar holds a few fields"
            )
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CaptureError(source, f"not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise unreadable(source, e) from None
    loader: yaml.SafeLoader | None = None
    try:
        # One parse: the node tree gives the key lines, the same tree builds the values.
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is not None and _expanded_nodes(node) > MAX_SIDECAR_NODES:
            raise CaptureError(
                source,
                f"the metadata expands to more than {MAX_SIDECAR_NODES:,} values (aliases?); "
                "a sidecar holds a few fields",
            )
        raw = loader.construct_document(node) if node is not None else None
    except CaptureError:
        raise
    except Exception as e:
        # PyYAML raises ValueError, AttributeError or RecursionError as well as YAMLError on
        # some malformed input (a timestamp with month 13, deep nesting).
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{physical_line(text, mark.index)}" if mark is not None else source
        problem = getattr(e, "problem", None) or str(e) or type(e).__name__
        raise CaptureError(where, f"invalid YAML: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        text_lines = TextLines(text)
        for key_node, _ in node.value:
            lines[str(key_node.value)] = text_lines.at(key_node.start_mark.index)[0]
    return meta_from_mapping(raw, source, lines)
