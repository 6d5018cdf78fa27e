"""agent.schema.yaml_lines (YAML with lines) and agent.schema.validate (tree -> dataclasses), on
their own."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import EX_CONFIG, ConfigError
from agent.schema.messages import SchemaDefinitionError, describe
from agent.schema.validate import build, load, validate
from agent.schema.yaml_lines import (
    ConfigIssue,
    issues_of,
    join_path,
    load_yaml,
    parse_yaml,
    split_path,
)

F = "t.yaml"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner:
    x: float = field(metadata={"gt": 0.0})
    y: int = 1


@dataclass(frozen=True)
class Kinds:
    """One field of every supported kind; everything has a default so each test sets one."""

    s: str = ""
    i: int = field(default=0, metadata={"ge": -5, "le": 5})
    f: float = 0.0
    b: bool = False
    lit: Literal["a", "bb", 3] = "a"
    opt: float | None = field(default=None, metadata={"gt": 0.0})
    many: tuple[float, ...] = field(default=(), metadata={"ge": 0.0})
    pair: tuple[float, int] = (0.0, 0)
    lst: list[str] = field(default_factory=list)
    dct: dict[str, Inner] = field(default_factory=dict)
    inner: Inner = field(default_factory=lambda: Inner(1.0))
    anything: Any = None
    color: Color = Color.RED
    either: int | str = 0
    name: str = field(default="n", metadata={"min_len": 1})
    items: tuple[Inner, ...] = field(default=(Inner(1.0),), metadata={"min_len": 1})
    hidden: str = field(default="set by code", metadata={"internal": True})


def issues(tp: Any, text: str) -> list[str]:
    value, found = validate(tp, parse_yaml(text, F), F)
    assert (value is None) == bool(found)
    return [str(i) for i in found]


def one(text: str) -> Kinds:
    return build(Kinds, parse_yaml(text, F), F)


# --- yaml_lines ------------------------------------------------------------------------------


def test_nodes_keep_line_and_column_of_keys_and_values() -> None:
    root = parse_yaml("a: 1\nb:\n  - x\n  - {c: [1, 2]}\n", F)
    (ka, va), (kb, vb) = root.entries
    assert (ka.line, ka.col, va.line, va.col) == (1, 1, 1, 4)
    assert (kb.line, vb.kind, vb.line) == (2, "sequence", 3)
    assert [item.line for item in vb.items] == [3, 4]
    assert root.find(["b", 1, "c", 1]).value == 2  # type: ignore[union-attr]
    assert root.line_of(["b", 1, "c"]) == 4
    assert root.line_of(["b", 7]) == 2  # deepest present
    assert root.plain() == {"a": 1, "b": ["x", {"c": [1, 2]}]}


def test_empty_value_sits_on_its_key_line() -> None:
    root = parse_yaml("a:\n\nb: 2\n", F)
    assert root.get("a") is not None and root.get("a").line == 1  # type: ignore[union-attr]
    assert root.get("a").is_null  # type: ignore[union-attr]


def test_duplicate_keys_name_both_lines_all_at_once() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\na: 3\n", F)
    assert [str(i) for i in issues_of(exc.value)] == [
        "t.yaml:4: b.c: duplicate key (first defined at line 3)",
        "t.yaml:5: a: duplicate key (first defined at line 1)",
    ]
    assert exc.value.exit_code == EX_CONFIG


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\n b: 2\n", "t.yaml:2: YAML syntax error: mapping values are not allowed here"),
        ("a: 1\nb: [1, 2\nc: 3\n", "t.yaml:3: YAML syntax error: expected ',' or ']'"),
        ("a:\n\tb: 1\n", "t.yaml:2: YAML syntax error: found character '\\t'"),
        ("a: 1\n---\nb: 2\n", "t.yaml:2: YAML syntax error: but found another document"),
        ("a: [\n", "t.yaml:1: YAML syntax error: expected the node content"),
        ("a: 1\nb: \x01\n", "t.yaml:2: character U+0001 is not allowed in YAML"),
        ("a: 2024-13-45\n", "t.yaml:1: a: cannot read '2024-13-45' as timestamp: month must"),
        ("a: !foo 1\n", "t.yaml:1: a: cannot read '1': could not determine a constructor"),
        ("a: !!python/object:os.system {}\n", "t.yaml:1: a: unsupported YAML tag"),
        ("a: &x [*x]\n", "t.yaml:1: a[0]: an alias refers to a node that contains it"),
        ("? [1, 2]\n: 3\n", "t.yaml:1: expected a scalar mapping key, found a list"),
        ("", "t.yaml:1: the file is empty: expected a YAML document"),
        ("# only a comment\n\n", "t.yaml:1: the file is empty: expected a YAML document"),
        ("[" * 1200 + "]" * 1200, "t.yaml:1: YAML nesting is too deep"),
    ],
)
def test_unreadable_yaml_is_a_config_error_with_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_yaml(text, F)
    assert str(exc.value).startswith(expected), str(exc.value)
    assert len(issues_of(exc.value)) >= 1


def test_syntax_error_names_column_and_context() -> None:
    with pytest.raises(ConfigError, match=r"\(column 2; while parsing a flow sequence at line 2\)"):
        parse_yaml("a: 1\nb: [1, 2\nc: 3\n", F)


def test_alias_bomb_is_refused() -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(8):
        prev, cur = chr(97 + i), chr(98 + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    with pytest.raises(ConfigError, match="expands to more than 200000 nodes through aliases"):
        parse_yaml("\n".join(lines), F)


def test_merge_keys_apply_and_explicit_keys_win() -> None:
    root = parse_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n", F)
    d = root.get("d")
    assert d is not None and d.plain() == {"y": 3, "x": 1}
    assert d.entry("x")[0].line == 1  # type: ignore[index]  # where x is written


def test_exponent_floats_are_floats_as_in_yaml_1_2() -> None:
    root = parse_yaml("a: 2e5\nb: 1.0e3\nc: -1E-3\nd: 1e\ne: 12\nf: 1.5e-4\n", F)
    assert root.plain() == {"a": 2e5, "b": 1e3, "c": -1e-3, "d": "1e", "e": 12, "f": 1.5e-4}


def test_plain_scalars_follow_yaml_1_2_not_yaml_1_1() -> None:
    """YAML 1.1 reads 1:20 as base-60 80, yes/on/off as booleans and 010 as octal eight."""
    root = parse_yaml("a: 1:20\nb: yes\nc: off\nd: 010\ne: 0o17\nf: 0x1F\ng: .inf\nh: False\n", F)
    assert root.plain() == {
        "a": "1:20",
        "b": "yes",
        "c": "off",
        "d": 10,
        "e": 15,
        "f": 31,
        "g": float("inf"),
        "h": False,
    }
    # so a ratio written as 1:20, or a switch as `yes`, is refused at its line
    found = issues(Kinds, "s: x\ni: 3\nf: 1:20\nb: yes\n")
    assert any(m.startswith(f"{F}:3: f: ") and "'1:20'" in m for m in found), found
    assert any(m.startswith(f"{F}:4: b: ") and "'yes'" in m for m in found), found


def test_load_yaml_reports_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as exc:
        load_yaml(missing)
    assert str(exc.value) == f"{missing}: cannot read: No such file or directory"
    message = "cannot read: No such file or directory"
    assert issues_of(exc.value) == [ConfigIssue(str(missing), 0, "", message)]
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin.yaml:2: not UTF-8 text: byte 0xe9"):
        load_yaml(latin)
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert load_yaml(bom).plain() == {"a": 1}


@given(
    st.lists(st.one_of(st.integers(0, 99), st.text(min_size=1, max_size=8)), min_size=1, max_size=5)
)
@settings(max_examples=200, deadline=None, derandomize=True)
def test_split_path_inverts_join_path(parts: list[str | int]) -> None:
    path = ""
    for part in parts:
        path = join_path(path, part)
    assert split_path(path) == parts


# --- schema: scalars -------------------------------------------------------------------------


def test_issue_string_format() -> None:
    issue = ConfigIssue("config/demo.yaml", 12, "controllers[0].joints[3].gear_ratio", "bad")
    assert str(issue) == "config/demo.yaml:12: controllers[0].joints[3].gear_ratio: bad"
    assert str(ConfigIssue("f.yaml", 3, "", "bad")) == "f.yaml:3: bad"
    assert issue.to_dict() == {
        "file": "config/demo.yaml",
        "line": 12,
        "path": "controllers[0].joints[3].gear_ratio",
        "message": "bad",
    }


def test_every_kind_converts_to_its_python_type() -> None:
    k = one(
        """\
