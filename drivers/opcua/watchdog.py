"""The OPC UA driver's liveness watchdog: the counter the agent increments while a cycle runs.

The controller's program stops the motion when the counter has not changed for its watchdog
timeout (OpcUaWatchdog in drivers/opcua/settings.py), so an agent that dies or hangs mid-cycle
cannot leave the joint running. The counter is resolved at every connect (it must be an integer
variable), armed before every trigger, and fed by the driver from its event loop until the
cycle ends (OpcUaDriver._heartbeat).
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncua import ua
from asyncua.common.node import Node

from drivers.opcua.security import RejectedError
from drivers.opcua.session import OpcUaSession
from drivers.opcua.settings import OpcUaWatchdog

# The watchdog counter wraps below the range of the smallest integer type that may hold it.
_SMALL_INTEGERS = {ua.VariantType.SByte: 2**7, ua.VariantType.Byte: 2**7}
_INTEGERS = {
    ua.VariantType.Int16,
    ua.VariantType.UInt16,
    ua.VariantType.Int32,
    ua.VariantType.UInt32,
    ua.VariantType.Int64,
    ua.VariantType.UInt64,
    *_SMALL_INTEGERS,
}
_BEAT = "write the watchdog counter"


@dataclass(frozen=True)
class WatchdogNodes:
    """The watchdog's variables on one session, with the types the server declares for them."""

    settings: OpcUaWatchdog
    counter: Node
    counter_type: ua.VariantType
    timeout: Node | None
    timeout_type: ua.VariantType | None

    def next_value(self, value: int) -> int:
        """The counter after `value`, wrapping back to 1 below the range of its type."""
        return value % _SMALL_INTEGERS.get(self.counter_type, 2**15) + 1


async def resolve_watchdog(session: OpcUaSession, w: OpcUaWatchdog) -> WatchdogNodes:
    """The configured watchdog variables on the session; RejectedError if unusable."""
    counter = session.node(w.node)
    counter_type = await session.variable_type(counter, f"watchdog variable {w.node}")
    if counter_type not in _INTEGERS:
        raise RejectedError(
            f"watchdog variable {w.node} is a {counter_type.name}, expected an integer type"
        )
    timeout = timeout_type = None
    if w.timeout_node is not None:
        timeout = session.node(w.timeout_node)
        timeout_type = await session.variable_type(
            timeout, f"watchdog timeout variable {w.timeout_node}"
        )
    return WatchdogNodes(w, counter, counter_type, timeout, timeout_type)


async def arm_watchdog(session: OpcUaSession, nodes: WatchdogNodes) -> int:
    """Write the timeout (when the controller takes it from us) and the first beat; returns
    the counter value written.

    The first beat goes out before the trigger: a watchdog the agent cannot feed refuses the
    cycle before anything moves, rather than aborting it once the joint runs.
    """
    if nodes.timeout is not None and nodes.timeout_type is not None:
        await session.write_value(
            nodes.timeout,
            nodes.settings.timeout_s,
            nodes.timeout_type,
            "write the watchdog timeout",
        )
    (dv,) = await session.read([nodes.counter], "read the watchdog counter")
    current = dv.Value.Value if dv.Value is not None else 0
    value = current if isinstance(current, int) and not isinstance(current, bool) else 0
    value = nodes.next_value(value)
    await write_beat(session, nodes, value)
    return value


async def write_beat(session: OpcUaSession, nodes: WatchdogNodes, value: int) -> None:
    """One beat: the counter set to `value`; DriverError when the write fails."""
    await session.write_value(nodes.counter, value, nodes.counter_type, _BEAT)
