"""Fuzz the config loader: value mutations of parsed real configs, and YAML text mutations.

Property: a Config whose own rules hold, or a ConfigError whose every issue names this file and
a line inside it. Two targets: `config tree` mutates the parsed tree of config/*.yaml (cheap,
so most of the budget goes to the value checks) and `config file` mutates the YAML text of a
small config and, one case in ten, of a whole shipped config, through load_config.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import strategies as st

import drivers.base
from agent.config.load import load_config
from agent.errors import ConfigError
from agent.schema.yaml_lines import issues_of
from tests.fuzz.cases.config import (
    NEL_CASE,
    SMALL,
    TEXTS_FULL,
    TREES,
    file_case,
    multi_driver_text,
    tree_case,
)
from tests.fuzz.harness import Oracle, fuzz
from tests.fuzz.trees import mutated_text, mutated_tree


@pytest.fixture(autouse=True)
def _entry_points_read_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # available_drivers() rescans every installed distribution's entry points (17 ms, twice per
    # controller): the same real answer, read once, so the budget goes to the parser.
    monkeypatch.setattr(
        drivers.base, "available_drivers", functools.cache(drivers.base.available_drivers)
    )
    yield


def test_fuzz_config_tree() -> None:
    oracle = Oracle("config (tree values)", expected=())
    fuzz(oracle, mutated_tree(TREES), lambda root: tree_case(root, oracle))


def test_fuzz_config_file(shm_path: Path) -> None:
    oracle = Oracle("config (YAML text)", expected=(ConfigError,))
    # Nine cases in ten mutate the small config, one the whole shipped ones.
    texts = st.one_of(*[mutated_text([SMALL])] * 9, mutated_text(TEXTS_FULL))
    fuzz(oracle, texts, lambda data: file_case(data, oracle, shm_path), examples=(NEL_CASE,))


@pytest.mark.parametrize("sep", ["\x85", "\u2028", "\u2029"])
def test_error_line_is_the_editor_line(tmp_path: Path, sep: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"agent:{sep}  log_level: loud\ncontrollers: []\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert {i.line for i in issues_of(err.value)} <= {1, 2}


def test_fuzz_seeds_are_valid(tmp_path: Path) -> None:
    """The seeds of the mutations load, so mutations start from valid files."""
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    config = load_config(path)
    assert [j.name for j in config.controllers[0].joints] == ["axis1", "axis2"]
    path.write_text(multi_driver_text())
    drivers_used = [c.driver for c in load_config(path).controllers]
    assert drivers_used == ["serial", "can", "ur_rtde", "opcua"]
