"""Hypothesis strategies that mutate a parsed YAML tree (agent.schema.yaml_lines.Node) and YAML
text.

Tree mutations keep the rest of a real config intact, so most cases get past the structure
and exercise the value checks deep inside (bounds, types, cross-field rules, driver settings);
text mutations exercise the YAML layer itself (syntax, aliases, tags, encodings).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

from hypothesis import strategies as st

from agent.schema.yaml_lines import Node

Step = tuple[str, int]  # ("item", i) | ("key", i) | ("value", i)
_TAG = "tag:yaml.org,2002:"

# Values that sit on or just past the edges every schema bound uses.
EDGE_NUMBERS = (
    0,
    1,
    -1,
    2,
    12,
    19,
    32,
    33,
    64,
    65,
    100,
    500,
    2**31,
    2**63,
    10**400,
    0.0,
    -0.0,
    1e-300,
    5e-324,
    0.5,
    1.5,
    1e308,
    -1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
)
TEXTS = (
    "",
    " ",
    "sim",
    "none",
    "simulation",
    "points",
    "info",
    "axis1",
    "robot1",
    "null",
    "~",
    "yes",
    "no",
    "on",
    "0x10",
    "1e3",
    "1_000",
    ".inf",
    "2024-13-45",
    "*/5 * * * *",
    "08:00-17:00",
    "25:00-26:00",
    "a" * 300,
    "\u00e9\u4e2d",
    "\x00",
    "\t",
    "${HOME}",
)


SCALAR_VALUES: st.SearchStrategy[object] = st.one_of(
    st.sampled_from(EDGE_NUMBERS),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(TEXTS),
    st.text(max_size=20),
    st.dates(min_value=dt.date(1, 1, 1)),
)


def scalar_node(value: object, line: int, col: int) -> Node:
    kind = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null"}
    tag = _TAG + kind.get(type(value), "timestamp")
    text = "" if value is None else str(value)
    return Node("scalar", line, col, value=value, text=text, tag=tag)


def relocate(node: Node, line: int, col: int) -> Node:
    """The node (and its children) as if written at (line, col)."""
    return dataclasses.replace(
        node,
        line=line,
        col=col,
        items=tuple(relocate(i, line, col) for i in node.items),
        entries=tuple((relocate(k, line, col), relocate(v, line, col)) for k, v in node.entries),
    )


# A scalar, or a small list or mapping of them (built once: strategies are costly to make).
RANDOM_NODES: st.SearchStrategy[Node] = st.recursive(
    SCALAR_VALUES.map(lambda v: scalar_node(v, 1, 1)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(
            lambda items: Node("sequence", 1, 1, tag=_TAG + "seq", items=tuple(items))
        ),
        st.lists(
            st.tuples(st.sampled_from(TEXTS[:12]).map(lambda k: scalar_node(k, 1, 1)), inner),
            max_size=4,
        ).map(lambda es: Node("mapping", 1, 1, tag=_TAG + "map", entries=tuple(es))),
    ),
    max_leaves=8,
)
_NAMES = st.one_of(st.sampled_from(TEXTS), st.text(max_size=12), SCALAR_VALUES)
_OPS = st.sampled_from(("value", "value", "value", "delete", "dup", "swap", "rename"))


_PATHS: dict[int, tuple[Node, list[tuple[Step, ...]]]] = {}


def paths_of(root: Node) -> list[tuple[Step, ...]]:
    """paths(root), remembered for the unmutated roots every case starts from."""
    hit = _PATHS.get(id(root))
    if hit is not None and hit[0] is root:
        return hit[1]
    return paths(root)


def remember_paths(roots: list[Node]) -> None:
    for root in roots:
        _PATHS[id(root)] = (root, paths(root))


def paths(node: Node, prefix: tuple[Step, ...] = ()) -> list[tuple[Step, ...]]:
    """Every position in the tree: list items, mapping keys and mapping values."""
    out: list[tuple[Step, ...]] = [prefix]
    for i, item in enumerate(node.items):
        out += paths(item, (*prefix, ("item", i)))
    for i, (_, value) in enumerate(node.entries):
        out.append((*prefix, ("key", i)))
        out += paths(value, (*prefix, ("value", i)))
    return out


def at(node: Node, path: tuple[Step, ...]) -> Node:
    for kind, i in path:
        node = node.items[i] if kind == "item" else node.entries[i][0 if kind == "key" else 1]
    return node


def rewrite(node: Node, path: tuple[Step, ...], fn: Callable[[Node], Node | None]) -> Node:
    """A copy of the tree with the node at `path` replaced by fn(node); None deletes it."""
    if not path:
        new = fn(node)
        return new if new is not None else Node("scalar", node.line, node.col, tag=_TAG + "null")
    (kind, i), rest = path[0], path[1:]
    if kind == "item":
        items = list(node.items)
        child = items[i] if rest else None
        if rest:
            items[i] = rewrite(child, rest, fn)  # type: ignore[arg-type]
        else:
            new = fn(items[i])
            if new is None:
                del items[i]
            else:
                items[i] = new
        return dataclasses.replace(node, items=tuple(items))
    entries = list(node.entries)
    key, value = entries[i]
    if kind == "key":
        if rest:
            entries[i] = (rewrite(key, rest, fn), value)
        else:
            new = fn(key)
            if new is None:
                del entries[i]
            else:
                entries[i] = (new, value)
    else:
        if rest:
            entries[i] = (key, rewrite(value, rest, fn))
        else:
            new = fn(value)
            if new is None:
                del entries[i]
            else:
                entries[i] = (key, new)
    return dataclasses.replace(node, entries=tuple(entries))


def duplicate(parent: Node, path: tuple[Step, ...]) -> Node:
    """The tree with the list item / mapping entry at `path` given twice."""
    *up, (kind, i) = path

    def dup(node: Node) -> Node:
        if kind == "item":
            return dataclasses.replace(node, items=(*node.items, node.items[i]))
        return dataclasses.replace(node, entries=(*node.entries, node.entries[i]))

    return rewrite(parent, tuple(up), dup)


def mutated_tree(roots: list[Node]) -> st.SearchStrategy[Node]:
    """One of `roots` with 1-3 mutations: replace, delete, duplicate, rename, or transplant."""
    remember_paths(roots)
    return _mutated_tree(roots)


@st.composite
def _mutated_tree(draw: st.DrawFn, roots: list[Node]) -> Node:
    root = roots[draw(st.integers(0, len(roots) - 1))]
    for _ in range(draw(st.integers(1, 3))):
        spots = paths_of(root)
        path = spots[draw(st.integers(0, len(spots) - 1))]
        target = at(root, path)
        op = draw(_OPS)
        if op == "value" or (op == "rename" and (not path or path[-1][0] != "key")):
            new = relocate(draw(RANDOM_NODES), target.line, target.col)
            root = rewrite(root, path, lambda _n, new=new: new)
        elif op == "delete" and path:
            root = rewrite(root, path, lambda _n: None)
        elif op == "dup" and path and path[-1][0] != "key":
            root = duplicate(root, path)
        elif op == "swap":
            other = at(root, spots[draw(st.integers(0, len(spots) - 1))])
            root = rewrite(root, path, lambda _n, other=other: other)
        elif op == "rename":
            name = draw(_NAMES)
            root = rewrite(root, path, lambda n, name=name: scalar_node(name, n.line, n.col))
    return root


# --- text -------------------------------------------------------------------------------------

YAML_TOKENS = (
    ":",
    ": ",
    "- ",
    "-",
    "? ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "&a ",
    "*a",
    "<<: *a",
    "!!str ",
    "!!python/object:os.system ",
    "!!binary ",
    "|",
    ">",
    "'",
    '"',
    "#",
    "%YAML 1.1\n",
    "---\n",
    "...\n",
    "\t",
    "  ",
    "\n",
    "\r",
    "\ufeff",
    "\x00",
    "\x85",
    "\u2028",
    "~",
    "null",
    "1e999",
    ".nan",
    "-.inf",
    "0o17",
    "2024-02-30",
    "true",
    "@",
    "`",
    "\\",
)


_TEXT_OPS = st.sampled_from(("token", "token", "delete", "dup", "indent", "chars", "cut"))
_TOKENS = st.sampled_from(YAML_TOKENS)
_CHARS = st.text(max_size=6)


@st.composite
def mutated_text(draw: st.DrawFn, texts: list[str]) -> bytes:
    """A real YAML text with 1-4 line or character edits, as bytes (sometimes not UTF-8)."""
    text = texts[draw(st.integers(0, len(texts) - 1))]
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        op = draw(_TEXT_OPS)
        k = draw(st.integers(0, max(0, len(lines) - 1)))
        if op == "token":
            line = lines[k] if lines else ""
            pos = draw(st.integers(0, len(line)))
            lines[k : k + 1] = [line[:pos] + draw(_TOKENS) + line[pos:]]
        elif op == "delete" and lines:
            del lines[k]
        elif op == "dup" and lines:
            lines.insert(k, lines[k])
        elif op == "indent" and lines:
            lines[k] = " " * draw(st.integers(0, 9)) + lines[k].lstrip(" ")
        elif op == "chars" and lines:
            line = lines[k]
            pos = draw(st.integers(0, len(line)))
            lines[k] = line[:pos] + draw(_CHARS) + line[pos + 1 :]
        elif op == "cut":
            lines = lines[:k]
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 19)) == 0:  # one case in twenty: a raw byte flip
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        data = data[:pos] + bytes([draw(st.integers(0, 255))]) + data[pos + 1 :]
    return data
