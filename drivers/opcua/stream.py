"""One capture's subscription: buffer chunks, cycle status and controller state -> a Capture.

Created per cycle by the OPC UA driver (see drivers/opcua/driver.py for why a subscription): a
data-change monitored item per buffer variable, plus the cycle status and the controller state,
each with its own server-side queue. The current values that arrive first (the snapshot) give the
sequence number the capture continues from; after the trigger every chunk is paired, checked and
appended (drivers/opcua/capture.py) until the controller reports the cycle done with every
sample in. Anything else raises: the driver then stops the motion.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from asyncua import ua
from asyncua.common.node import Node

from agent.capture.model import Capture
from agent.errors import CycleAborted, DriverError
from agent.logfmt import kv
from drivers.base import BacklashCycle, ControllerMode, within
from drivers.opcua.capture import (
    CaptureAssembler,
    ChunkError,
    ChunkPairer,
    decode_chunk,
    expected_samples,
)
from drivers.opcua.session import OpcUaSession
from drivers.opcua.settings import CycleStatus, OpcUaSettings
from drivers.opcua.status import RawValue, decode_cycle_status, decode_mode

# Modes in which a running cycle may go on (the interlock watcher applies the same rule).
_RUN_MODES = {ControllerMode.STOPPED, ControllerMode.TEST_CYCLE}
_OVERFLOW_BITS = 0x480  # StatusCode info bits: InfoType DataValue + Overflow
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Granted:
    """What the server granted the buffer items: the revised sampling interval (the longest of
    them; 0 = every change is reported) and queue size (the smallest), None when the server
    would not say."""

    sampling_interval_ms: float | None
    queue_size: int | None

    def folding_hint(self) -> str:
        """Why chunks can go missing although nothing was lost on the wire: a server folds the
        value changes of an item that come faster than its sampling interval (OPC 10000-4
        5.12.1.2), and the k-th value of each buffer is then no longer chunk k."""
        ms = self.sampling_interval_ms
        if not ms:
            return ""
        return (
            f"; the server samples the buffer nodes every {ms:g} ms (its revised sampling "
            "interval) and folds changes that come faster: the controller must publish at most "
            f"one chunk per {ms:g} ms, or the server must grant these nodes a sampling interval "
            "of 0 (every change reported)"
        )


class _Watch:
    """Receives the subscription's notifications (asyncua calls it; it never raises)."""

    def __init__(self, roles: dict[int, str], buffer_roles: tuple[str, ...]) -> None:
        self.roles = roles
        self.buffer_roles = buffer_roles
        self.pairer = ChunkPairer(buffer_roles)
        self.cycle_status: deque[RawValue] = deque()
        self.state: deque[RawValue] = deque()
        self.error: DriverError | None = None
        self.changed = asyncio.Event()

    def datachange_notification(self, node: Node, val: Any, data: Any) -> None:
        item = data.monitored_item
        role = self.roles.get(item.ClientHandle)
        dv: ua.DataValue = item.Value
        code = dv.StatusCode if dv.StatusCode is not None else ua.StatusCode()
        value = dv.Value.Value if dv.Value is not None else None
        try:
            if role in ("cycle_status", "state"):
                queue = self.cycle_status if role == "cycle_status" else self.state
                queue.append(RawValue(node.nodeid.to_string(), value, code.is_good(), code.name))
            elif role is not None:
                overflow = (code.value & _OVERFLOW_BITS) == _OVERFLOW_BITS
                self.pairer.push(role, value, good=code.is_good(), overflow=overflow)
        except DriverError as exc:
            self.error = self.error or exc
        self.changed.set()

    def status_change_notification(self, status: ua.StatusChangeNotification) -> None:
        self.error = self.error or DriverError(
            f"the capture subscription ended ({status.Status.name}): the connection to the "
            "controller was lost or its server shut down"
        )
        self.changed.set()


