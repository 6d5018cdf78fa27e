"""Start and stop the OPC UA peer controller as a subprocess; talk to its Plant object.

Shared by the tests under tests/drivers/opcua/, tests/faults/ and bench/bench_opcua.py.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from asyncua import Client, ua

from tests.peers.opcua.certs import CertPair, make_certificate
from tests.peers.opcua.server import APPLICATION_URI

REPO = Path(__file__).resolve().parents[3]

# The peer's address space (ns=2 is its own namespace).
NODES = {
    "state": "ns=2;s=Controller.State",
    "permission": "ns=2;s=Controller.Permission",
    "joint_positions": "ns=2;s=Controller.JointPositions",
    "alarms": "ns=2;s=Controller.Alarms",
    "speed_override": "ns=2;s=Controller.SpeedOverride",
    "controller": "ns=2;s=Controller",
    "start": "ns=2;s=Controller.StartBacklashCycle",
    "stop": "ns=2;s=Controller.StopMotion",
    "cycle_status": "ns=2;s=Cycle.Status",
    "sequence": "ns=2;s=Buffers.Sequence",
    "time": "ns=2;s=Buffers.TimeS",
    "motor_counts": "ns=2;s=Buffers.MotorCounts",
    "link_counts": "ns=2;s=Buffers.LinkCounts",
    "current": "ns=2;s=Buffers.CurrentA",
    "watchdog": "ns=2;s=Controller.Watchdog",
    "watchdog_timeout": "ns=2;s=Controller.WatchdogTimeoutS",
}

# The liveness watchdog every test config arms: generous, so a loaded test machine never trips
# it by accident; the watchdog's own tests set a tight one.
WATCHDOG = {"interval_s": 0.1, "timeout_s": 1.0}


METHOD_TRIGGER = f"""\
        trigger:
          object: "{NODES["controller"]}"
          method: "{NODES["start"]}"
          arguments: [joint_index, motor_speed_rad_s, settle_s, duration_s, sample_rate_hz]
        stop:
          object: "{NODES["controller"]}"
          method: "{NODES["stop"]}"
"""
VARIABLE_TRIGGER = """\
        trigger:
          variable: "ns=2;s=Cycle.Start"
          value: true
          parameters:
            joint_index: "ns=2;s=Cycle.JointIndex"
            motor_speed_rad_s: "ns=2;s=Cycle.MotorSpeed"
            settle_s: "ns=2;s=Cycle.SettleS"
            duration_s: "ns=2;s=Cycle.DurationS"
            sample_rate_hz: "ns=2;s=Cycle.SampleRateHz"
        stop:
          variable: "ns=2;s=Cycle.Stop"
          value: true
"""


# The peer runs without security unless a test asks for it; the driver needs that said.
INSECURE = "{policy: None, allow_none_security: true}"

# Driver timings for tests: short timeouts and backoff so faults show within a second.
TEST_TIMING = {
    "request_timeout_s": 2.0,
    "connect_timeout_s": 3.0,
    "reconnect_initial_s": 0.1,
    "reconnect_max_s": 0.4,
    "publishing_interval_ms": 10,
    "stall_timeout_s": 0.6,
    "control_period_s": 0.02,
}


def config_text(
    endpoint: str = "opc.tcp://127.0.0.1:4840/jha/",
    trigger: str = METHOD_TRIGGER,
    state_dir: str = "var",
    joints: tuple[tuple[str, int], ...] = (("axis4", 4),),
    *,
    sample_rate_hz: float = 500.0,
    load_turns: float = 12.0,
    settle_s: float = 0.5,
    timing: Mapping[str, float] = TEST_TIMING,
    security: str = INSECURE,
    watchdog: Mapping[str, float] | None = WATCHDOG,
) -> str:
    """An agent config with one opcua controller mapped onto the peer's address space."""
    joint_yaml = "".join(
        f"""\
      - name: {name}
        index: {index}
        gear_ratio: 40
        encoder_bits: 19
        test_pose_rad: 0.0
        continuous_rotation: true  # the peer's joint is a test bench (turns without end)
        backlash_cycle: {{motor_speed_rps: 100, load_turns: {load_turns},
                         sample_rate_hz: {sample_rate_hz}, settle_s: {settle_s}}}
"""
        for name, index in joints
    )
    timing_yaml = "".join(f"      {k}: {v}\n" for k, v in timing.items())
    if watchdog is not None:
        timing_yaml += (
            f'      watchdog: {{node: "{NODES["watchdog"]}", '
            f'timeout_node: "{NODES["watchdog_timeout"]}", '
            + ", ".join(f"{k}: {v}" for k, v in watchdog.items())
            + "}\n"
        )
    return f"""\
agent:
  state_dir: {state_dir}
controllers:
  - name: robot1
    driver: opcua
    settings:
      endpoint: {endpoint}
      security: {security}
{timing_yaml}      status:
        state: "{NODES["state"]}"
        permission: "{NODES["permission"]}"
        joint_positions: "{NODES["joint_positions"]}"
        alarms: "{NODES["alarms"]}"
        speed_override: "{NODES["speed_override"]}"
        speed_override_scale: 0.01
      cycle:
{trigger}        status: "{NODES["cycle_status"]}"
      buffers:
        sequence: "{NODES["sequence"]}"
        time: "{NODES["time"]}"
        motor_counts: "{NODES["motor_counts"]}"
        link_counts: "{NODES["link_counts"]}"
        current: "{NODES["current"]}"
    joints:
{joint_yaml}"""


