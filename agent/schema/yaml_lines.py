"""YAML text -> a tree of `Node`s that remember where every key and value was written.

Built on PyYAML's safe loader at the node level (compose, not construct), so each error can
name file:line. On top of plain PyYAML:
  * a key written twice in one mapping is an error naming both lines (PyYAML keeps the last);
  * plain scalars resolve by YAML 1.2's core schema: `2e5` is a float (a string in YAML 1.1, a
    trap in a file full of SI values), `1:20` and `yes` are strings (80 and true in YAML 1.1),
    `010` is ten;
  * merge keys (`<<: *defaults`) are applied, explicit keys winning;
  * aliases that contain themselves or expand to a huge tree are errors, not hangs.

Lines and columns are 1-based. `ConfigIssue` is the one error record shared with
agent.schema.validate.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from agent.errors import ConfigError

Kind = Literal["scalar", "sequence", "mapping"]
PathPart = str | int

# A real config has hundreds of nodes; past this, aliases are being used to blow the tree up.
MAX_EXPANDED_NODES = 200_000

_YAML_TAG = "tag:yaml.org,2002:"
_MAPPING_TAGS = frozenset({_YAML_TAG + "map", _YAML_TAG + "set"})
_SEQUENCE_TAGS = frozenset({_YAML_TAG + "seq", _YAML_TAG + "omap", _YAML_TAG + "pairs"})
_NULL_TAG = _YAML_TAG + "null"
_MERGE_TAG = _YAML_TAG + "merge"


@dataclass(frozen=True)
class ConfigIssue:
    """One mistake in a file: where it is, which field, what was expected and what was found."""

    file: str
    line: int  # 1-based; 0 when the problem is the whole file (it cannot be read)
    path: str  # dotted field path, e.g. controllers[0].joints[1].gear_ratio; "" for the root
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line > 0 else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_error(issues: Iterable[ConfigIssue]) -> ConfigError:
    """A ConfigError listing every issue, one per line, with the list attached as `.issues`."""
    found = list(issues)
    err = ConfigError("\n".join(str(i) for i in found))
    err.issues = found  # type: ignore[attr-defined]
    return err


def issues_of(err: BaseException) -> list[ConfigIssue]:
    """The issues a ConfigError carries (empty for errors raised elsewhere without a list)."""
    return list(getattr(err, "issues", []))


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_PATH_TOKEN = re.compile(
    r"\.?([A-Za-z_][A-Za-z0-9_-]*)"  # .name
    r"|\[(\d+)\]"  # [index]
    r"|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]"  # ['quoted key']
)


def join_path(base: str, part: PathPart) -> str:
    """`controllers` + 0 -> `controllers[0]`; keys that are not identifiers are quoted."""
    if isinstance(part, int):
        return f"{base}[{part}]"
    if _IDENT.match(part):
        return f"{base}.{part}" if base else part
    return f"{base}[{part!r}]"


def split_path(path: str) -> list[PathPart]:
    """Inverse of join_path: `a.b[2]['x y']` -> ['a', 'b', 2, 'x y']."""
    parts: list[PathPart] = []
    pos = 0
    while pos < len(path):
        m = _PATH_TOKEN.match(path, pos)
        if m is None or (m.group(1) is not None and pos > 0 and path[pos] != "."):
            raise ValueError(f"malformed field path {path!r} at character {pos}")
        if m.group(1) is not None:
            parts.append(m.group(1))
        elif m.group(2) is not None:
            parts.append(int(m.group(2)))
        else:
            parts.append(str(ast.literal_eval(m.group(3))))
        pos = m.end()
    return parts


@dataclass(frozen=True, eq=False)
class Node:
    """One YAML node and where it starts.

    scalar: `value` is what YAML resolved (str, int, float, bool, None, date...), `text` is the
    scalar as written (without quotes); sequence: `items`; mapping: `entries` of (key, value).
    """

    kind: Kind
    line: int
    col: int
    value: Any = None
    text: str = ""
    tag: str = ""
    items: tuple[Node, ...] = ()
    entries: tuple[tuple[Node, Node], ...] = ()

    @property
    def is_null(self) -> bool:
        return self.kind == "scalar" and self.value is None

    @property
    def name(self) -> str:
        """A key as a name: the string itself, or the text written for `1:`, `yes:`, `null:`."""
        return self.value if isinstance(self.value, str) else self.text

    def entry(self, key: str) -> tuple[Node, Node] | None:
        for k, v in self.entries:
            if k.kind == "scalar" and k.name == key:
                return k, v
        return None

    def get(self, key: str) -> Node | None:
        found = self.entry(key)
        return None if found is None else found[1]

    def find(self, parts: Sequence[PathPart]) -> Node | None:
        node: Node | None = self
        for part in parts:
            if node is None:
                return None
            if isinstance(part, int):
                node = node.items[part] if 0 <= part < len(node.items) else None
            else:
                node = node.get(part)
        return node

    def line_of(self, parts: Sequence[PathPart]) -> int:
        """Line of the key (or list item) at `parts` below this node; the deepest one present."""
        line, node = self.line, self
        for part in parts:
            if isinstance(part, int):
                if not 0 <= part < len(node.items):
                    break
                node = node.items[part]
                line = node.line
            else:
                found = node.entry(part)
                if found is None:
                    break
                line, node = found[0].line, found[1]
        return line

    def plain(self) -> Any:
        """The plain Python value: dicts, lists and scalars."""
        if self.kind == "mapping":
            return {k.value: v.plain() for k, v in self.entries}
        if self.kind == "sequence":
            return [item.plain() for item in self.items]
        return self.value


class _Loader(yaml.SafeLoader):
    """Safe loader with the YAML 1.2 core schema's plain scalars (see _core_schema)."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
        if digits[:2] == "0o":
            return sign * int(digits[2:], 8)
        if digits[:2] == "0x":
            return sign * int(digits[2:], 16)
        return sign * int(digits, 10)  # 010 is ten, as in YAML 1.2 (YAML 1.1: eight)