class CaptureStream:
    def __init__(
        self,
        session: OpcUaSession,
        settings: OpcUaSettings,
        buffers: tuple[tuple[str, Node], ...],
        cycle_status: Node,
        state: Node,
        *,
        machine: str,
    ) -> None:
        self.session = session
        self.settings = settings
        self.machine = machine
        self.nodes = {**dict(buffers), "cycle_status": cycle_status, "state": state}
        self.handles = {i + 1: role for i, role in enumerate(self.nodes)}
        self.watch = _Watch(self.handles, tuple(role for role, _ in buffers))
        self.assembler: CaptureAssembler | None = None
        self.granted = Granted(None, None)
        self._sub: Any = None

    async def open(self) -> None:
        """Create the subscription and its monitored items."""
        s = self.settings
        interval = s.publishing_interval_ms
        # Keep-alives at the stall timeout: data flows all through a capture anyway, and
        # asyncua (>= 2) recreates a subscription that stays silent for 1.5 keep-alive periods,
        # which mid-capture would only replay old values. Silence is judged by stall_timeout_s.
        keepalive = max(1, math.ceil(s.stall_timeout_s * 1000.0 / interval))
        params = ua.CreateSubscriptionParameters(
            RequestedPublishingInterval=interval,
            RequestedLifetimeCount=max(3 * keepalive, math.ceil(10_000.0 / interval)),
            RequestedMaxKeepAliveCount=keepalive,
            MaxNotificationsPerPublish=0,
            PublishingEnabled=True,
            Priority=0,
        )
        session = self.session
        self._sub = await session.request(
            session.client.create_subscription(params, self.watch),
            "create the capture subscription",
        )
        # StatusValueTimestamp: a chunk equal to the previous one still notifies (the server
        # stamps each write), so the k-th value of each buffer stays chunk k.
        flt = ua.DataChangeFilter(Trigger=ua.DataChangeTrigger.StatusValueTimestamp)
        requests = [
            ua.MonitoredItemCreateRequest(
                ItemToMonitor=ua.ReadValueId(
                    NodeId=self.nodes[role].nodeid, AttributeId=ua.AttributeIds.Value
                ),
                MonitoringMode=ua.MonitoringMode.Reporting,
                RequestedParameters=ua.MonitoringParameters(
                    ClientHandle=handle,
                    SamplingInterval=0.0,
                    QueueSize=s.queue_size,
                    DiscardOldest=True,
                    Filter=flt,
                ),
            )
            for handle, role in self.handles.items()
        ]
        results = await session.request(
            self._sub.create_monitored_items(requests), "subscribe to the sample buffers"
        )
        bad = [
            (self.handles[i + 1], r) for i, r in enumerate(results) if isinstance(r, ua.StatusCode)
        ]
        if bad:
            role, code = bad[0]
            raise DriverError(f"cannot monitor the {role} node: {code.name}")
        self.granted = await self._granted([r for r in results if isinstance(r, int)], requests)

    async def _granted(
        self, server_handles: list[int], requests: list[ua.MonitoredItemCreateRequest]
    ) -> Granted:
        """The sampling interval and queue size the server granted the buffer items.

        The create response carries them, but asyncua keeps neither; a ModifyMonitoredItems with
        the parameters just requested changes nothing and returns them again. A server that
        refuses the request leaves them unknown: the capture's own checks still hold.
        """
        s = self.settings
        buffer_handles = {h for h, role in self.handles.items() if role in self.watch.buffer_roles}
        params = ua.ModifyMonitoredItemsParameters()
        params.SubscriptionId = self._sub.subscription_id
        params.TimestampsToReturn = ua.TimestampsToReturn.Both
        for server_handle, request in zip(server_handles, requests, strict=True):
            if request.RequestedParameters.ClientHandle in buffer_handles:
                item = ua.MonitoredItemModifyRequest()
                item.MonitoredItemId = server_handle
                item.RequestedParameters = request.RequestedParameters
                params.ItemsToModify.append(item)
        try:
            results = await self.session.request(
                self.session.client.uaclient.modify_monitored_items(params),
                "read back the sampling interval granted to the buffers",
            )
        except (DriverError, ua.UaError) as exc:
            log.info(kv("opcua_granted_unknown", endpoint=s.endpoint, why=str(exc)))
            return Granted(None, None)
        good = [r for r in results if r.StatusCode.is_good()]
        if not good:
            return Granted(None, None)
        granted = Granted(
            max(float(r.RevisedSamplingInterval) for r in good),
            min(int(r.RevisedQueueSize) for r in good),
        )
        log.info(
            kv(
                "opcua_buffers_granted",
                endpoint=s.endpoint,
                sampling_interval_ms=granted.sampling_interval_ms,
                queue_size=granted.queue_size,
                requested_queue_size=s.queue_size,
            )
        )
        return granted

    def fail(self, error: DriverError) -> None:
        """End collect() with this error (from outside: the watchdog heartbeat failed)."""
        self.watch.error = self.watch.error or error
        self.watch.changed.set()

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None and not self.session.lost.is_set():
            with contextlib.suppress(DriverError):
                await self.session.request(sub.delete(), "delete the capture subscription")

    async def snapshot(self, cycle: BacklashCycle) -> None:
        """Wait for every item's current value: the sequence number the capture follows."""
        s = self.settings
        watch = self.watch
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2.0 * s.request_timeout_s
        while True:
            watch.changed.clear()
            if watch.error is not None:
                raise watch.error
            snap = watch.pairer.pop() if watch.cycle_status and watch.state else None
            if snap is not None:
                break
            left = deadline - loop.time()
            if left <= 0 or self.session.lost.is_set():
                raise DriverError("no initial values from the capture subscription")
            with contextlib.suppress(TimeoutError):
                await within(watch.changed.wait(), left)
        seq = snap["sequence"]
        modulus = s.buffers.sequence_modulus
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < modulus:
            raise DriverError(
                f"the sequence number node holds {seq!r}, expected an integer in 0..{modulus - 1}"
            )
        status = decode_cycle_status(watch.cycle_status.popleft(), s.cycle.status_values)
        if status == CycleStatus.RUNNING:
            raise DriverError("the controller is already running a cycle")
        decode_mode(watch.state.popleft(), s.status.state_values)
        self.assembler = CaptureAssembler(
            first_sequence=(seq + 1) % modulus,
            expected_samples=expected_samples(cycle),
            sample_rate_hz=cycle.sample_rate_hz,
            tolerance=s.sample_count_tolerance,
            sequence_modulus=modulus,
            drop_identical=s.duplicate_chunks == "drop_identical",
        )

    async def collect(self, cycle: BacklashCycle) -> Capture:
        """Chunks until the controller reports done with every sample in; raises otherwise."""
        s, watch, assembler = self.settings, self.watch, self.assembler
        if assembler is None:
            raise RuntimeError("snapshot() must come before collect()")
        loop = asyncio.get_running_loop()
        # Before the first chunk the controller ramps and settles: allow for that once.
        deadline = loop.time() + cycle.settle_s + s.stall_timeout_s
        running = done = False
        while True:
            watch.changed.clear()
            if watch.error is not None:
                raise watch.error
            while (raw := watch.pairer.pop()) is not None:
                chunk = decode_chunk(
                    raw,
                    encoder_bits=cycle.encoder_bits,
                    time_unit_s=s.buffers.time_unit_s,
                    current_unit_a=s.buffers.current_unit_a,
                    sequence_modulus=s.buffers.sequence_modulus,
                )
                try:
                    assembler.add(chunk)
                except ChunkError as exc:
                    raise ChunkError(f"{exc}{self.granted.folding_hint()}") from exc
                deadline = loop.time() + s.stall_timeout_s
            while watch.state:
                mode = decode_mode(watch.state.popleft(), s.status.state_values)
                if mode not in _RUN_MODES:
                    raise CycleAborted(f"the controller left the stopped state (now {mode.value})")
            while watch.cycle_status:
                status = decode_cycle_status(watch.cycle_status.popleft(), s.cycle.status_values)
                if status in (CycleStatus.ABORTED, CycleStatus.FAULT):
                    raise CycleAborted(f"the controller reports the cycle {status}")
                running = running or status == CycleStatus.RUNNING
                if status == CycleStatus.DONE and running and not done:
                    done = True
                    deadline = min(deadline, loop.time() + s.stall_timeout_s)
            if done and assembler.complete:
                return assembler.capture(
                    cycle,
                    machine=self.machine,
                    source=f"opcua:{self.machine}/{cycle.joint}",
                    extra={
                        "endpoint": s.endpoint,
                        "duplicate_chunks_dropped": assembler.duplicates_dropped,
                    },
                )
            if self.session.lost.is_set():
                raise DriverError(f"connection lost mid-capture ({self.session.lost_reason})")
            left = deadline - loop.time()
            if left <= 0:
                if done:
                    raise ChunkError(
                        f"capture incomplete: {assembler.samples} of "
                        f"{assembler.expected_samples} samples arrived before the "
                        "controller reported done (the last chunk(s) were lost)"
                        f"{self.granted.folding_hint()}"
                    )
                raise DriverError(
                    f"the controller stalled: no chunk for {s.stall_timeout_s:g} s "
                    f"({assembler.samples} samples in)"
                )
            await self._wait(left)

    async def _wait(self, timeout_s: float) -> None:
        """Until a notification arrives, the link is lost, or the timeout passes."""
        lost = asyncio.ensure_future(self.session.lost.wait())
        changed = asyncio.ensure_future(self.watch.changed.wait())
        try:
            await asyncio.wait(
                {lost, changed}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            lost.cancel()
            changed.cancel()
