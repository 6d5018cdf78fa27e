"""The config file's fuzz inputs (mutated trees and texts of the shipped configs) and the
property a loaded config or its issues hold; used by tests/fuzz/test_fuzz_config.py and
tests/fuzz/atheris/config.py."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.config import load as config_mod
from agent.config.load import config_issues, load_config
from agent.config.model import Config
from agent.errors import ConfigError
from agent.schema.validate import validate
from agent.schema.yaml_lines import ConfigIssue, Node, issues_of, parse_yaml
from tests.fuzz.harness import Oracle
from tests.peers.opcua.harness import config_text as opcua_config_text
from tests.support.paths import ROOT

CONFIGS = [ROOT / "config" / n for n in ("demo.yaml", "example.yaml", "cnc_example.yaml")]


# The demo config cut to one joint: a tenth of the text, so a text case parses in milliseconds.
SMALL = """\
agent:
  state_dir: var
  log_level: info
controllers:
  - name: robot1
    driver: sim
    settings:
      seed: 3
      permission: true
      joints:
        axis1: {backlash_rad: 1.0e-4}
    interlocks:
      require_production_stop: true
      pose_tolerance_rad: 0.01
    triggers:
      schedule: {every_s: 3600, window: "08:00-17:00"}
    joints:
      - &joint
        name: axis1
        index: 1
        gear_ratio: 40
        encoder_bits: 19
        backlash_cycle: {motor_speed_rps: 100, load_turns: 12, sample_rate_hz: 500}
        thresholds: {backlash_watch_rad: 4.0e-4, backlash_alert_rad: 8.0e-4}
        calibration:
          source: points
          points:
            - {amplitude_rad_s: 0.1, backlash_rad: 0.0}
            - {amplitude_rad_s: 0.2, backlash_rad: 1.0e-4}
            - {amplitude_rad_s: 0.3, backlash_rad: 2.0e-4}
            - {amplitude_rad_s: 0.4, backlash_rad: 3.0e-4}
        estimator: {resonance_hz: [10, 200], decay_per_s: [2, 400], seed: 1}
      - {<<: *joint, name: axis2, index: 2}
"""


_JOINT = """\
      - name: {n}
        index: {i}
        gear_ratio: 40
        position_min_rad: -100.0
        position_max_rad: 100.0
        backlash_cycle: {{motor_speed_rps: 100, load_turns: 12, sample_rate_hz: 500}}
