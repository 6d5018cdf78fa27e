"""A fake robot controller speaking OPC UA (an asyncua server), for the OPC UA driver's tests.

    python -m tests.peers.opcua_controller --config CONFIG.yaml [--controller NAME] [--port 0]

Prints `READY <endpoint>` on stdout once it listens; exits when stdin closes (so a test that
dies takes its peer with it) or when killed. It behaves like a controller:

- a state machine: production / stopped / test_cycle / manual / fault (Controller.State), a
  permission Boolean, joint positions (rad), alarms, speed override (percent);
- StartBacklashCycle(JointIndex, MotorSpeed, SettleS, DurationS, SampleRateHz), refused with
  BadInvalidState unless stopped with permission and idle; the same through parameter variables
  and Cycle.Start (the variable-write trigger); StopMotion() and Cycle.Stop;
- Cycle.Status: idle / running / done / aborted;
- sample buffers Buffers.TimeS / MotorCounts / LinkCounts / CurrentA rewritten chunk by chunk,
  then Buffers.Sequence bumped, paced at the capture's rate times --speedup; the samples come
  from drivers.sim.backlash.simulate_backlash_capture with the simulated fake's seed rule;
- a Plant object the tests use to play the plant's part: SetState, SetPermission,
  InjectFault(kind, after_chunks), counters of stop requests and cycles, and the publish rate.

- a liveness watchdog: Controller.Watchdog, an integer the agent increments while a cycle runs,
  and Controller.WatchdogTimeoutS (the agent may write it; --watchdog-s sets it, 0 = off). When
  the counter has not changed for that long during a cycle, the controller stops the motion by
  itself: Cycle.Status "aborted", Plant.WatchdogTrips + 1, Plant.WatchdogTripUnixTime and
  Plant.WatchdogSilentS (how long the counter stood still).

Faults (--fault KIND --fault-after N, or Plant.InjectFault; they act before chunk N of a cycle):
die (SIGKILL itself), freeze (block the server for --freeze-s), stall (stop publishing, stay
"running"), skip (skip a sequence number), garbage_type / garbage_shape / garbage_range (a
malformed motor-counts buffer), garbage_state (State becomes an unknown value), leave_stopped
(State becomes production while the cycle goes on), duplicate (chunk N is published twice,
same sequence number and samples), reorder (chunk N+1 is published before chunk N), flood (the
rest of the capture is published at once, without pacing), fast (chunk N's sample times are 4x
closer together: a controller sampling faster than asked), swap (samples 10 and 11 of chunk N
change places), repeat (sample 10 of chunk N is sent twice, sample 11 never).

The server, its security and its variables are tests/peers/opcua/server.py's; this module is
what the controller does with them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from asyncua import Server, ua

from agent.config.load import load_config
from agent.config.model import JointSettings
from drivers.base import BacklashCycle
from tests.peers.opcua.physics import Samples, cycle_samples, peer_cycle
from tests.peers.opcua.server import (
    add_variables,
    advertise,
    new_server,
    nid,
    write_untyped,
    write_value,
)

FAULTS = (
    "die",
    "freeze",
    "stall",
    "skip",
    "garbage_type",
    "garbage_shape",
    "garbage_range",
    "garbage_state",
    "leave_stopped",
    "duplicate",
    "reorder",
    "flood",
    "fast",
    "swap",
    "repeat",
)
log = logging.getLogger("opcua-peer")


@dataclass
class Peer:
    args: argparse.Namespace
    joints: dict[int, JointSettings]
    server: Server = field(default_factory=Server)
    state: str = "stopped"
    cycles_run: int = 0
    sequence: int = 0
    stop_requests: int = 0
    fault: str | None = None
    fault_after: int = 0
    task: asyncio.Task[None] | None = None
    untyped: bool = False  # the motor-counts buffer holds a wrong-typed value
    watchdog_s: float = 0.0
    last_beat: float = 0.0  # loop time of the last change of Controller.Watchdog
    watchdog_trips: int = 0
    began: float = 0.0  # perf_counter at the start of the cycle's publishing
    watchdog_task: asyncio.Task[None] | None = None
    nodes: dict[str, Any] = field(default_factory=dict)

    async def setup(self) -> str:
        a = self.args
        s = self.server = await new_server(a, self.server)
        await self._build(s)
        self.state = a.mode
        self.fault, self.fault_after = a.fault, a.fault_after
        await s.start()
        return advertise(s, a)

    async def _build(self, s: Server) -> None:
        self.nodes, objects = await add_variables(s, self.args, self.joints)
        ctrl, plant = objects["Controller"], objects["Plant"]
        s.set_attribute_value_setter(nid("Cycle.Start"), self._on_start_write)
        s.set_attribute_value_setter(nid("Cycle.Stop"), self._on_stop_write)
        s.set_attribute_value_setter(nid("Controller.Watchdog"), self._on_watchdog_write)
        s.set_attribute_value_setter(nid("Controller.WatchdogTimeoutS"), self._on_timeout_write)
        self.watchdog_s = self.args.watchdog_s

        def arg(name: str, t: int) -> ua.Argument:
            return ua.Argument(
                Name=name, DataType=ua.NodeId(t), ValueRank=-1, Description=ua.LocalizedText(name)
            )

        oid = ua.ObjectIds
        await ctrl.add_method(
            nid("Controller.StartBacklashCycle"),
            "StartBacklashCycle",
            self._start_method,
            [
                arg("JointIndex", oid.UInt32),
                arg("MotorSpeed", oid.Double),
                arg("SettleS", oid.Double),
                arg("DurationS", oid.Double),
                arg("SampleRateHz", oid.Double),
            ],
            [],
        )
        await ctrl.add_method(nid("Controller.StopMotion"), "StopMotion", self._stop_method, [], [])
        await plant.add_method(
            nid("Plant.SetState"), "SetState", self._set_state, [arg("State", oid.String)], []
        )
        await plant.add_method(
            nid("Plant.SetPermission"),
            "SetPermission",
            self._set_permission,
            [arg("Permission", oid.Boolean)],
            [],
        )
        await plant.add_method(
            nid("Plant.InjectFault"),
            "InjectFault",
            self._inject_fault,
            [arg("Kind", oid.String), arg("AfterChunks", oid.UInt32)],
            [],
        )

    # --- writes ------------------------------------------------------------------------------

    async def write(
        self,
        name: str,
        value: Any,
        vtype: ua.VariantType | None = None,
        stamp: dt.datetime | None = None,
    ) -> None:
        await write_value(self.server, name, value, vtype, stamp)

    async def set_state(self, state: str) -> None:
        self.state = state
        await self.write("Controller.State", state, ua.VariantType.String)

    # --- methods (parent node id first, then the Variants) -----------------------------------

    async def _start_method(self, parent: ua.NodeId, *args: ua.Variant) -> Any:
        joint, speed, settle, duration, rate = (a.Value for a in args)
        return await self.start_cycle(
            int(joint), float(speed), float(settle), float(duration), float(rate)
        )

    async def _stop_method(self, parent: ua.NodeId) -> list[ua.Variant]:
        await self.stop()
        return []

    async def _set_state(self, parent: ua.NodeId, state: ua.Variant) -> list[ua.Variant]:
        await self.set_state(str(state.Value))
        return []

    async def _set_permission(self, parent: ua.NodeId, value: ua.Variant) -> list[ua.Variant]:
        await self.write("Controller.Permission", bool(value.Value), ua.VariantType.Boolean)
        return []

    async def _inject_fault(self, parent: ua.NodeId, kind: ua.Variant, after: ua.Variant) -> Any:
        if kind.Value not in (*FAULTS, ""):
            return ua.StatusCode(ua.StatusCodes.BadInvalidArgument)
        self.fault = kind.Value or None
        self.fault_after = int(after.Value)
        return []

    def _on_start_write(self, node: Any, attr: ua.AttributeIds, dv: ua.DataValue) -> None:
        node.attributes[attr].value = dv
        if dv.Value is not None and dv.Value.Value is True:
            asyncio.get_running_loop().create_task(self._start_from_variables())

    def _on_watchdog_write(self, node: Any, attr: ua.AttributeIds, dv: ua.DataValue) -> None:
        old = node.attributes[attr].value
        node.attributes[attr].value = dv
        before = old.Value.Value if old is not None and old.Value is not None else None
        if dv.Value is not None and dv.Value.Value != before:
            self.last_beat = asyncio.get_running_loop().time()

    def _on_timeout_write(self, node: Any, attr: ua.AttributeIds, dv: ua.DataValue) -> None:
        node.attributes[attr].value = dv
        if dv.Value is not None and isinstance(dv.Value.Value, float):
            self.watchdog_s = max(0.0, dv.Value.Value)

    def _on_stop_write(self, node: Any, attr: ua.AttributeIds, dv: ua.DataValue) -> None:
        node.attributes[attr].value = dv
        if dv.Value is not None and dv.Value.Value is True:
            asyncio.get_running_loop().create_task(self.stop())

    async def _start_from_variables(self) -> None:
        read = self.server.read_attribute_value
        values = [
            read(nid(f"Cycle.{n}")).Value.Value
            for n in ("JointIndex", "MotorSpeed", "SettleS", "DurationS", "SampleRateHz")
        ]
        await self.write("Cycle.Start", False, ua.VariantType.Boolean)
        result = await self.start_cycle(int(values[0]), *(float(v) for v in values[1:]))
        if isinstance(result, ua.StatusCode):
            log.warning("variable trigger refused: %s", result.name)

    # --- the cycle ---------------------------------------------------------------------------

    async def start_cycle(
        self, joint_index: int, speed: float, settle: float, duration: float, rate: float
    ) -> Any:
        permission = self.server.read_attribute_value(nid("Controller.Permission")).Value
        if (
            self.state != "stopped"
            or not (permission and permission.Value)
            or (self.task is not None and not self.task.done())
        ):
            return ua.StatusCode(ua.StatusCodes.BadInvalidState)
        joint = self.joints.get(joint_index)
        if joint is None or not (speed != 0 and duration > 0 and rate > 0 and settle >= 0):
            return ua.StatusCode(ua.StatusCodes.BadInvalidArgument)
        cycle = peer_cycle(joint, speed, settle, duration, rate)
        seed = self.args.seed * 1000 + self.cycles_run
        self.cycles_run += 1
        await self.write("Plant.CyclesStarted", self.cycles_run, ua.VariantType.UInt32)
        await self.set_state("test_cycle")
        await self.write("Cycle.Status", "running", ua.VariantType.String)
        loop = asyncio.get_running_loop()
        self.last_beat = loop.time()  # the trigger itself shows the agent alive
        self.task = loop.create_task(self._cycle(joint, cycle, seed))
        self.watchdog_task = loop.create_task(self._watchdog(self.task))
        return []

    async def _watchdog(self, cycle: asyncio.Task[None]) -> None:
        """The controller's side of the liveness watchdog, for one cycle."""
        loop = asyncio.get_running_loop()
        while not cycle.done():
            await asyncio.sleep(0.005)
            silent_s = loop.time() - self.last_beat
            if self.watchdog_s > 0 and silent_s > self.watchdog_s and not cycle.done():
                log.warning("watchdog: no change for %.3f s, stopping", silent_s)
                self.watchdog_trips += 1
                cycle.cancel()
                vt = ua.VariantType
                await self.write("Plant.WatchdogTrips", self.watchdog_trips, vt.UInt32)
                await self.write("Plant.WatchdogTripUnixTime", time.time(), vt.Double)
                await self.write("Plant.WatchdogSilentS", silent_s, vt.Double)
                return

    async def stop(self) -> None:
        self.stop_requests += 1
        await self.write("Plant.StopRequests", self.stop_requests, ua.VariantType.UInt32)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def _cycle(self, joint: JointSettings, cycle: BacklashCycle, seed: int) -> None:
        a = self.args
        try:
            backlash = a.backlash.get(joint.name, 0.0)
            samples = await asyncio.to_thread(
                cycle_samples,
                joint,
                cycle,
                backlash,
                noise_counts=a.noise_counts,
                seed=seed,
                max_physics_s=a.max_physics_s,
            )
            await asyncio.sleep(cycle.settle_s / a.speedup)
            await self._publish(samples, cycle)
            await self.write("Cycle.Status", "done", ua.VariantType.String)
        except asyncio.CancelledError:
            # Stopped mid-chunk (or mid-reorder): the next cycle counts on from the sequence
            # number the node shows, as the agent's snapshot does.
            shown = self.server.read_attribute_value(nid("Buffers.Sequence")).Value
            self.sequence = int(shown.Value)
            await self.write("Cycle.Status", "aborted", ua.VariantType.String)
        finally:
            if self.state == "test_cycle":
                await self.set_state("stopped")

    async def _publish(self, samples: Samples, cycle: BacklashCycle) -> None:
        a = self.args
        chunk = a.chunk_samples
        period_s = chunk / (cycle.sample_rate_hz * a.speedup)
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.began = time.perf_counter()
        flood = False
        bounds = [(i, min(i + chunk, len(samples))) for i in range(0, len(samples), chunk)]
        k = 0
        while k < len(bounds):
            # Always yield, even when behind schedule: the server's publish loop must run.
            if not flood:
                await asyncio.sleep(max(0.0, start + (k + 1) * period_s - loop.time()))
            kind = None
            if self.fault is not None and k == self.fault_after:
                kind, self.fault = self.fault, None  # faults act once
                frozen = loop.time()
                await self._act_fault(kind)
                start += loop.time() - frozen  # the motion was held up too
            i, j = bounds[k]
            if kind == "reorder" and k + 1 < len(bounds):
                # The next chunk goes out first, under the sequence number it would have had.
                self.sequence = (self.sequence + 2) % 2**32
                await self._publish_chunk(samples, *bounds[k + 1], None, k + 1, cycle)
                self.sequence = (self.sequence - 1) % 2**32
                await self._publish_chunk(samples, i, j, None, k, cycle)
                self.sequence = (self.sequence + 1) % 2**32
                k += 2
                continue
            self.sequence = (self.sequence + 1) % 2**32
            await self._publish_chunk(samples, i, j, kind, k, cycle)
            if kind == "duplicate":
                await self._publish_chunk(samples, i, j, None, k, cycle)
            flood = flood or kind == "flood"
            k += 1

    async def _publish_chunk(
        self, samples: Samples, i: int, j: int, kind: str | None, k: int, cycle: BacklashCycle
    ) -> None:
        """Rewrite the buffers with samples i..j, then the sequence number (self.sequence)."""
        vt = ua.VariantType
        motor: Any = ua.Variant(samples.motor_counts[i:j].tolist(), vt.UInt32)
        times = samples.time_s[i:j]
        if kind == "garbage_type":
            motor = ua.Variant(["garbage"] * (j - i), vt.String)
        elif kind == "garbage_shape":
            motor = ua.Variant(samples.motor_counts[i : j - 1].tolist(), vt.UInt32)
        elif kind == "garbage_range":
            motor = ua.Variant((samples.motor_counts[i:j] + 2**24).tolist(), vt.UInt32)
        elif kind == "fast":
            times = times[0] + (times - times[0]) / 4.0
        elif kind == "swap":  # two samples of the chunk change places
            order = list(range(i, j))
            order[10], order[11] = order[11], order[10]
            times = samples.time_s[order]
            motor = ua.Variant(samples.motor_counts[order].tolist(), vt.UInt32)
        elif kind == "repeat":  # a sample sent twice, its successor lost
            order = [*range(i, i + 11), i + 10, *range(i + 12, j)]
            times = samples.time_s[order]
            motor = ua.Variant(samples.motor_counts[order].tolist(), vt.UInt32)
        now = dt.datetime.now(dt.UTC)
        await self.write("Buffers.TimeS", times.tolist(), vt.Double, now)
        if motor.VariantType is vt.String or self.untyped:
            # A wrong-typed value, or the first good one after it (which asyncua would now
            # refuse as a type change).
            self.untyped = motor.VariantType is vt.String
            await write_untyped(self.server, "Buffers.MotorCounts", motor, now)
        else:
            await self.write("Buffers.MotorCounts", motor, stamp=now)
        await self.write("Buffers.LinkCounts", samples.link_counts[i:j].tolist(), vt.UInt32, now)
        await self.write("Buffers.CurrentA", samples.current_a[i:j].tolist(), vt.Float, now)
        await self.write("Buffers.Sequence", self.sequence, vt.UInt32, now)
        if k == 0:
            await self.write("Plant.FirstChunkUnixTime", time.time(), vt.Double)
        await self.write("Plant.PublishedSamples", j, vt.UInt64)
        await self.write("Plant.PublishSeconds", time.perf_counter() - self.began, vt.Double)

    async def _act_fault(self, kind: str) -> None:
        log.warning("fault %s", kind)
        if kind == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "freeze":
            time.sleep(self.args.freeze_s)  # blocks the whole server, like a hung controller
        elif kind == "stall":
            await asyncio.Event().wait()  # until StopMotion cancels the cycle
        elif kind == "skip":
            self.sequence = (self.sequence + 1) % 2**32
        elif kind == "garbage_state":
            await self.set_state("banana")
        elif kind == "leave_stopped":
            await self.set_state("production")


