"""CAN driver (drivers/can.py) against real peers: socketcand over TCP loopback, and python-can's
udp_multicast inside a network namespace of the test's own.

The peers (tests/peers/socketcand_peer.py, udp_multicast_peer.py) run in their own processes and
produce their samples from agent.simulation's physics; faults are injected at a given sample of
a given cycle. Every await has a timeout, so a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import cantools
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.calibration_sweep import fit_settings
from agent.capture import Capture
from agent.capture_io import load_capture
from agent.config import ControllerSettings, load_config
from agent.cycles import backlash_cycle, run_guarded_cycle
from agent.daemon import Agent
from agent.errors import ConfigError, CycleAborted, DriverError, InterlockError
from agent.estimation.backlash import fit_backlash
from drivers.base import ControllerMode, load_driver_class
from drivers.can import CanDriver
from drivers.can_dbc import load_protocol, nominal_frame_bits
from drivers.can_link import CaptureRecorder
from drivers.can_settings import CanMessageNames, CanSettings
from drivers.sim import SimDriver
from drivers.sim_settings import SimJointSettings, SimSettings
from peers.can_bits import VirtualBus, frame_bits, frame_bits_reference
from peers.can_controller import pack_intel

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
DBC = ROOT / "config" / "can" / "joint_encoder.dbc"
SEED = 5
BACKLASH = {"j1": 1.2e-3, "j2": 4e-4}
T = TypeVar("T")
PROTO = load_protocol(str(DBC), CanMessageNames())


def config_text(interface: str, channel: str, port: int, dbc: str = str(DBC)) -> str:
    joint = textwrap.dedent(
        """\
        gear_ratio: 40
        encoder_bits: 19
        backlash_cycle: {motor_speed_rps: 100, load_turns: 2, sample_rate_hz: 500, settle_s: 0.1}
        """
    )
    body = textwrap.indent(joint, " " * 8)
    return (
        textwrap.dedent(
            f"""\
            controllers:
              - name: cell1
                driver: can
                settings:
                  dbc: {dbc}
                  interface: {interface}
                  channel: "{channel}"
                  port: {port}
                joints:
                  - name: j1
                    index: 1
                    test_pose_rad: 0.0
            """
        )
        + body
        + "      - name: j2\n        index: 2\n        test_pose_rad: 0.5\n"
        + body
    )


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(config_text("socketcand", "can0", 29536))
    return path


class Peer:
    """A peer process and the JSON events it prints, collected by a thread."""

    def __init__(self, module: str, args: list[str], prefix: tuple[str, ...] = ()) -> None:
        env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.events.append(json.loads(line))
                self._cond.notify_all()

    def wait(self, name: str, timeout: float = 10.0) -> dict[str, Any]:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(e["event"] == name for e in self.events), timeout)
            if not ok:
                err = self.proc.stderr.read() if self.proc.poll() is not None else ""  # type: ignore[union-attr]
                raise AssertionError(f"peer event {name!r} not seen in {timeout} s: {self.events} {err}")
            return next(e for e in self.events if e["event"] == name)

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e["event"] == name]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def peer_args(config: Path, *extra: str) -> list[str]:
    backlash = [f"--backlash={k}={v}" for k, v in BACKLASH.items()]
    return ["--config", str(config), "--controller", "cell1", "--seed", str(SEED), *backlash, *extra]


@pytest.fixture
def socketcand(config_file: Path) -> Iterator[Callable[..., tuple[Peer, ControllerSettings]]]:
    """Start a socketcand peer (with peer options); gives it and the controller config for it."""
    peers: list[Peer] = []

    def start(*extra: str) -> tuple[Peer, ControllerSettings]:
        peer = Peer("peers.socketcand_peer", peer_args(config_file, *extra))
        peers.append(peer)
        port = peer.wait("listening")["port"]
        ctrl = load_config(config_file).controllers[0]
        return peer, dataclasses.replace(ctrl, settings=dataclasses.replace(ctrl.settings, port=port))

    yield start
    for peer in peers:
        peer.stop()


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def driver_for(ctrl: ControllerSettings) -> CanDriver:
    return CanDriver(ctrl.name, ctrl.settings, ctrl.joints)


def sim_capture(ctrl: ControllerSettings, joint_name: str, cycles_before: int = 0) -> Capture:
    """The same cycle on the simulated fake directly (same seed sequence as the peer)."""
    truth = {name: SimJointSettings(backlash_rad=b) for name, b in BACKLASH.items()}
    sim = SimDriver(ctrl.name, SimSettings(seed=SEED, joints=truth), ctrl.joints)

    async def go() -> Capture:
        await sim.connect()
        sim._cycles_run = cycles_before  # the peer numbers its cycles across joints the same way
        joint = next(j for j in ctrl.joints if j.name == joint_name)
        return await sim.run_cycle(backlash_cycle(ctrl, joint))

    return run(go())


def guarded(driver: CanDriver, ctrl: ControllerSettings, joint_name: str) -> Awaitable[Capture]:
    joint = next(j for j in ctrl.joints if j.name == joint_name)
    return run_guarded_cycle(driver, backlash_cycle(ctrl, joint), ctrl.interlocks, joint)


# --- frames and settings ----------------------------------------------------------------------


def test_example_dbc_carries_two_19_bit_positions_and_a_counter_in_one_8_byte_frame() -> None:
    proto = load_protocol(str(DBC), CanMessageNames())
    enc = proto.encoder
    layout = {s.name: (s.start, s.length, s.byte_order, s.is_signed) for s in enc.signals}
    assert enc.length == 8 and not enc.is_extended_frame
    assert layout["MotorCounts"] == (0, 19, "little_endian", False)
    assert layout["LinkCounts"] == (19, 19, "little_endian", False)
    assert layout["Counter"] == (38, 16, "little_endian", False)
    assert proto.position_bits == 19 and proto.counter_modulus == 65536
    # The command frame wins arbitration over everything the controller sends.
    assert proto.command.frame_id < min(proto.receive_ids())
    assert proto.status.frame_id < proto.encoder.frame_id
    assert nominal_frame_bits(enc) == 111  # 8-byte standard frame with interframe space


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**19 - 1), st.integers(0, 2**19 - 1)), min_size=2, max_size=40),
    st.integers(0, 65535),
    st.integers(1, 64),
)
def test_encoder_frames_decode_to_the_counts_the_peer_packed(
    counts: list[tuple[int, int]], first_counter: int, joint: int
) -> None:
    proto = PROTO
    n = len(counts)
    motor = np.array([c[0] for c in counts], dtype=np.int64)
    link = np.array([c[1] for c in counts], dtype=np.int64)
    payload = pack_intel(proto, {
        "MotorCounts": motor, "LinkCounts": link,
        "Counter": np.arange(n, dtype=np.int64) % 65536, "JointIndex": np.full(n, joint),
    })
    rec = CaptureRecorder(proto, joint, n, cycle_counter=1)
    rec.acked = True
    done = [rec.on_frame(bytes(row), 0.0) for row in payload]
    assert done[-1] and rec.complete and rec.lost == 0
    assert np.array_equal(rec.motor_counts, motor) and np.array_equal(rec.link_counts, link)
    # Every row agrees with cantools' own encoding.
    for k in (0, n - 1):
        values = {"MotorCounts": int(motor[k]), "LinkCounts": int(link[k]), "Counter": k, "JointIndex": joint}
        assert bytes(payload[k]) == proto.encoder.encode(values)


def test_counter_gap_counts_the_lost_frames_and_fails_the_capture() -> None:
    proto = load_protocol(str(DBC), CanMessageNames())
    n = 10
    payload = pack_intel(proto, {
        "MotorCounts": np.arange(n), "LinkCounts": np.arange(n),
        "Counter": np.arange(n), "JointIndex": np.ones(n, dtype=np.int64),
    })
    rec = CaptureRecorder(proto, 1, n, cycle_counter=1)
    rec.on_frame(bytes(payload[0]), 0.0)
    assert rec.received == 0 and rec.ignored_before_ack == 1  # not ours until acknowledged
    rec.acked = True
    for k in (0, 1, 2, 6):  # 3, 4, 5 never arrive
        rec.on_frame(bytes(payload[k]), 0.0)
    assert rec.lost == 3 and rec.received == 3
    assert rec.error is not None and "3 encoder frame(s) lost: counter jumped from 2 to 6" in rec.error


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 0x7FF), st.lists(st.binary(min_size=0, max_size=8), min_size=1, max_size=5))
def test_vectorised_frame_length_matches_the_bit_by_bit_reference(can_id: int, rows: list[bytes]) -> None:
    for data in rows:
        got = int(frame_bits(can_id, np.frombuffer(data, dtype=np.uint8).reshape(1, -1))[0])
        assert got == frame_bits_reference(can_id, data)
        body = 34 + 8 * len(data)  # the stuffed part: SOF .. CRC
        assert body + 13 <= got <= body + 13 + (body - 1) // 4


def _stream_load(rate_hz: int) -> tuple[int, float]:
    """One second of a real encoder stream on the virtual 1 Mbit/s bus: (overruns, load)."""
    proto = load_protocol(str(DBC), CanMessageNames())
    k = np.arange(rate_hz, dtype=np.int64)
    motor = (k * 2 * np.pi * 100 / rate_hz / (2 * np.pi / 2**19)).astype(np.int64) % 2**19
    payload = pack_intel(proto, {
        "MotorCounts": motor, "LinkCounts": motor // 40, "Counter": k % 65536,
        "JointIndex": np.ones(rate_hz, dtype=np.int64),
    })
    bits = frame_bits(proto.encoder.frame_id, payload)
    bus = VirtualBus(1_000_000)
    for i in range(rate_hz):
        bus.submit(i / rate_hz, proto.encoder.frame_id, bytes(payload[i]), int(bits[i]), stream=True)
        if i % (rate_hz // 50) == 0:  # status + one joint position every 20 ms, as the peer
            bus.submit(i / rate_hz, proto.status.frame_id, bytes(8), 130)
            bus.submit(i / rate_hz, proto.joint_position.frame_id, bytes(8), 130)
        bus.run_until(i / rate_hz)
    bus.run_until(2.0)
    return bus.overruns, bus.busy_bits / 1e6


def test_8000_frames_per_second_fit_a_1_mbit_bus_and_9000_do_not() -> None:
    overruns, load = _stream_load(8000)
    assert overruns == 0 and 0.9 < load < 0.98
    overruns, _ = _stream_load(9000)
    assert overruns > 0


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_settings_errors_name_file_line_and_field(tmp_path: Path) -> None:
    missing = _write(tmp_path / "a.yaml", config_text("socketcand", "can0", 29536, dbc="nope.dbc"))
    with pytest.raises(ConfigError) as err:
        load_config(missing)
    assert f"{missing}:5: controllers[0].settings.dbc: expected a readable DBC file" in str(err.value)

    renamed = config_text("socketcand", "can0", 29536).replace(
        "      port: 29536\n", "      port: 29536\n      messages: {encoder: Encoder}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path / "b.yaml", renamed))
    assert ":9: controllers[0].settings.messages.encoder: expected the name of a message" in str(err.value)
    assert "JhaEncoder" in str(err.value)  # the names it has are listed

    no_counter = DBC.read_text().replace(" SG_ Counter : 38|16@1+ (1,0) [0|65535] \"\" AGENT\n", "")
    dbc = _write(tmp_path / "nocounter.dbc", no_counter)
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path / "c.yaml", config_text("socketcand", "can0", 29536, str(dbc))))
    assert "message JhaEncoder lacks signal(s) Counter" in str(err.value)

    bad = config_text("socketcand", "can0", 29536).replace("port: 29536", "port: 70000")
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path / "d.yaml", bad))
    assert ":8: controllers[0].settings.port: expected an integer" in str(err.value)


def test_driver_is_registered_and_refuses_joints_the_frames_cannot_carry(config_file: Path) -> None:
    assert load_driver_class("can") is CanDriver
    settings = CanSettings(dbc=str(DBC))
    ctrl = load_config(config_file).controllers[0]
    wide = dataclasses.replace(ctrl.joints[0], encoder_bits=20)
    driver = CanDriver("cell1", settings, (wide,))
    with pytest.raises(DriverError, match="joint j1 has encoder_bits 20, but .* carries 19-bit"):
        run(driver.connect())
    with pytest.raises(DriverError, match="needs a settings section"):
        CanDriver("cell1", None, ctrl.joints)



# --- full cycles through the socketcand peer --------------------------------------------------


def test_full_cycle_through_socketcand_matches_the_simulated_fake(socketcand: Any) -> None:
    peer, ctrl = socketcand()
    driver = driver_for(ctrl)

    async def cycles() -> tuple[Capture, Capture]:
        await driver.connect()
        try:
            a = await guarded(driver, ctrl, "j1")
            b = await guarded(driver, ctrl, "j2")
            return a, b
        finally:
            await driver.close()

    got1, got2 = run(cycles())
    assert driver.stop_commands_sent == 0
    done = peer.named("cycle_done")
    assert [d["sent"] for d in done] == [401, 401] and all(d["dropped"] == 0 for d in done)
    for got, want in ((got1, sim_capture(ctrl, "j1")), (got2, sim_capture(ctrl, "j2", 1))):
        assert len(got) == len(want) == 401
        assert np.array_equal(got.time_s, want.time_s)  # counter / rate: the controller's clock
        # The only difference is the MotorSpeed signal's 1e-5 rad/s resolution: a count at most.
        assert np.max(np.abs(got.channel("motor_counts") - want.channel("motor_counts"))) <= 1
        tick = 2 * np.pi / 2**19
        assert np.max(np.abs(got.channel("link_pos_rad") - want.channel("link_pos_rad"))) <= 1.5 * tick
        assert got.meta.extra["lost_frames"] == 0 and got.meta.encoder_bits == 19
    joint = ctrl.joints[0]
    fit_got, fit_want = fit_backlash(got1, fit_settings(joint)), fit_backlash(want_j1 := sim_capture(ctrl, "j1"), fit_settings(joint))
    assert want_j1.meta.commanded_speed_rad_s == got1.meta.commanded_speed_rad_s
    assert fit_got.amplitude_rad_s == pytest.approx(fit_want.amplitude_rad_s, rel=0.01)
    assert fit_got.amplitude_rad_s > 1.0  # 1.2 mrad of backlash leaves a clear signature


def test_status_frames_become_the_interlock_snapshot(socketcand: Any) -> None:
    peer, ctrl = socketcand("--mode=production", "--no-permission")
    driver = driver_for(ctrl)

    async def check() -> None:
        await driver.connect()
        try:
            status = await driver.read_status()
            assert status.mode is ControllerMode.PRODUCTION and status.permission is False
            assert status.joint_positions_rad == {"j1": 0.0, "j2": pytest.approx(0.5, abs=1e-6)}
            assert status.speed_override == 1.0 and status.alarms == ()
            with pytest.raises(InterlockError, match="production mode.*permission signal is off"):
                await guarded(driver, ctrl, "j1")
            # Straight to the driver (no interlocks): the controller refuses by itself.
            with pytest.raises(DriverError, match="rejected cycle 1: controller not stopped"):
                await driver.run_cycle(backlash_cycle(ctrl, ctrl.joints[0]))
        finally:
            await driver.close()

    run(check())
    assert peer.named("cycle_start") == []
    assert peer.named("rejected")[0]["reason"] == "not_stopped"


def test_a_stream_the_bus_cannot_carry_is_refused_before_anything_moves(socketcand: Any) -> None:
    peer, ctrl = socketcand()
    fast = dataclasses.replace(ctrl.joints[0].backlash_cycle, sample_rate_hz=9000.0)
    joint = dataclasses.replace(ctrl.joints[0], backlash_cycle=fast)
    driver = driver_for(ctrl)

    async def check() -> None:
        await driver.connect()
        try:
            with pytest.raises(DriverError, match=r"9000 encoder frames/s take 100 % of a 1 Mbit/s"):
                await driver.run_cycle(backlash_cycle(ctrl, joint))
        finally:
            await driver.close()

    run(check())
    assert peer.named("cycle_start") == [] and peer.named("stop") == []


# --- faults: the cycle is aborted, the stop sent, nothing returned, the driver goes on ---------


def _abort_then_recover(
    socketcand: Any, fault: str, expect: str, *, recover: bool = True
) -> tuple[Peer, CanDriver]:
    peer, ctrl = socketcand(f"--fault={fault}")
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            t0 = time.monotonic()
            with pytest.raises(CycleAborted, match=expect):
                await guarded(driver, ctrl, "j1")
            assert time.monotonic() - t0 < 3.0  # noticed within timeouts, not at the overrun limit
            if not recover:
                return
            # The daemon goes on: status reads (reconnecting if the link broke) until the
            # controller is stopped again, and a cycle.
            await _until_stopped(driver, 5.0)
            capture = await guarded(driver, ctrl, "j1")
            assert len(capture) == 401 and capture.meta.extra["lost_frames"] == 0
        finally:
            await driver.close()

    run(scenario(), timeout=40.0)
    return peer, driver


async def _until_stopped(driver: CanDriver, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            if (await driver.read_status()).mode is ControllerMode.STOPPED:
                return
        except DriverError:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, "controller not stopped in time"
        await asyncio.sleep(0.1)


def test_dropped_frames_abort_the_cycle_and_stop_the_controller(socketcand: Any) -> None:
    peer, driver = _abort_then_recover(
        socketcand, "drop@1:200x3", r"3 encoder frame\(s\) lost: counter jumped from 199 to 203"
    )
    assert peer.named("stop")[0]["cycle_state"] == "capturing"
    assert peer.named("cycle_aborted")[0]["cycle"] == 1
    assert peer.named("cycle_done")[0]["cycle"] == 2


def test_a_malformed_encoder_frame_aborts_the_cycle(socketcand: Any) -> None:
    peer, _ = _abort_then_recover(
        socketcand, "badframe@1:100", "malformed encoder frame after sample 100: 2 data bytes"
    )
    assert peer.named("stop")[0]["cycle_state"] == "capturing"


def test_garbage_on_the_wire_aborts_the_cycle(socketcand: Any) -> None:
    # python-can drops the whole TCP read holding non-ASCII bytes: the frames in it are lost.
    peer, _ = _abort_then_recover(socketcand, "garbage@1:150", "bus receive error")
    assert peer.named("stop")[0]["cycle_state"] == "capturing"


def test_an_unparsable_element_breaks_the_link_and_the_driver_reconnects(socketcand: Any) -> None:
    # python-can keeps an element it cannot parse in its buffer and fails every later read:
    # the driver gives that connection up and opens a new one for the next cycle.
    peer, _ = _abort_then_recover(socketcand, "badtext@1:150", "receive error")
    assert peer.named("stop")[0]["cycle_state"] == "capturing"
    assert len(peer.named("client")) == 4  # probe + link, then probe + link again


def test_unrelated_frames_on_the_bus_do_not_disturb_a_capture(socketcand: Any) -> None:
    peer, ctrl = socketcand("--fault=foreign@1:100")
    driver = driver_for(ctrl)

    async def one() -> Capture:
        await driver.connect()
        try:
            return await guarded(driver, ctrl, "j1")
        finally:
            await driver.close()

    assert len(run(one())) == 401
    assert peer.named("fault")[0]["kind"] == "foreign"


def test_a_stalled_controller_is_lost_and_its_motion_stopped(socketcand: Any) -> None:
    peer, ctrl = socketcand("--fault=stall@1:100x1")
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            with pytest.raises(CycleAborted, match="stalled|status"):
                await guarded(driver, ctrl, "j1")
            with pytest.raises(DriverError, match="status frame is .* s old"):
                await driver.read_status()  # never hangs: the last status is simply too old
            await asyncio.sleep(1.0)  # the stall ends after 1 s
            assert (await driver.read_status()).mode is ControllerMode.STOPPED
        finally:
            await driver.close()

    run(scenario())
    stop = peer.named("stop")[0]  # the controller still reads while it does not answer
    assert stop["cycle_state"] == "capturing"
    assert peer.named("cycle_aborted")[0]["cycle"] == 1


def test_peer_killed_mid_capture(socketcand: Any) -> None:
    peer, ctrl = socketcand("--fault=kill@1:200")
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            with pytest.raises(CycleAborted, match="CAN link lost: connection (closed|lost)"):
                await guarded(driver, ctrl, "j1")
            with pytest.raises(DriverError, match="CAN link down"):
                await driver.read_status()
            with pytest.raises(DriverError, match="STOP not sent"):
                await driver.stop_motion()  # said loudly: the stop could not be delivered
        finally:
            await driver.close()

    run(scenario())
    assert peer.proc.wait(5) == -9


def test_disconnect_mid_capture_the_stop_goes_out_on_reconnect(socketcand: Any) -> None:
    peer, driver = _abort_then_recover(socketcand, "disconnect@1:200", "connection closed by the peer")
    # No STOP could pass the dropped connection: the driver owed it and sent it on reconnect.
    assert peer.named("stop")[0]["cycle_state"] == "capturing"
    assert peer.named("cycle_done")[0]["cycle"] == 2
    assert len(peer.named("client")) == 4


def test_agent_killed_mid_capture_the_controller_watchdog_stops(
    socketcand: Any, tmp_path: Path
) -> None:
    peer, ctrl = socketcand()
    config = _write(tmp_path / "agent.yaml", config_text("socketcand", "can0", ctrl.settings.port))
    client = Peer(
        "peers.can_netns_client",
        ["--config", str(config), "--controller", "cell1", "--joint", "j1", "--out", str(tmp_path / "x.npz")],
    )
    try:
        peer.wait("capturing", 10.0)
        client.proc.kill()  # the agent dies: no STOP, no heartbeat
        watchdog = peer.wait("watchdog", 3.0)
    finally:
        client.stop()
    assert watchdog["cycle"] == 1 and 0 < watchdog["sample"] < 401
    assert peer.wait("cycle_aborted")["cycle"] == 1 and peer.named("stop") == []


def test_controller_leaving_the_stopped_state_aborts_and_stops(socketcand: Any) -> None:
    peer, ctrl = socketcand("--fault=production@1:150")
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            with pytest.raises(CycleAborted, match="controller is in production mode"):
                await guarded(driver, ctrl, "j1")
        finally:
            await driver.close()

    run(scenario())
    assert peer.named("stop")[0]["cycle_state"] == "capturing"
    assert peer.named("cycle_aborted")[0]["sample"] if "sample" in peer.named("cycle_aborted")[0] else True


def test_cancelling_the_cycle_sends_stop(socketcand: Any) -> None:
    peer, ctrl = socketcand()
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            task = asyncio.create_task(driver.run_cycle(backlash_cycle(ctrl, ctrl.joints[0])))
            await asyncio.to_thread(peer.wait, "capturing", 10.0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await driver.close()

    run(scenario())
    assert peer.wait("stop", 5.0)["cycle_state"] == "capturing"
    assert driver.stop_commands_sent == 1


def test_the_daemon_goes_on_after_an_aborted_cycle(socketcand: Any, tmp_path: Path) -> None:
    peer, ctrl = socketcand("--fault=drop@1:100x2")
    state = tmp_path / "state"
    text = config_text("socketcand", "can0", ctrl.settings.port)
    text = f"agent:\n  state_dir: {state}\n" + text
    config = load_config(_write(tmp_path / "daemon.yaml", text))
    agent = Agent(config, once=True, wait_for_stop_s=5.0)
    code = run(agent.run(), timeout=60.0)
    assert code == 0
    report = json.loads(next(agent.reports[0].glob("*.json")).read_text())
    by_joint = {j["joint"]: j for j in report["joints"]}
    assert "lost" in (by_joint["j1"].get("error") or "")
    assert by_joint["j2"].get("error") is None
    assert peer.named("stop")[0]["cycle_state"] == "capturing"
    assert [d["cycle"] for d in peer.named("cycle_done")] == [2]


# --- udp_multicast inside a network namespace -------------------------------------------------


def _ip(*args: str) -> None:
    ip = shutil.which("ip")
    if ip is None:
        pytest.fail("`ip` (iproute2) is not installed: apt-get install iproute2")
    done = subprocess.run([ip, *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        pytest.fail(f"`ip {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"jha-can-{os.getpid()}"
    _ip("netns", "add", name)
    try:
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up", "multicast", "on")
        _ip("netns", "exec", name, "ip", "route", "add", "224.0.0.0/4", "dev", "lo")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def test_udp_multicast_in_a_network_namespace(netns: str, tmp_path: Path) -> None:
    config = _write(tmp_path / "udp.yaml", config_text("udp_multicast", "239.74.163.2", 43113))
    prefix = ("ip", "netns", "exec", netns)
    peer = Peer("peers.udp_multicast_peer", peer_args(config, "--fault=garbage@2:100"), prefix)
    try:
        peer.wait("listening")
        results = []
        for k in (1, 2):
            out = tmp_path / f"capture{k}.npz"
            client = Peer(
                "peers.can_netns_client",
                ["--config", str(config), "--controller", "cell1", "--joint", "j1", "--out", str(out)],
                prefix,
            )
            client.proc.wait(60)
            assert client.proc.returncode == 0, client.proc.stderr.read()  # type: ignore[union-attr]
            results.append(client.events[0])
    finally:
        peer.stop()
    ok, garbage = results
    assert ok["outcome"] == "ok" and ok["stats"]["lost_frames"] == 0
    assert garbage["outcome"] == "aborted" and "could not unpack" in garbage["error"]
    assert garbage["stop_commands_sent"] >= 1 and peer.named("stop")[0]["cycle_state"] == "capturing"
    ctrl = load_config(config).controllers[0]
    got, want = load_capture(tmp_path / "capture1.npz"), sim_capture(ctrl, "j1")
    assert np.max(np.abs(got.channel("motor_counts") - want.channel("motor_counts"))) <= 1
    joint = ctrl.joints[0]
    assert fit_backlash(got, fit_settings(joint)).amplitude_rad_s == pytest.approx(
        fit_backlash(want, fit_settings(joint)).amplitude_rad_s, rel=0.01
    )
