"""Raw OPC UA values -> ControllerStatus and cycle status, refusing anything unexpected.

A value the controller should never send (a state the config does not map, a permission that is
not a Boolean, a position array of strings) is not guessed at: it raises DriverError naming the
node, and the interlocks treat that like a lost controller.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.errors import DriverError
from drivers.base import ControllerMode, ControllerStatus
from drivers.opcua.settings import CycleStatus, OpcUaStatusNodes

# The status roles read in one request, in this order (optional ones only when configured).
STATUS_ROLES = (
    "state",
    "permission",
    "joint_positions",
    "alarms",
    "speed_override",
    "operator_present",
)


@dataclass(frozen=True)
class RawValue:
    """One value as read from the server: the node id (for messages), the value, its quality."""

    node: str
    value: Any
    good: bool = True
    status: str = ""


def status_roles(nodes: OpcUaStatusNodes) -> dict[str, str]:
    """Role -> node id for every status node the config sets."""
    return {r: getattr(nodes, r) for r in STATUS_ROLES if getattr(nodes, r) is not None}


def _lookup(table: Mapping[str | int, Any], raw: Any) -> Any:
    # Keys come from YAML (strings, or ints for enumeration values); the server may send
    # either, so both sides are compared as text. A Boolean state is never a valid key match.
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        return None
    text = str(raw)
    for key, value in table.items():
        if str(key) == text:
            return value
    return None


def decode_mode(raw: RawValue, table: Mapping[str | int, ControllerMode]) -> ControllerMode:
    _check_good(raw, "controller state")
    mode = _lookup(table, raw.value)
    if mode is None:
        known = ", ".join(repr(k) for k in table)
        raise DriverError(
            f"controller state node {raw.node} holds {raw.value!r}, which state_values does not "
            f"map (known: {known})"
        )
    return mode


def decode_cycle_status(raw: RawValue, table: Mapping[str | int, CycleStatus]) -> CycleStatus:
    _check_good(raw, "cycle status")
    status = _lookup(table, raw.value)
    if status is None:
        known = ", ".join(repr(k) for k in table)
        raise DriverError(
            f"cycle status node {raw.node} holds {raw.value!r}, which status_values does not "
            f"map (known: {known})"
        )
    return status


def _check_good(raw: RawValue, what: str) -> None:
    if not raw.good:
        raise DriverError(f"{what} node {raw.node} has bad quality ({raw.status})")


def _is_finite_number(v: Any) -> bool:
    """A real number a float can hold: not a Boolean, not NaN or infinite, not an integer
    too large for a float (math.isfinite raises OverflowError on those)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _number(raw: RawValue, what: str) -> float:
    v = raw.value
    if not _is_finite_number(v):
        raise DriverError(f"{what} node {raw.node} holds {v!r:.80}, expected a finite number")
    return float(v)


def _bool(raw: RawValue, what: str) -> bool:
    if not isinstance(raw.value, bool):
        raise DriverError(f"{what} node {raw.node} holds {raw.value!r}, expected a Boolean")
    return raw.value


def _alarms(raw: RawValue) -> tuple[str, ...]:
    v = raw.value
    if v is None or v == "" or v is False:
        return ()
    if v is True:
        return ("alarm",)
    if isinstance(v, str):
        return (v,)
    if isinstance(v, int):
        return () if v == 0 else (f"alarm code {v}",)
    if isinstance(v, list | tuple) and all(isinstance(a, str) for a in v):
        return tuple(a for a in v if a)
    raise DriverError(
        f"alarms node {raw.node} holds {v!r}, expected a String array, String, Boolean or integer"
    )


def _positions(raw: RawValue, joints: Sequence[Any], scale: float) -> dict[str, float]:
    v = raw.value
    if not isinstance(v, list | tuple) or not all(_is_finite_number(x) for x in v):
        raise DriverError(
            f"joint positions node {raw.node} holds {v!r:.80}, expected an array of numbers"
        )
    out: dict[str, float] = {}
    for j in joints:
        if j.index - 1 < len(v):  # a joint beyond the array stays unknown: interlocks refuse it
            rad = float(v[j.index - 1]) * scale
            if not math.isfinite(rad):  # a huge raw value times the configured scale
                raise DriverError(
                    f"joint positions node {raw.node}: joint {j.name} at {v[j.index - 1]!r:.40} "
                    f"x scale {scale:g} is not a finite angle"
                )
            out[j.name] = rad
    return out


def decode_status(
    values: Mapping[str, RawValue], nodes: OpcUaStatusNodes, joints: Sequence[Any]
) -> ControllerStatus:
    """One ControllerStatus from the values of status_roles(nodes), read together."""
    mode = decode_mode(values["state"], nodes.state_values)
    for role, raw in values.items():
        _check_good(raw, role.replace("_", " "))
    permission = _bool(values["permission"], "permission")
    positions = (
        _positions(values["joint_positions"], joints, nodes.joint_position_scale)
        if "joint_positions" in values
        else {}
    )
    alarms = _alarms(values["alarms"]) if "alarms" in values else ()
    override = 1.0
    if "speed_override" in values:
        raw_override = values["speed_override"]
        override = _number(raw_override, "speed override") * nodes.speed_override_scale
        if not math.isfinite(override):
            raise DriverError(
                f"speed override node {raw_override.node} holds {raw_override.value!r:.40}, "
                f"beyond any override once scaled by {nodes.speed_override_scale:g}"
            )
    operator = (
        _bool(values["operator_present"], "operator present")
        if "operator_present" in values
        else None
    )
    return ControllerStatus(
        mode=mode,
        permission=permission,
        joint_positions_rad=positions,
        alarms=alarms,
        speed_override=override,
        operator_present=operator,
        time_s=time.monotonic(),
    )
