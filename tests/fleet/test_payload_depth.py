"""The fleet's nesting limit (agent.fleet.messages.MAX_DEPTH) is measured on the payload's text,
not by walking the parsed document: strings are taken out by pairing quotes, and brackets
inside strings, escaped quotes and backslashes must not fool it. Held against the walk on
documents built to do exactly that, at and around the limit."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.fleet.messages import MAX_DEPTH, PayloadError, _walk_depth, _within_depth

# Strings made of what could mislead a text scan.
_TRICKY = st.text(alphabet='[]{}"\\,: ab', max_size=12)
_SCALARS = st.none() | st.booleans() | st.integers(-10, 10) | _TRICKY


def _nested(depth: int, leaf: Any, as_list: bool) -> Any:
    """`leaf` inside depth - 1 containers (lists, or dicts and lists alternating)."""
    value = leaf
    for i in range(depth - 1):
        value = [value] if (as_list or i % 2) else {"k]": value}
    return value


def _documents() -> st.SearchStrategy[dict[str, Any]]:
    tree = st.recursive(
        _SCALARS,
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(_TRICKY, children, max_size=3)
        ),
        max_leaves=12,
    )
    deep = st.builds(_nested, st.integers(1, MAX_DEPTH + 3), _SCALARS | st.just({}), st.booleans())
    return st.dictionaries(_TRICKY, tree | deep, min_size=1, max_size=4)


def _walk_says(doc: dict[str, Any]) -> bool:
    try:
        _walk_depth(doc)
    except PayloadError:
        return False
    return True


def _text_says(payload: bytes, doc: dict[str, Any]) -> bool:
    try:
        _within_depth(payload, doc)
    except PayloadError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(doc=_documents(), compact=st.booleans())
def test_the_text_measure_agrees_with_the_walk(doc: dict[str, Any], compact: bool) -> None:
    payload = orjson.dumps(doc) if compact else json.dumps(doc, indent=1).encode()
    assert _text_says(payload, orjson.loads(payload)) == _walk_says(doc)


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
@pytest.mark.parametrize("decoy", ["", "]]]]", '\\"]]', "[[[[", "\\\\"])
def test_at_the_limit_with_decoys_in_strings(depth: int, decoy: str) -> None:
    """A document exactly at, under and over the limit, with brackets, an escaped quote or a
    backslash in its strings (which send the text measure to the walk or must be skipped)."""
    doc = {"a": _nested(depth, decoy, as_list=False), "b": decoy}  # depth containers in all
    payload = json.dumps(doc).encode()
    assert _walk_says(doc) == (depth <= MAX_DEPTH)
    assert _text_says(payload, orjson.loads(payload)) == (depth <= MAX_DEPTH)
