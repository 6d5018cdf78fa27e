"""The OPC UA health server's tests share: a PKI (server, trusted client, stranger, users
file), secure settings, a client that connects to a server, and two reports to publish."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import time
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256

from agent.config.model import ThresholdSettings
from agent.config.opcua_server import OpcUaServerSettings
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import TrendPoint
from agent.publish.opcua_server.server import OpcUaHealthServer
from agent.publish.opcua_server.users import hash_line
from agent.report.model import IndicatorSummary, Report, joint_report
from tests.peers.opcua.certs import CertPair, make_certificate

T = TypeVar("T")
PASSWORD = "correct horse 7"
CLIENT_URI = "urn:jha:test:health-client"
T0 = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
LIMITS = ThresholdSettings(backlash_watch_rad=1e-3, backlash_alert_rad=2e-3)
MINIMAL = """\
controllers:
  - name: r1
    driver: sim
    joints:
      - name: j1
        index: 1
        gear_ratio: 100
        backlash_cycle: {motor_speed_rps: 10}
"""


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


@dataclasses.dataclass(frozen=True)
class Pki:
    server: CertPair
    client: CertPair
    stranger: CertPair
    trusted: Path
    users: Path


def make_pki(directory: Path) -> Pki:
    keys = directory / "keys"
    server = make_certificate(keys, "health-server", "urn:jha:health:server", server=True)
    client = make_certificate(keys, "maintenance", CLIENT_URI, server=False)
    stranger = make_certificate(keys, "stranger", CLIENT_URI, server=False)
    os.chmod(server.private_key, 0o600)
    trusted = directory / "trusted"
    trusted.mkdir()
    shutil.copy(client.certificate, trusted / "maintenance.der")
    users = directory / "users"
    line = hash_line("maint", PASSWORD, iterations=20_000)
    users.write_text(f"# users of the health server\n{line}\n")
    os.chmod(users, 0o600)
    return Pki(server, client, stranger, trusted, users)


def secure_settings(pki: Pki, **changes: Any) -> OpcUaServerSettings:
    base = OpcUaServerSettings(
        endpoint="opc.tcp://127.0.0.1:0/jha/",
        certificate=str(pki.server.certificate),
        private_key=str(pki.server.private_key),
        trusted_clients=str(pki.trusted),
        users_file=str(pki.users),
    )
    return dataclasses.replace(base, **changes)


@dataclasses.dataclass
class Started:
    server: OpcUaHealthServer
    took_s: float  # start() of a first server: asyncua builds its standard address space
    worst_gap_s: float  # the longest the caller's loop went without a 10 ms tick meanwhile


async def start_watching_the_loop(s: OpcUaHealthServer) -> tuple[float, float]:
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    started = time.monotonic()
    try:
        await s.start()
    finally:
        ticker.cancel()
    return time.monotonic() - started, max(gaps, default=0.0)


async def client_for(
    endpoint: str,
    pair: CertPair | None,
    user: str | None = "maint",
    password: str = PASSWORD,
    mode: ua.MessageSecurityMode = ua.MessageSecurityMode.SignAndEncrypt,
) -> Client:
    """A connected client; the caller disconnects it."""
    c = Client(endpoint, timeout=5)
    c.application_uri = CLIENT_URI
    if pair is not None:
        await c.set_security(
            SecurityPolicyBasic256Sha256, str(pair.certificate), str(pair.private_key), mode=mode
        )
    if user is not None:
        c.set_user(user)
        c.set_password(password)
    await c.connect()
    return c


# --- reports --------------------------------------------------------------------------------------


def result(backlash: float | None, amplitude: float = 0.05) -> BacklashResult:
    return BacklashResult(
        amplitude_rad_s=amplitude,
        backlash_rad=backlash,
        rmse_rad_s=0.004,
        residual_rms_rad_s=0.02,
        params={},
        evaluations=100,
        restarts=0,
        converged=True,
        stop_reason="tolfun",
        fit_seconds=1.0,
        seed=0,
        period_metadata_s=1.0,
        period_estimated_s=1.0,
        period_mismatch=0.0,
    )


def history(values: list[float]) -> list[TrendPoint]:
    return [TrendPoint((T0 + timedelta(days=7 * i)).isoformat(), v) for i, v in enumerate(values)]


def first_report() -> Report:
    stiffness = IndicatorSummary(
        "stiffness_nm_rad", "N·m/rad", history([6100.0, 6050.0, 6000.0]), None
    )
    joints = (
        joint_report(
            "robot1",
            "J1",
            result(0.6e-3),
            LIMITS,
            history([0.4e-3, 0.5e-3, 0.6e-3]),
            indicators=(stiffness,),
        ),
        joint_report("robot1", "J2", result(1.4e-3), LIMITS, history([1.2e-3, 1.3e-3, 1.4e-3])),
    )
    return Report((T0 + timedelta(days=14)).isoformat(), ("robot1",), joints, host="edge-01")


def second_report() -> Report:
    joints = (
        joint_report(
            "robot1", "J1", result(2.2e-3), LIMITS, history([0.4e-3, 0.5e-3, 0.6e-3, 2.2e-3])
        ),
        joint_report(
            "robot1", "J2", None, LIMITS, error="capture stalled", indicator="backlash_rad"
        ),
        joint_report("cnc7", "X", result(None, amplitude=0.02), LIMITS, history([0.02])),
    )
    return Report((T0 + timedelta(days=21)).isoformat(), ("robot1", "cnc7"), joints)


async def read_joint(
    c: Client, ns: int, controller: str, joint: str, names: tuple[str, ...]
) -> dict[str, Any]:
    nodes = [c.get_node(ua.NodeId(f"{controller}/{joint}/{n}", ns)) for n in names]
    values = await c.read_values(nodes)
    return dict(zip(names, values, strict=True))


JOINT_VARS = (
    "Ne107Status",
    "Ne107Letter",
    "Status",
    "StatusReason",
    "Indicator",
    "Error",
    "ForecastDays",
    "ForecastDaysLow",
    "ForecastDaysHigh",
    "ForecastLimit",
    "LastEstimateTime",
    "ReportMessageId",
)