class PeerProcess:
    """`python -m tests.peers.opcua_controller ...` with its endpoint read from `READY <url>`."""

    def __init__(
        self, config: Path, args: Sequence[str] = (), *, port: int = 0, log: Path | None = None
    ) -> None:
        self.config = config
        self.args = list(args)
        self.port = port
        self.log = log
        self.endpoint = ""
        self.proc: subprocess.Popen[str] | None = None
        self._log_file: IO[str] | None = None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.peers.opcua_controller",
            "--config",
            str(self.config),
            "--port",
            str(self.port),
            *self.args,
        ]

    def start(self, timeout_s: float = 30.0) -> str:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        cmd = self.command()
        self._log_file = open(self.log, "a") if self.log else None  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file if self._log_file else subprocess.DEVNULL,
        )
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.proc.stdout
        assert stdout is not None
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=timeout_s)
        except queue.Empty:
            self.stop()
            raise RuntimeError(f"peer did not start within {timeout_s} s") from None
        if not line.startswith("READY "):
            code = self.proc.wait(5)
            raise RuntimeError(f"peer failed to start (exit {code}); see {self.log}")
        self.endpoint = line.split()[1]
        self.port = int(self.endpoint.rsplit(":", 1)[1].split("/", 1)[0])
        return self.endpoint

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()  # the peer exits when its stdin closes
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> PeerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


NODE_PEER = REPO / "tests" / "peers" / "opcua_node"


def free_port() -> int:
    """A port nothing listens on now: node-opcua advertises the port it is given, so the
    node peer cannot be bound to port 0 and told its port afterwards as the asyncua one is."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NodePeerProcess(PeerProcess):
    """The same controller on node-opcua (tests/peers/opcua_node/server.js), an OPC UA stack
    written apart from asyncua. `workdir` holds its certificate (one is made when none is
    given: node-opcua needs one even without security) and its PKI folder (the client
    certificates it trusts, given with --trust). A restart keeps port, certificate and PKI."""

    def __init__(
        self,
        config: Path,
        args: Sequence[str] = (),
        *,
        workdir: Path,
        port: int = 0,
        log: Path | None = None,
        certificate: CertPair | None = None,
    ) -> None:
        super().__init__(config, args, port=port, log=log)
        self.workdir = workdir
        self.certificate = certificate

    def command(self) -> list[str]:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not installed: run make sysdeps (Debian package nodejs)")
        if not (NODE_PEER / "node_modules" / "node-opcua").is_dir():
            raise RuntimeError(f"node-opcua is not installed: run npm ci in {NODE_PEER}")
        if self.port == 0:
            self.port = free_port()
        if self.certificate is None:
            keys = self.workdir / "node_peer_keys"
            self.certificate = make_certificate(keys, "controller", APPLICATION_URI, server=True)
        return [
            node,
            str(NODE_PEER / "server.js"),
            "--config",
            str(self.config),
            "--python",
            sys.executable,
            "--port",
            str(self.port),
            "--cert",
            str(self.certificate.certificate),
            "--key",
            str(self.certificate.private_key),
            "--pki",
            str(self.workdir / "node_peer_pki"),
            *self.args,
        ]


class Plant:
    """The plant's side of the peer (operator, production, faults), over a plain asyncua client."""

    def __init__(self, endpoint: str) -> None:
        self.client = Client(endpoint, timeout=5)

    async def __aenter__(self) -> Plant:
        await self.client.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.disconnect()

    async def call(self, method: str, *args: Any) -> Any:
        plant = self.client.get_node("ns=2;s=Plant")
        return await plant.call_method(ua.NodeId.from_string(f"ns=2;s=Plant.{method}"), *args)

    async def read(self, name: str) -> Any:
        return await self.client.get_node(f"ns=2;s=Plant.{name}").read_value()

    async def set_state(self, state: str) -> None:
        await self.call("SetState", state)

    async def set_permission(self, value: bool) -> None:
        await self.call("SetPermission", value)

    async def inject(self, kind: str, after_chunks: int) -> None:
        await self.call("InjectFault", kind, ua.Variant(after_chunks, ua.VariantType.UInt32))

    async def cycle_status(self) -> str:
        return str(await self.client.get_node(NODES["cycle_status"]).read_value())
