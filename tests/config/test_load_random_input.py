"""The agent's config file under random input: garbage at any known field, or any text, only
ever raises ConfigError with issues on lines inside the file."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config.load import load_config
from agent.errors import ConfigError
from agent.schema.yaml_lines import issues_of
from tests.support.service.config_files import VALID_CONFIG

# --- properties ------------------------------------------------------------------------------


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


VALID_TREE = yaml.safe_load(VALID_CONFIG)
KNOWN_PATHS = _paths(VALID_TREE)
GARBAGE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**20, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "yes", "off", "~", "2024-01-01", "1e3", "0x1F", ".nan", "[]", "{}"]),
)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("garbage") / "c.yaml"


def _assert_only_config_errors(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8"))
    last_line = max(1, len(text.splitlines()))
    try:
        load_config(path)
    except ConfigError as exc:
        found = issues_of(exc)
        assert found, "a ConfigError without issues"
        for issue in found:
            assert 1 <= issue.line <= last_line, (issue, text)
            assert str(issue).startswith(f"{path}:{issue.line}: ")


@given(st.lists(st.tuples(st.sampled_from(KNOWN_PATHS), GARBAGE), min_size=1, max_size=4))
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_scalar_garbage_at_known_fields_only_raises_config_errors(
    scratch: Path, changes: list[tuple[tuple[Any, ...], Any]]
) -> None:
    tree = copy.deepcopy(VALID_TREE)
    for path, value in changes:
        parent = tree
        try:
            for part in path[:-1]:
                parent = parent[part]
            parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced a parent with a scalar
    _assert_only_config_errors(scratch, yaml.safe_dump(tree, sort_keys=False))


@given(st.text(alphabet=st.sampled_from(list("ab:- \n\t[]{},&*!#'\"|>?.019~")), max_size=60))
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_any_text_only_raises_config_errors(scratch: Path, text: str) -> None:
    _assert_only_config_errors(scratch, text)