def _core_schema() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    """PyYAML's implicit resolvers with YAML 1.1's bool, int and float rules replaced by YAML
    1.2's core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution). YAML 1.1 reads
    `gear_ratio: 1:20` as the base-60 number 80, `on`/`no` as booleans and `010` as eight;
    under 1.2 the first two are strings (the schema then names the line) and `010` is ten.
    Exponent-only floats (2e5) are floats, as an SI-valued file needs."""
    replaced = {_YAML_TAG + t for t in ("bool", "int", "float")}
    table: dict[Any, list[tuple[str, re.Pattern[str]]]] = {
        first: [(tag, rx) for tag, rx in rules if tag not in replaced]
        for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    core = [
        ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
        ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
        (
            "float",
            r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
            "-+0123456789.",
        ),
    ]
    for tag, rx, firsts in core:
        pattern = re.compile(f"^(?:{rx})$")
        for first in firsts:
            table.setdefault(first, []).append((_YAML_TAG + tag, pattern))
    return table


_Loader.yaml_implicit_resolvers = _core_schema()
_Loader.add_constructor(_YAML_TAG + "int", _Loader.construct_yaml_int)


def load_yaml(path: str | Path) -> Node:
    """Read and parse one YAML file; every problem raises ConfigError naming file:line."""
    file = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        issue = ConfigIssue(file, 0, "", f"cannot read: {exc.strerror or exc}")
        raise config_error([issue]) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        msg = f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded"
        raise config_error([ConfigIssue(file, line, "", msg)]) from None
    return parse_yaml(text, file)


class TextLines:
    """Line and column of a character as an editor counts them: only LF ends a line.

    YAML also breaks lines at NEL (U+0085), LS (U+2028), PS (U+2029) and a lone CR, so PyYAML's
    own mark.line drifts from what an editor shows once one of those is in the file; an error
    must name the line a person can go to.
    """

    def __init__(self, text: str) -> None:
        self._starts = [0]
        i = text.find("\n")
        while i >= 0:
            self._starts.append(i + 1)
            i = text.find("\n", i + 1)
        trailing = 1 if text.endswith("\n") else 0
        self.last = max(1, len(self._starts) - trailing)

    def at(self, index: int) -> tuple[int, int]:
        """(line, column), both 1-based, of the character at `index` (clamped to the text)."""
        k = min(bisect.bisect_right(self._starts, max(0, index)) - 1, self.last - 1)
        return k + 1, max(0, index) - self._starts[k] + 1


def physical_line(text: str, index: int) -> int:
    """The 1-based line (LF-separated) holding character `index` of `text`."""
    return TextLines(text).at(index)[0]


def parse_yaml(text: str, file: str = "<string>") -> Node:
    """Parse YAML text holding one document; `file` is the name used in error messages."""
    lines = TextLines(text)
    try:
        loader = _Loader(text)  # the reader checks every character here
    except yaml.reader.ReaderError as exc:
        raise config_error([_reader_issue(exc, file, lines)]) from None
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            raise config_error([_syntax_issue(exc, file, lines)]) from None
        except yaml.reader.ReaderError as exc:
            raise config_error([_reader_issue(exc, file, lines)]) from None
        except RecursionError:
            msg = "YAML nesting is too deep"
            raise config_error([ConfigIssue(file, 1, "", msg)]) from None
        if root is None:
            msg = "the file is empty: expected a YAML document (it holds only comments or blanks)"
            raise config_error([ConfigIssue(file, 1, "", msg)])
        builder = _Builder(loader, file, lines)
        try:
            tree = builder.build(root, "")
        except RecursionError:
            raise config_error([ConfigIssue(file, 1, "", "YAML nesting is too deep")]) from None
        if builder.issues:
            raise config_error(sorted(builder.issues, key=lambda i: i.line))
        return tree
    finally:
        loader.dispose()


def _syntax_issue(exc: yaml.MarkedYAMLError, file: str, lines: TextLines) -> ConfigIssue:
    mark = exc.problem_mark or exc.context_mark
    line, col = lines.at(mark.index) if mark is not None else (1, 1)
    notes = [f"column {col}"] if mark is not None else []
    if exc.problem and exc.context:
        ctx_mark = exc.context_mark
        where = f" at line {lines.at(ctx_mark.index)[0]}" if ctx_mark is not None else ""
        notes.append(exc.context + where)
    problem = exc.problem or exc.context or "invalid YAML"
    note = f" ({'; '.join(notes)})" if notes else ""
    return ConfigIssue(file, line, "", f"YAML syntax error: {problem}{note}")


def _reader_issue(exc: yaml.reader.ReaderError, file: str, lines: TextLines) -> ConfigIssue:
    line = lines.at(exc.position)[0]
    char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
    msg = f"character U+{char:04X} is not allowed in YAML ({exc.reason})"
    return ConfigIssue(file, line, "", msg)


class _Builder:
    """Turns PyYAML nodes into Nodes, collecting every duplicate key and unreadable scalar."""

    def __init__(self, loader: _Loader, file: str, lines: TextLines) -> None:
        self.loader = loader
        self.file = file
        self.lines = lines
        self.issues: list[ConfigIssue] = []
        self._memo: dict[int, Node] = {}  # aliases share one Node
        self._size: dict[int, int] = {}  # expanded size, to stop alias bombs
        self._active: set[int] = set()

    def add(self, line: int, path: str, message: str) -> None:
        self.issues.append(ConfigIssue(self.file, line, path, message))

    def build(self, yn: yaml.Node, path: str) -> Node:
        key = id(yn)
        if key in self._memo:
            return self._memo[key]
        line, col = self.lines.at(yn.start_mark.index)
        if key in self._active:
            self.add(line, path, "an alias refers to a node that contains it (recursive YAML)")
            return Node("scalar", line, col, tag=_NULL_TAG)
        self._active.add(key)
        try:
            if isinstance(yn, yaml.MappingNode):
                node = self._mapping(yn, path, line, col)
            elif isinstance(yn, yaml.SequenceNode):
                node = self._sequence(yn, path, line, col)
            else:
                node = self._scalar(yn, path, line, col)
        finally:
            self._active.discard(key)
        size = 1 + sum(self._size.get(id(n), 1) for n in node.items)
        size += sum(self._size.get(id(k), 1) + self._size.get(id(v), 1) for k, v in node.entries)
        if size > MAX_EXPANDED_NODES:
            msg = f"the document expands to more than {MAX_EXPANDED_NODES} nodes through aliases"
            raise config_error([ConfigIssue(self.file, line, path, msg)])
        self._size[id(node)] = size
        self._memo[key] = node
        return node

    def _scalar(self, yn: yaml.Node, path: str, line: int, col: int) -> Node:
        text = str(yn.value)
        try:
            value = self.loader.construct_object(yn, deep=True)
        except yaml.MarkedYAMLError as exc:
            self.add(line, path, f"cannot read {text!r}: {exc.problem}")
            value = None
        except (ValueError, OverflowError, TypeError) as exc:
            # e.g. 2024-13-45 matches the timestamp pattern but is no date
            self.add(line, path, f"cannot read {text!r} as {yn.tag.removeprefix(_YAML_TAG)}: {exc}")
            value = None
        return Node("scalar", line, col, value=value, text=text, tag=yn.tag)

    def _sequence(self, yn: yaml.SequenceNode, path: str, line: int, col: int) -> Node:
        if yn.tag not in _SEQUENCE_TAGS:
            self.add(line, path, f"unsupported YAML tag {yn.tag!r} on a list")
        items = tuple(self.build(child, join_path(path, i)) for i, child in enumerate(yn.value))
        return Node("sequence", line, col, tag=yn.tag, items=items)

    def _mapping(self, yn: yaml.MappingNode, path: str, line: int, col: int) -> Node:
        if yn.tag not in _MAPPING_TAGS:
            self.add(line, path, f"unsupported YAML tag {yn.tag!r} on a mapping")
        entries: list[tuple[Node, Node]] = []
        seen: dict[tuple[type, Any], Node] = {}
        merges: list[yaml.Node] = []
        for kn, vn in yn.value:
            if kn.tag == _MERGE_TAG:
                merges.append(vn)
                continue
            k = self.build(kn, path)
            if k.kind != "scalar":
                found = "a mapping" if k.kind == "mapping" else "a list"
                self.add(k.line, path, f"expected a scalar mapping key, found {found}")
                continue
            kpath = join_path(path, k.name)
            ident = (type(k.value), k.value)
            if ident in seen:
                first = seen[ident].line
                self.add(k.line, kpath, f"duplicate key (first defined at line {first})")
                continue
            seen[ident] = k
            v = self.build(vn, kpath)
            if v.is_null and v.text == "" and v.line != k.line:
                # `key:` with nothing after it: the empty value is where the key is
                v = Node("scalar", k.line, k.col, value=None, text="", tag=v.tag)
            entries.append((k, v))
        for source in merges:
            for k, v in self._merge_sources(source, path):
                ident = (type(k.value), k.value)
                if ident not in seen:  # explicit keys, then earlier merge sources, win
                    seen[ident] = k
                    entries.append((k, v))
        return Node("mapping", line, col, tag=yn.tag, entries=tuple(entries))

    def _merge_sources(self, yn: yaml.Node, path: str) -> list[tuple[Node, Node]]:
        merged = self.build(yn, path)
        sources = merged.items if merged.kind == "sequence" else (merged,)
        out: list[tuple[Node, Node]] = []
        for src in sources:
            if src.kind != "mapping":
                self.add(src.line, path, "'<<' merges a mapping or a list of mappings only")
                continue
            out.extend(src.entries)
        return out
