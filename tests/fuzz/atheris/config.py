"""atheris target `config_yaml`: YAML text through agent.config.load.load_config.

The input is the config file's bytes, written to a scratch file and loaded as the daemon and
`jha config check` load it (YAML with line tracking, schema validation, cross-field checks,
each driver's own settings). Seeds: the shipped configs, the small and multi-driver configs of
the hypothesis target.

Property: a Config whose own rules hold (tests/fuzz/cases/config.check_config), or a
ConfigError whose every issue names this file and a line inside it; never another exception.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import drivers.base
from agent.config.load import load_config
from agent.errors import ConfigError
from agent.schema.yaml_lines import issues_of
from tests.fuzz.atheris.oracle import SCRATCH, PropertyBroken, Target, check, guarded
from tests.support.paths import ROOT

# available_drivers() rescans every installed distribution's entry points (tens of ms per
# controller): the same real answer read once, as the hypothesis target does.
drivers.base.available_drivers = functools.cache(drivers.base.available_drivers)  # type: ignore[method-assign]

_PATH = SCRATCH / f"jha-atheris-config-{os.getpid()}.yaml"


class _Recorder:
    """The hypothesis oracle's `check` interface, failing the atheris input instead."""

    def check(self, ok: bool, what: str) -> None:
        check(ok, what)


def _config(data: bytes) -> None:
    _PATH.write_bytes(data)
    file = str(_PATH)
    last_line = data.count(b"\n") + 1
    try:
        config = load_config(_PATH)
    except ConfigError as exc:
        issues = issues_of(exc)
        check(bool(issues), f"ConfigError without issues: {exc}")
        for issue in issues:
            check(issue.file == file, f"issue names file {issue.file!r}")
            low = 0 if issue.message.startswith("cannot read") else 1
            check(low <= issue.line <= last_line, f"issue line {issue.line} not in the file")
            check(bool(issue.message.strip()), f"issue without a message at line {issue.line}")
        return
    _check_config(_Recorder(), config)
    check(config.source == file, f"source {config.source!r}")


def _checker() -> Callable[[Any, Any], None]:
    from tests.fuzz.cases.config import check_config

    return check_config


_check_config = _checker()


def seeds() -> Iterator[bytes]:
    from tests.fuzz.cases.config import SMALL, multi_driver_text

    yield SMALL.encode()
    yield multi_driver_text().encode()
    for path in sorted((ROOT / "config").glob("*.yaml")):
        yield path.read_bytes()


TARGET = Target("config_yaml", guarded(_config), seeds, doc=__doc__ or "")
assert issubclass(PropertyBroken, AssertionError)