s: hello
i: 3.0
f: 2
b: true
lit: 3
opt: 2.5
many: [0, 1.5]
pair: [1, 2]
lst: [a, b]
dct: {p: {x: 1}}
inner: {x: 0.5, y: 7}
anything: {free: [1, form]}
color: blue
either: text
"""
    )
    assert k.s == "hello"
    assert k.i == 3 and type(k.i) is int
    assert k.f == 2.0 and type(k.f) is float
    assert k.b is True
    assert k.lit == 3
    assert k.opt == 2.5
    assert k.many == (0.0, 1.5) and type(k.many) is tuple
    assert k.pair == (1.0, 2) and type(k.pair[0]) is float and type(k.pair[1]) is int
    assert k.lst == ["a", "b"]
    assert k.dct == {"p": Inner(1.0, 1)}
    assert k.inner == Inner(0.5, 7)
    assert k.anything == {"free": [1, "form"]}
    assert k.color is Color.BLUE
    assert k.either == "text"
    assert k.hidden == "set by code"


def test_defaults_and_explicit_null_for_optional() -> None:
    assert one("opt: null\n").opt is None
    assert one("opt: ~\n").opt is None
    assert one("s: x\n") == Kinds(s="x")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("i: abc", "i: expected an integer >= -5 and <= 5, found 'abc'"),
        ("i: true", "i: expected an integer >= -5 and <= 5, found true"),
        ("i: 2.5", "i: expected an integer >= -5 and <= 5, found 2.5"),
        ("i: 9", "i: expected an integer >= -5 and <= 5, found 9"),
        ("i: -6", "i: expected an integer >= -5 and <= 5, found -6"),
        ("f: '1.5'", "f: expected a number, found '1.5'"),
        ("f: false", "f: expected a number, found false"),
        (
            "f: off",
            "f: expected a number, found 'off'"
            " (text in YAML 1.2, not a boolean: write true or false)",
        ),
        (
            "f: 1:20",
            "f: expected a number, found '1:20' (text, not the base-60 number YAML 1.1 read)",
        ),
        ("f: .nan", "f: expected a number, found .nan (not a finite number)"),
        ("f: -.inf", "f: expected a number, found -.inf (not a finite number)"),
        (
            "f: 1" + "0" * 400,
            "f: expected a number, found 1" + "0" * 56 + "... (too large)",
        ),
        ("f: [1]", "f: expected a number, found a list of 1 item"),
        ("f: {a: 1}", "f: expected a number, found a mapping of 1 key"),
        ("f:", "f: expected a number, found an empty value"),
        ("f: null", "f: expected a number, found null (null)"),
        ("b: 1", "b: expected true or false, found 1"),
        ("b: 'true'", "b: expected true or false, found 'true'"),
        ("s: 4", "s: expected a string, found 4"),
        ("s: 2024-01-02", "s: expected a string, found 2024-01-02 (a date)"),
        ("name: ''", "name: expected a string of at least 1 character, found ''"),
        ("lit: bbb", "lit: expected one of 'a', 'bb', 3, found 'bbb' (did you mean 'bb'?)"),
        ("lit: '3'", "lit: expected one of 'a', 'bb', 3, found '3'"),
        ("opt: 0", "opt: expected a number > 0 or null, found 0"),
        ("opt: x", "opt: expected a number > 0 or null, found 'x'"),
        ("color: green", "color: expected one of 'red', 'blue', found 'green'"),
        ("either: 1.5", "either: expected an integer or a string, found 1.5"),
    ],
)
def test_wrong_scalar_says_expected_and_found(text: str, expected: str) -> None:
    assert issues(Kinds, "anything: 0\n" + text + "\n") == [f"t.yaml:2: {expected}"]


# --- schema: containers, dataclasses ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("many: 3", 1, "many: expected a list of numbers >= 0, found 3"),
        ("many: [1, -2]", 1, "many[1]: expected a number >= 0, found -2"),
        ("many:\n  - 1\n  - x", 3, "many[1]: expected a number >= 0, found 'x'"),
        ("pair: [1, 2, 3]", 1, "pair: expected a list of 2 items, found a list of 3 items"),
        ("pair: [1, 2.5]", 1, "pair[1]: expected an integer, found 2.5"),
        ("lst: {a: 1}", 1, "lst: expected a list of strings, found a mapping of 1 key"),
        ("dct: [1]", 1, "dct: expected a mapping, found a list of 1 item"),
        ("dct: {1: {x: 1}}", 1, "dct['1']: expected a string, found 1"),
        ("dct:\n  p: {x: 0}", 2, "dct.p.x: expected a number > 0, found 0"),
        ("dct:\n  'p q': {x: 0}", 2, "dct['p q'].x: expected a number > 0, found 0"),
        ("inner: 5", 1, "inner: expected a mapping, found 5"),
        ("inner: [1, 2]", 1, "inner: expected a mapping, found a list of 2 items"),
        ("inner:", 1, "inner: expected a mapping, found an empty value"),
        (
            "items: []",
            1,
            "items: expected a list of mappings with at least 1 item, found an empty list",
        ),
    ],
)
def test_wrong_container_says_expected_and_found(text: str, line: int, expected: str) -> None:
    assert issues(Kinds, text + "\n") == [f"t.yaml:{line}: {expected}"]


def test_unknown_key_suggests_the_close_name_or_lists_all() -> None:
    assert issues(Inner, "x: 1\nyy: 2\n") == ["t.yaml:2: yy: unknown key (did you mean 'y'?)"]
    assert issues(Inner, "x: 1\nzzz: 2\n") == ["t.yaml:2: zzz: unknown key; expected one of: x, y"]


def test_internal_fields_cannot_be_set() -> None:
    assert issues(Kinds, "hidden: x\n")[0].startswith("t.yaml:1: hidden: unknown key;")


def test_missing_key_is_reported_at_the_mapping_that_lacks_it() -> None:
    text = "items:\n  - x: 1\n  - y: 2\n"
    assert issues(Kinds, text) == [
        "t.yaml:3: items[1].x: required key is missing: expected a number > 0"
    ]


def test_top_level_must_be_a_mapping() -> None:
    assert issues(Inner, "- 1\n- 2\n") == ["t.yaml:1: expected a mapping, found a list of 2 items"]
    assert issues(Inner, "just text\n") == ["t.yaml:1: expected a mapping, found 'just text'"]


def test_all_mistakes_are_collected_in_one_pass() -> None:
    text = """\
