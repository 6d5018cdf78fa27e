"""Warnings about a valid config that weakens safety: every interlock rule switched off
(docs/safety.md, G9). `jha config check` prints them (the config is still valid: exit 0) and the
daemon logs them at start, so a rule turned off for commissioning is not forgotten.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from agent.config.model import Config, InterlockSettings
from agent.schema.yaml_lines import ConfigIssue, Node, load_yaml

# What motion is no longer refused for, rule by rule, when the rule is off.
_WHAT_IS_LOST = {
    "require_production_stop": "a cycle may start and go on while the controller is not "
    "stopped for production (automatic mode, a running program)",
    "require_permission": "a cycle may start without the controller's permission signal",
    "require_no_alarm": "a cycle may start and go on with an alarm active",
    "require_full_override": "a cycle may run at a speed override other than 100 %",
    "require_operator_absent": "a person in the cell (light curtain, area scanner) does not "
    "block motion; switch it on where a presence sensor is wired",
}


def _rules() -> list[str]:
    return [f.name for f in fields(InterlockSettings) if f.name.startswith("require_")]


def _line(root: Node | None, controller: int, rule: str) -> int:
    """The line of the rule if it is written, else of the `interlocks:` key, else of the
    controller (a rule left at its default); 0 when the file cannot be read again."""
    ctrl = None if root is None else root.find(("controllers", controller))
    if ctrl is None:
        return 0
    section = ctrl.entry("interlocks")
    if section is None:
        return ctrl.line
    written = section[1].entry(rule)
    return (section if written is None else written)[0].line


def interlock_warnings(config: Config, path: str | Path | None = None) -> list[ConfigIssue]:
    """One warning per interlock rule that is off, per controller that runs test cycles
    (a streaming-only controller never moves on the agent's command)."""
    file = str(path if path is not None else config.source)
    try:
        root: Node | None = load_yaml(file)
    except Exception:  # the config came from memory, or the file changed: lines unknown
        root = None
    defaults = InterlockSettings()
    found = []
    for i, ctrl in enumerate(config.controllers):
        if not ctrl.joints:
            continue
        for rule in _rules():
            if getattr(ctrl.interlocks, rule):
                continue
            how = "off by default" if not getattr(defaults, rule) else "switched off"
            found.append(
                ConfigIssue(
                    file,
                    _line(root, i, rule),
                    f"controllers[{i}].interlocks.{rule}",
                    f"warning: interlock rule {how} ({ctrl.name}): "
                    f"{_WHAT_IS_LOST.get(rule, 'its check is skipped')}",
                )
            )
    return sorted(found, key=lambda w: w.line)
