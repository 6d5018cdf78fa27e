"""Loading the config: one YAML file -> Config, every mistake reported with file:line.

Field checks come from the dataclasses' metadata (agent.schema.validate); the cross-field rules
(watch < alert, calibration points, schedules, unique names) and each driver's own `settings:`
section (validated by its `settings_type`, Telegraf-style) are checked here. Drivers are found
through their entry points, and imported only when their settings are checked.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import replace
from difflib import get_close_matches
from pathlib import Path

from agent.capture.bounds import MAX_CAPTURE_SAMPLES, capture_samples
from agent.config.model import (
    CalibrationSettings,
    Config,
    ControllerSettings,
    EstimatorSettings,
    JointSettings,
    ScheduleTrigger,
    ThresholdSettings,
)
from agent.errors import AgentError, ConfigError
from agent.estimation.backlash.samples import FIT_MAX_SAMPLES
from agent.schema.validate import Check, validate
from agent.schema.yaml_lines import ConfigIssue, Node, config_error, issues_of, join_path, load_yaml
from drivers.machine import MachineAddressed

# Settings types to use while a registered driver's module is not written yet (entry point first).
_SETTINGS_FALLBACK = {"sim": "drivers.sim.settings:SimSettings"}
_MIN_CALIBRATION_POINTS = 4


def load_config(path: str | Path) -> Config:
    """Read and validate the config file; raise one ConfigError (`.issues`) listing all mistakes."""
    config, issues = _load(path)
    if issues or config is None:
        raise config_error(issues)
    return config


def config_issues(path: str | Path) -> list[ConfigIssue]:
    """Every mistake in the config file, sorted by line; an empty list means it is valid."""
    return _load(path)[1]


def _load(path: str | Path) -> tuple[Config | None, list[ConfigIssue]]:
    file = str(path)
    try:
        root = load_yaml(path)
    except ConfigError as exc:
        return None, issues_of(exc)
    config, issues = validate(Config, root, file, checks=_CHECKS)
    issues += _duplicate_names(root, file)
    settings, driver_issues = _driver_settings(root, file)
    issues += driver_issues
    issues += _shared_machines(root, settings, file)
    if issues or config is None:
        return None, sorted(issues, key=lambda i: i.line)
    controllers = tuple(
        replace(c, settings=s) for c, s in zip(config.controllers, settings, strict=True)
    )
    travel = _travel_issues(root, controllers, file)
    if travel:
        return None, sorted(travel, key=lambda i: i.line)
    return replace(config, controllers=controllers, source=file), []


def _travel_issues(
    root: Node, controllers: tuple[ControllerSettings, ...], file: str
) -> list[ConfigIssue]:
    """Every joint a driver may move needs travel limits (agent.config.travel_limits)."""
    from agent.config.travel_limits import travel_issues

    nodes = _seq(root, "controllers")
    out = []
    for i, c in enumerate(controllers):
        if not c.joints or not _driver_runs_cycles(c.driver):
            continue
        joints = _seq(nodes.items[i], "joints") if nodes is not None else None
        for j, key, msg in travel_issues(c):
            node = joints.items[j] if joints is not None else None
            where = node.get(key) if node is not None and node.kind == "mapping" else None
            at = where if where is not None else node
            line = at.line if at is not None else 1
            out.append(ConfigIssue(file, line, f"controllers[{i}].joints[{j}].{key}", msg))
    return out


def _g(x: float) -> str:
    return f"{x:g}"


def _check_thresholds(t: ThresholdSettings) -> list[tuple[str, str]]:
    out = []
    for watch, alert in (
        ("backlash_watch_rad", "backlash_alert_rad"),
        ("amplitude_watch_rad_s", "amplitude_alert_rad_s"),
    ):
        w, a = getattr(t, watch), getattr(t, alert)
        if w is not None and a is not None and not w < a:
            out.append((watch, f"expected a number < {alert} ({_g(a)}), found {_g(w)}"))
    return out


def _check_calibration(c: CalibrationSettings) -> list[tuple[str, str]]:
    out = []
    if c.source == "points":
        if len(c.points) < _MIN_CALIBRATION_POINTS:
            out.append(
                (
                    "points",
                    f"expected at least {_MIN_CALIBRATION_POINTS} points for source 'points', "
                    f"found {len(c.points)}",
                )
            )
        for i in range(1, len(c.points)):
            for name in ("amplitude_rad_s", "backlash_rad"):
                prev, cur = getattr(c.points[i - 1], name), getattr(c.points[i], name)
                if not cur > prev:
                    out.append(
                        (
                            f"points[{i}].{name}",
                            f"expected a number > {_g(prev)} (points must increase strictly in "
                            f"{name}), found {_g(cur)}",
                        )
                    )
    if c.source == "simulation" and len(c.sweep_backlash_rad) < _MIN_CALIBRATION_POINTS:
        out.append(
            (
                "sweep_backlash_rad",
                f"expected at least {_MIN_CALIBRATION_POINTS} values for source 'simulation', "
                f"found {len(c.sweep_backlash_rad)}",
            )
        )
    return out


def _check_estimator(e: EstimatorSettings) -> list[tuple[str, str]]:
    out = []
    for name in ("resonance_hz", "decay_per_s"):
        low, high = getattr(e, name)
        for i, bound in enumerate((low, high)):
            if not bound > 0:
                out.append((f"{name}[{i}]", f"expected a number > 0, found {_g(bound)}"))
        if not low < high:
            found = f"[{_g(low)}, {_g(high)}]"
            out.append((name, f"expected [low, high] with low < high, found {found}"))
    return out


def _check_joint(j: JointSettings) -> list[tuple[str, str]]:
    out = []
    rate, top = j.backlash_cycle.sample_rate_hz, j.estimator.resonance_hz[1]
    if not rate > 2 * top:
        out.append(
            (
                "backlash_cycle.sample_rate_hz",
                f"expected a number > {_g(2 * top)} (twice estimator.resonance_hz[1] = "
                f"{_g(top)} Hz, so the resonance stays below Nyquist), found {_g(rate)}",
            )
        )
    c = j.backlash_cycle
    # The duration agent.kinds.backlash.kind.backlash_cycle() gives the cycle: load turns at
    # gear_ratio motor turns each, at motor_speed_rps.
    duration_s = c.load_turns * j.gear_ratio / c.motor_speed_rps
    low, high = j.estimator.resonance_hz
    if duration_s > 0 and 0 < low < high and high - low < 2.0 / duration_s:
        # Narrower than two frequency bins of the capture: the band holds no resonance it
        # could see, and every joint would read an amplitude of 0, "OK".
        out.append(
            (
                "estimator.resonance_hz",
                f"expected a band at least {_g(2.0 / duration_s)} Hz wide (two frequency bins "
                f"of the {_g(duration_s)} s capture), found [{_g(low)}, {_g(high)}]",
            )
        )
    samples = capture_samples(duration_s, rate)
    if samples > MAX_CAPTURE_SAMPLES:
        out.append(
            (
                "backlash_cycle",
                f"expected a capture of at most {MAX_CAPTURE_SAMPLES:,} samples per channel, "
                f"found {samples:,} ({_g(c.load_turns)} load turns x gear_ratio "
                f"{_g(j.gear_ratio)} / {_g(c.motor_speed_rps)} motor rev/s = {_g(duration_s)} s "
                f"at {_g(rate)} Hz); fewer load_turns, a faster motor_speed_rps or a lower "
                "sample_rate_hz",
            )
        )
    elif samples > FIT_MAX_SAMPLES:
        out.append(
            (
                "backlash_cycle",
                f"expected a capture the fit can use whole, at most {FIT_MAX_SAMPLES:,} samples "
                f"({_g((FIT_MAX_SAMPLES - 1) / rate)} s at {_g(rate)} Hz), found {samples:,} "
                f"({_g(duration_s)} s): the rest would be motion for nothing; fewer "
                "load_turns, a faster motor_speed_rps or a lower sample_rate_hz",
            )
        )
    return out


def _check_controller(c: ControllerSettings) -> list[tuple[str, str]]:
    ident = c.identification
    if ident is None or ident.samples_per_channel <= MAX_CAPTURE_SAMPLES:
        return []
    t = ident.trajectory
    return [
        (
            "identification",
            f"expected a capture of at most {MAX_CAPTURE_SAMPLES:,} samples per channel, found "
            f"{ident.samples_per_channel:,} ({t.periods} periods x {_g(t.period_s)} s + 2 x "
            f"hold_s {_g(t.hold_s)} s = {_g(ident.duration_s)} s at {_g(ident.sample_rate_hz)} "
            "Hz); fewer or shorter trajectory periods or a lower sample_rate_hz",
        )
    ]


def _check_schedule(t: ScheduleTrigger) -> list[tuple[str, str]]:
    from agent.config.schedule import parse_cron, parse_window

    out = []
    if (t.every_s is None) == (t.cron is None):
        out.append(("every_s", "expected exactly one of every_s or cron"))
    for name, parse in (("cron", parse_cron), ("window", parse_window)):
        text = getattr(t, name)
        if text is None:
            continue
        try:
            parse(text)
        except ValueError as exc:
            out.append((name, str(exc)))
    return out


_CHECKS: dict[type, Check] = {
    ScheduleTrigger: _check_schedule,
    ThresholdSettings: _check_thresholds,
    CalibrationSettings: _check_calibration,
    EstimatorSettings: _check_estimator,
    JointSettings: _check_joint,
    ControllerSettings: _check_controller,
}


def _seq(node: Node | None, key: str) -> Node | None:
    """node[key] when node is a mapping and node[key] a list."""
    if node is None or node.kind != "mapping":
        return None
    child = node.get(key)
    return child if child is not None and child.kind == "sequence" else None


def _duplicate_names(root: Node, file: str) -> list[ConfigIssue]:
    """Names must be identifiers and unique, indexes unique; checked on the tree so other
    mistakes do not hide them."""
    controllers = _seq(root, "controllers")
    if controllers is None:
        return []
    out = _identifiers(controllers, "controllers", file)
    out += _duplicates(controllers, "controllers", "name", str, file)
    for i, c in enumerate(controllers.items):
        joints = _seq(c, "joints")
        if joints is not None:
            base = f"controllers[{i}].joints"
            out += _identifiers(joints, base, file)
            out += _duplicates(joints, base, "name", str, file)
            out += _duplicates(joints, base, "index", int, file)
    return out


# A name becomes a directory under state_dir, an MQTT topic level and a report's anchor: a letter
# first, then letters, digits, _ or - (no '', '..', '/', '+', '#' or spaces).
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def _identifiers(items: Node, base: str, file: str) -> list[ConfigIssue]:
    out = []
    for i, item in enumerate(items.items):
        node = item.get("name") if item.kind == "mapping" else None
        if node is None or not isinstance(node.value, str) or NAME_RE.fullmatch(node.value):
            continue  # missing or mistyped: the schema reports it
        msg = (
            "expected a name of 1 to 64 letters, digits, _ or - starting with a letter, "
            f"found {node.value!r}"
        )
        out.append(ConfigIssue(file, node.line, join_path(f"{base}[{i}]", "name"), msg))
    return out


def _duplicates(items: Node, base: str, key: str, tp: type, file: str) -> list[ConfigIssue]:
    first: dict[object, tuple[int, int]] = {}
    out = []
    for i, item in enumerate(items.items):
        node = item.get(key) if item.kind == "mapping" else None
        if node is None or type(node.value) is not tp:
            continue  # missing or mistyped: the schema reports it
        if node.value in first:
            j, line = first[node.value]
            shown = repr(node.value) if isinstance(node.value, str) else node.text
            msg = (
                f"expected a unique {key} among {base}, found {shown} again "
                f"(first used by {base}[{j}] at line {line})"
            )
            out.append(ConfigIssue(file, node.line, join_path(f"{base}[{i}]", key), msg))
        else:
            first[node.value] = (i, node.line)
    return out


def _driver_settings(root: Node, file: str) -> tuple[list[object], list[ConfigIssue]]:
    """Each controller's `settings:` validated by its driver's settings_type (Telegraf-style)."""
    controllers = _seq(root, "controllers")
    if controllers is None:
        return [], []
    settings: list[object] = []
    issues: list[ConfigIssue] = []
    for i, c in enumerate(controllers.items):
        base = f"controllers[{i}]"
        driver = c.get("driver") if c.kind == "mapping" else None
        raw = c.get("settings") if c.kind == "mapping" else None
        if driver is None or not isinstance(driver.value, str):
            settings.append(None)  # the schema reports the missing or mistyped driver
            continue
        settings_type, problem = _settings_type(driver.value)
        if problem:
            issues.append(ConfigIssue(file, driver.line, f"{base}.driver", problem))
            settings.append(None)
            continue
        issues += _missing_joints(c, driver.value, base, file)
        if settings_type is None:  # the driver takes its settings as they are
            settings.append(None if raw is None else raw.plain())
            continue
        given = raw if raw is not None else Node("mapping", c.line, c.col)
        value, found = validate(settings_type, given, file, path=f"{base}.settings")
        issues += found
        issues += _unknown_joint_keys(c, given, base, file)
        settings.append(value)
    return settings, issues


def _shared_machines(root: Node, settings: list[object], file: str) -> list[ConfigIssue]:
    """One controller per machine: a second one reaching the same robot, bus or port would be a
    second runner moving it while the first does (drivers.machine)."""
    controllers = _seq(root, "controllers")
    if controllers is None:
        return []
    first: dict[str, tuple[int, int]] = {}
    out = []
    for i, (node, value) in enumerate(zip(controllers.items, settings, strict=False)):
        if not isinstance(value, MachineAddressed):
            continue  # a simulated controller, or settings the schema already refused
        address = value.machine_address()
        at = node.get("settings") if node.kind == "mapping" else None
        line = (at or node).line
        if address in first:
            j, first_line = first[address]
            msg = (
                f"expected one controller per machine, found {address} again (first reached by "
                f"controllers[{j}] at line {first_line}): two runners would move it at once"
            )
            out.append(ConfigIssue(file, line, f"controllers[{i}].settings", msg))
        else:
            first[address] = (i, line)
    return out


def _unknown_joint_keys(
    controller: Node, settings: Node, base: str, file: str
) -> list[ConfigIssue]:
    """A per-joint `settings.joints` mapping may only name joints of its controller."""
    by_joint = settings.get("joints") if settings.kind == "mapping" else None
    joints = _seq(controller, "joints")
    if by_joint is None or by_joint.kind != "mapping" or joints is None:
        return []
    names = list(
        dict.fromkeys(  # each name once, in file order, even if given twice
            n.value
            for j in joints.items
            if j.kind == "mapping" and (n := j.get("name")) is not None and isinstance(n.value, str)
        )
    )
    out = []
    for key, _ in by_joint.entries:
        if key.name in names:
            continue
        close = get_close_matches(key.name, names, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        msg = (
            f"expected the name of a joint of this controller ({', '.join(names)}), "
            f"found {key.name!r}{hint}"
        )
        out.append(ConfigIssue(file, key.line, join_path(f"{base}.settings.joints", key.name), msg))
    return out


def _missing_joints(controller: Node, driver: str, base: str, file: str) -> list[ConfigIssue]:
    """A driver that runs cycles needs joints to cycle; a streaming-only one may have none."""
    joints = controller.get("joints") if controller.kind == "mapping" else None
    if joints is not None and (joints.kind != "sequence" or joints.items):
        return []  # a wrong type is the schema's to report
    if not _driver_runs_cycles(driver):
        return []
    line = controller.line if joints is None else joints.line
    found = "required key is missing" if joints is None else "found an empty list"
    msg = f"expected at least 1 joint (driver {driver!r} runs test cycles), {found}"
    return [ConfigIssue(file, line, f"{base}.joints", msg)]


def _driver_runs_cycles(name: str) -> bool:
    from drivers.base import Capability, load_driver_class

    try:
        return Capability.CYCLES in load_driver_class(name).capabilities
    except Exception:  # not importable yet: assume the strict case
        return True


def _settings_type(name: str) -> tuple[type | None, str | None]:
    """(driver's settings_type, None) or (None, why the driver cannot be used)."""
    from drivers.base import available_drivers, install_hint, load_driver_class, missing_modules

    entry_points = available_drivers()
    if name not in entry_points:
        installed = ", ".join(sorted(entry_points)) or "none installed"
        close = get_close_matches(name, list(entry_points), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return None, f"expected an installed driver ({installed}), found {name!r}{hint}"
    try:
        cls = load_driver_class(name)
    except ModuleNotFoundError as exc:
        module = entry_points[name].module
        fallback = _SETTINGS_FALLBACK.get(name)
        if fallback is None or exc.name != module:
            return None, f"driver {name!r} is installed but cannot be imported: {exc}"
        mod_name, _, attr = fallback.partition(":")
        return getattr(importlib.import_module(mod_name), attr), None
    except AgentError as exc:
        return None, str(exc)
    except Exception as exc:  # a broken plugin must not crash `jha config check`
        return None, f"driver {name!r} cannot be loaded: {type(exc).__name__}: {exc}"
    missing = missing_modules(cls)
    if missing:
        return None, install_hint(name, missing[0])
    return cls.settings_type, None