def _backlash(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        out[name] = float(value)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="agent config holding the joints")
    p.add_argument("--controller", help="controller of the config (default: the first)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--backlash", action="append", default=[], metavar="JOINT=RAD")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise-counts", type=float, default=1.0)
    p.add_argument("--speedup", type=float, default=1.0, help="publish this much faster")
    p.add_argument("--chunk-samples", type=int, default=100)
    p.add_argument("--max-physics-s", type=float, default=None)
    p.add_argument("--mode", default="stopped", help="initial controller state")
    p.add_argument("--no-permission", action="store_true")
    p.add_argument("--security", choices=("none", "sign", "encrypt", "both"), default="none")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--trust", action="append", default=[], help="accepted client certificate")
    p.add_argument("--users", action="append", default=[], metavar="NAME:PASSWORD")
    p.add_argument("--fault", choices=FAULTS)
    p.add_argument("--fault-after", type=int, default=0)
    p.add_argument("--freeze-s", type=float, default=30.0)
    p.add_argument(
        "--watchdog-s",
        type=float,
        default=0.0,
        help="the controller's watchdog timeout (0: off until the agent writes one)",
    )
    args = p.parse_args(argv)
    args.backlash = _backlash(args.backlash)
    return args


async def _wait_stdin_closed() -> None:
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.buffer.read)


async def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cfg = load_config(args.config)
    ctrl = next((c for c in cfg.controllers if args.controller in (None, c.name)), None)
    if ctrl is None:
        raise SystemExit(f"no controller {args.controller!r} in {args.config}")
    peer = Peer(args, {j.index: j for j in ctrl.joints})
    endpoint = await peer.setup()
    print(f"READY {endpoint}", flush=True)
    await _wait_stdin_closed()
    # No graceful server.stop(): it waits a second, and a test peer has nothing to save.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