"""


def multi_driver_text() -> str:
    """A valid config using every driver's settings (and publishing), so their settings types
    and checks are fuzzed too: serial, can, ur_rtde, opcua (the OPC UA tests' own config)."""
    opcua = opcua_config_text().split("controllers:\n", 1)[1]
    return f"""\
agent:
  state_dir: var
  control_socket: /run/jha/control.sock
publish:
  mqtt:
    host: broker.plant.example
    port: 8883
    topic_prefix: jha
    client_id: jha-cell7
controllers:
  - name: press-line
    driver: serial
    settings:
      port: /dev/ttyUSB0
      baudrate: 921600
      channels: 2
      count_bits: 19
      lost_frames: interpolate
    joints:
{_JOINT.format(n="a1", i=1)}{_JOINT.format(n="a2", i=2)}  - name: gantry
    driver: can
    settings:
      dbc: {ROOT / "config" / "can" / "joint_encoder.dbc"}
      interface: socketcand
      channel: can0
      host: 127.0.0.1
    joints:
{_JOINT.format(n="x", i=1)}  - name: ur5e
    driver: ur_rtde
    settings:
      host: 192.168.10.20
      frequency_hz: 500
      permission_input: 8
    joints:
{_JOINT.format(n="base", i=1)}{opcua}"""


def load_tree(root: Node, file: str) -> tuple[Config | None, list[ConfigIssue]]:
    """agent.config.load._load after the YAML step: the same validation on a parsed tree."""
    config, issues = validate(Config, root, file, checks=config_mod._CHECKS)
    issues += config_mod._duplicate_names(root, file)
    _settings, driver_issues = config_mod._driver_settings(root, file)
    issues += driver_issues
    if issues or config is None:
        return None, sorted(issues, key=lambda i: i.line)
    return config, []


def _walk_numbers(value: Any, where: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield where, float(value) if not isinstance(value, int) or abs(value) < 2**1000 else 0.0
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _walk_numbers(getattr(value, f.name), f"{where}.{f.name}")
    elif isinstance(value, tuple | list):
        for i, v in enumerate(value):
            yield from _walk_numbers(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk_numbers(v, f"{where}[{k!r}]")


def check_config(oracle: Oracle, config: Config) -> None:
    """The invariants a loaded Config promises its users."""
    for where, x in _walk_numbers(config):
        oracle.check(math.isfinite(x), f"non-finite number at {where}: {x!r}")
    oracle.check(len(config.controllers) >= 1, "a Config without controllers")
    names = [c.name for c in config.controllers]
    oracle.check(len(set(names)) == len(names), f"duplicate controller names {names}")
    for c in config.controllers:
        jn = [j.name for j in c.joints]
        ji = [j.index for j in c.joints]
        oracle.check(len(set(jn)) == len(jn), f"duplicate joint names {jn}")
        oracle.check(len(set(ji)) == len(ji), f"duplicate joint indexes {ji}")
        for j in c.joints:
            oracle.check(j.gear_ratio > 0, f"gear_ratio {j.gear_ratio}")
            oracle.check(12 <= j.encoder_bits <= 32, f"encoder_bits {j.encoder_bits}")
            t = j.thresholds
            for w, a in (
                (t.backlash_watch_rad, t.backlash_alert_rad),
                (t.amplitude_watch_rad_s, t.amplitude_alert_rad_s),
            ):
                oracle.check(w is None or a is None or w < a, f"watch {w} >= alert {a}")
            lo, hi = j.estimator.resonance_hz
            oracle.check(0 < lo < hi, f"resonance_hz {lo, hi}")
            oracle.check(
                j.backlash_cycle.sample_rate_hz > 2 * hi, "sample rate below twice the resonance"
            )


def check_issues(oracle: Oracle, issues: list[ConfigIssue], file: str, last_line: int) -> None:
    oracle.check(bool(issues), "refused without a single issue")
    for issue in issues:
        oracle.check(issue.file == file, f"issue names file {issue.file!r}, not {file!r}")
        # Line 0 means "the whole file" and is kept for a file that cannot be read at all.
        low = 0 if issue.message.startswith("cannot read") else 1
        oracle.check(low <= issue.line <= last_line, f"issue line {issue.line} not in the file")
        oracle.check(bool(issue.message.strip()), f"issue without a message at line {issue.line}")


TREES = [parse_yaml(p.read_text(), str(p)) for p in CONFIGS]


TREES.append(parse_yaml(multi_driver_text()))


TREE_FILE = "fuzz.yaml"


TREE_LAST_LINE = max(
    max(len(p.read_text().splitlines()) for p in CONFIGS), len(multi_driver_text().splitlines())
)


def tree_case(root: Node, oracle: Oracle) -> None:
    config, issues = load_tree(root, TREE_FILE)
    if config is not None:
        check_config(oracle, config)
    else:
        check_issues(oracle, issues, TREE_FILE, TREE_LAST_LINE)


TEXTS_FULL = [p.read_text() for p in CONFIGS] + [multi_driver_text()]


def file_case(data: bytes, oracle: Oracle, tmp: Path) -> None:
    path = tmp / "fuzz.yaml"
    path.write_bytes(data)
    file = str(path)
    last_line = max(1, data.count(b"\n") + 1)
    try:
        config = load_config(path)
    except ConfigError as exc:
        check_issues(oracle, issues_of(exc), file, last_line)
        if len(data) % 8 == 0:  # sampled: it parses the file again
            # config_issues must agree with load_config: the same list, never an exception
            oracle.check(config_issues(path) == issues_of(exc), "config_issues differs")
        raise
    check_config(oracle, config)
    oracle.check(config.source == file, f"source {config.source!r}")


# Found by this fuzzer (fixed in agent/schema/yaml_lines.py): YAML also ends a line at NEL, LS, PS,
# so PyYAML's line numbers counted `\x85agent:` as two lines and the error named line 2 of a
# file an editor shows as one line. Errors now name the LF-counted line.
NEL_CASE = b"\xc2\x85agent:"