i: 99
f: x
dct:
  a: {x: -1, xx: 1}
  b: {}
items:
  - {x: 1}
  - {x: 0, y: 1.5}
typo: 1
"""
    assert issues(Kinds, text) == [
        "t.yaml:1: i: expected an integer >= -5 and <= 5, found 99",
        "t.yaml:2: f: expected a number, found 'x'",
        "t.yaml:4: dct.a.x: expected a number > 0, found -1",
        "t.yaml:4: dct.a.xx: unknown key (did you mean 'x'?)",
        "t.yaml:5: dct.b.x: required key is missing: expected a number > 0",
        "t.yaml:8: items[1].x: expected a number > 0, found 0",
        "t.yaml:8: items[1].y: expected an integer, found 1.5",
        "t.yaml:9: typo: unknown key; expected one of: s, i, f, b, lit, opt, many, pair, lst, dct, "
        "inner, anything, color, either, name, items",
    ]


def test_build_raises_one_config_error_with_the_issue_list() -> None:
    with pytest.raises(ConfigError) as exc:
        build(Inner, parse_yaml("x: 0\ny: a\n", F), F)
    assert str(exc.value) == (
        "t.yaml:1: x: expected a number > 0, found 0\nt.yaml:2: y: expected an integer, found 'a'"
    )
    assert [i.line for i in issues_of(exc.value)] == [1, 2]
    assert exc.value.exit_code == EX_CONFIG


def test_load_reads_a_file(tmp_path: Path) -> None:
    p = tmp_path / "inner.yaml"
    p.write_text("x: 2\n")
    assert load(Inner, p) == Inner(2.0)


def test_path_prefix_is_prepended() -> None:
    _, found = validate(Inner, parse_yaml("x: -1\n", F), F, path="robots[2].base")
    assert [str(i) for i in found] == [
        "t.yaml:1: robots[2].base.x: expected a number > 0, found -1"
    ]


# --- cross-field checks ----------------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    low: float
    high: float

    def check(self) -> list[tuple[str, str]]:
        return [] if self.low < self.high else [("high", f"expected > low ({self.low:g})")]


@dataclass(frozen=True)
class Ranges:
    ranges: tuple[Range, ...]
    label: str = "r"


def test_check_hook_reports_at_the_field_line() -> None:
    text = "ranges:\n  - {low: 1, high: 2}\n  - low: 5\n    high: 3\n"
    assert issues(Ranges, text) == ["t.yaml:4: ranges[1].high: expected > low (5)"]


def test_extra_checks_take_relative_paths() -> None:
    def no_dup_lows(r: Ranges) -> list[tuple[str, str]]:
        lows = [x.low for x in r.ranges]
        dups = [i for i in range(1, len(lows)) if lows[i] in lows[:i]]
        return [(f"ranges[{i}].low", "duplicate low") for i in dups]

    def label_check(r: Ranges) -> list[tuple[str, str]]:
        return [("", "whole object"), ("label", "label not set in the file")]

    text = "ranges:\n  - {low: 1, high: 2}\n  -\n    low: 1\n    high: 3\n"
    _, found = validate(Ranges, parse_yaml(text, F), F, checks={Ranges: no_dup_lows})
    assert [str(i) for i in found] == ["t.yaml:4: ranges[1].low: duplicate low"]
    _, found = validate(Ranges, parse_yaml("\nranges: []\n", F), F, checks={Ranges: label_check})
    assert [str(i) for i in found] == [
        "t.yaml:2: whole object",
        "t.yaml:2: label: label not set in the file",  # absent: the mapping's line
    ]


def test_checks_of_valid_parts_still_run_when_a_sibling_is_wrong() -> None:
    text = "ranges:\n  - {low: 3, high: 2}\nlabel: 5\n"
    assert issues(Ranges, text) == [
        "t.yaml:2: ranges[0].high: expected > low (3)",
        "t.yaml:3: label: expected a string, found 5",
    ]


# --- schema definitions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Unsupported:
    s: set[int]


def test_unsupported_schema_types_are_programming_errors() -> None:
    with pytest.raises(SchemaDefinitionError, match="cannot validate values of type set"):
        validate(Unsupported, parse_yaml("s: [1]\n", F), F)


def test_describe() -> None:
    assert describe(float, {"gt": 0.0, "le": 500.0}) == "a number > 0 and <= 500"
    assert describe(int | None, {"ge": 1}) == "an integer >= 1 or null"
    assert describe(tuple[float, float]) == "a list of 2 numbers"
    assert describe(tuple[Inner, ...], {"min_len": 2}) == "a list of mappings with at least 2 items"
    assert describe(Literal["x", True]) == "one of 'x', true"
    assert describe(float, {"gt": 1e-4}) == "a number > 0.0001"
