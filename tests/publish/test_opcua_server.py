"""The OPC UA health server against a real asyncua Client over loopback.

One secure server (Basic256Sha256 SignAndEncrypt, a trust list, a users file) is shared by the
module; the tests that need another configuration start their own. Nothing of ours is mocked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncua
import pytest
import yaml
from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.load import load_config
from agent.config.model import ThresholdSettings
from agent.config.opcua_server import HEALTH_NAMESPACE_URI, OpcUaServerSettings
from agent.errors import AgentError, ConfigError
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import Ne107, TrendPoint
from agent.publish.factory import publishers_for
from agent.publish.opcua_server.joint_health import health_of
from agent.publish.opcua_server.server import OpcUaHealthServer
from agent.publish.opcua_server.units import unece_unit_id, unit_of
from agent.publish.opcua_server.users import hash_line, load_users
from agent.report.model import IndicatorSummary, Report, joint_report
from agent.service.daemon import Agent
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


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("health_pki"))


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One state directory for the module's servers: the first one leaves asyncua's standard
    address space there as a shelf, and the others start from it in a fraction of the time."""
    return tmp_path_factory.mktemp("health_state")


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


@pytest.fixture(scope="module")
def started(pki: Pki, state: Path) -> Iterator[Started]:
    s = OpcUaHealthServer(secure_settings(pki), state)
    took, gap = run(start_watching_the_loop(s))
    yield Started(s, took, gap)
    run(s.close())


@pytest.fixture(scope="module")
def server(started: Started) -> OpcUaHealthServer:
    return started.server


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


# --- acceptance: the address space follows the reports --------------------------------------------


def test_address_space_follows_two_reports(server: OpcUaHealthServer, pki: Pki) -> None:
    first, second = first_report(), second_report()

    async def go() -> tuple[Any, ...]:
        await server.publish(first)
        c = await client_for(server.endpoint, pki.client)
        try:
            ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
            root = await c.nodes.objects.get_child(f"{ns}:JointHealth")
            robot = await root.get_child(f"{ns}:robot1")
            joints1 = sorted(
                [
                    (await n.read_browse_name()).Name
                    for n in await robot.get_children(nodeclassmask=ua.NodeClass.Object)
                ]
            )
            j1_vars = {
                (await n.read_browse_name()).Name
                for n in await (await robot.get_child(f"{ns}:J1")).get_children()
            }
            before = {j: await read_joint(c, ns, "robot1", j, JOINT_VARS) for j in ("J1", "J2")}
            j1_ind = await read_joint(
                c, ns, "robot1", "J1", ("backlash_rad", "amplitude_rad_s", "stiffness_nm_rad")
            )
            eu = await c.get_node(
                ua.NodeId("robot1/J1/backlash_rad/EngineeringUnits", ns)
            ).read_value()
            eu_k = await c.get_node(
                ua.NodeId("robot1/J1/stiffness_nm_rad/EngineeringUnits", ns)
            ).read_value()
            unit = await c.get_node(ua.NodeId("robot1/J1/stiffness_nm_rad/Unit", ns)).read_value()
            dtype = await c.get_node(ua.NodeId("robot1/J1/backlash_rad", ns)).read_data_type()
            await server.publish(second)
            after = {
                (ctrl, j): await read_joint(c, ns, ctrl, j, JOINT_VARS)
                for ctrl, j in (("robot1", "J1"), ("robot1", "J2"), ("cnc7", "X"))
            }
            worst = await c.get_node(ua.NodeId("robot1/WorstNe107Status", ns)).read_value()
            controllers = sorted(
                [
                    (await n.read_browse_name()).Name
                    for n in await root.get_children(nodeclassmask=ua.NodeClass.Object)
                ]
            )
            x_amp = await c.get_node(ua.NodeId("cnc7/X/amplitude_rad_s", ns)).read_value()
            report_id = await c.get_node(ua.NodeId("ReportMessageId", ns)).read_value()
        finally:
            await c.disconnect()
        return (
            joints1,
            j1_vars,
            before,
            j1_ind,
            eu,
            eu_k,
            unit,
            dtype,
            after,
            worst,
            controllers,
            x_amp,
            report_id,
        )

    (
        joints1,
        j1_vars,
        before,
        j1_ind,
        eu,
        eu_k,
        unit,
        dtype,
        after,
        worst,
        controllers,
        x_amp,
        report_id,
    ) = run(go())
    assert joints1 == ["J1", "J2"]
    assert set(JOINT_VARS) | {"backlash_rad", "amplitude_rad_s", "stiffness_nm_rad"} <= j1_vars
    # First report: J1 below the watch limit, J2 between watch and alert.
    assert (before["J1"]["Ne107Status"], before["J1"]["Ne107Letter"]) == ("normal", "N")
    assert (before["J2"]["Ne107Status"], before["J2"]["Ne107Letter"]) == (
        "maintenance_required",
        "M",
    )
    assert (before["J1"]["Status"], before["J2"]["Status"]) == ("ok", "watch")
    assert j1_ind == {"backlash_rad": 0.6e-3, "amplitude_rad_s": 0.05, "stiffness_nm_rad": 6000.0}
    assert dtype == ua.NodeId(ua.ObjectIds.Double)
    assert eu.UnitId == unece_unit_id("C81") == 4405297 and eu.DisplayName.Text == "rad"
    assert eu_k.UnitId == -1 and eu_k.DisplayName.Text == unit == "N·m/rad"
    # Rising 0.1 mrad a week: the watch limit (1 mrad) is 4 weeks after 0.6 mrad.
    assert before["J1"]["ForecastLimit"] == "watch"
    assert before["J1"]["ForecastDays"] == pytest.approx(28.0, rel=1e-6)
    assert before["J1"]["ForecastDaysLow"] - 1e-6 <= 28.0 <= before["J1"]["ForecastDaysHigh"] + 1e-6
    assert before["J2"]["ForecastLimit"] == "alert"
    assert before["J2"]["ForecastDays"] == pytest.approx(42.0, rel=1e-6)
    assert before["J1"]["LastEstimateTime"].replace(tzinfo=UTC) == T0 + timedelta(days=14)
    assert before["J1"]["ReportMessageId"] == first.message_id
    assert before["J1"]["Error"] == ""
    # Second report: the values follow, a failed cycle shows F, a new controller appears.
    assert (after[("robot1", "J1")]["Status"], after[("robot1", "J1")]["Ne107Letter"]) == (
        "alert",
        "S",
    )
    j2 = after[("robot1", "J2")]
    assert (j2["Ne107Status"], j2["Ne107Letter"], j2["Error"]) == (
        "failure",
        "F",
        "capture stalled",
    )
    assert math.isnan(j2["ForecastDays"]) and j2["ForecastLimit"] == ""
    assert after[("cnc7", "X")]["Indicator"] == "amplitude_rad_s" and x_amp == 0.02
    assert {v["ReportMessageId"] for v in after.values()} == {second.message_id} == {report_id}
    assert worst == "failure"
    assert controllers == ["cnc7", "robot1"]


@pytest.mark.security("OPC UA health server is read-only for clients")
def test_clients_cannot_write(server: OpcUaHealthServer, pki: Pki) -> None:
    async def go() -> tuple[set[int], Any]:
        await server.publish(first_report())
        c = await client_for(server.endpoint, pki.client)
        try:
            ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
            node = c.get_node(ua.NodeId("robot1/J1/Ne107Status", ns))
            levels = await node.get_access_level() | await node.get_user_access_level()
            with pytest.raises(ua.UaStatusCodeError) as refused:
                await node.write_value("normal")
            return set(levels), refused.value.code
        finally:
            await c.disconnect()

    levels, code = run(go())
    assert levels == {ua.AccessLevel.CurrentRead}
    assert code in (ua.StatusCodes.BadUserAccessDenied, ua.StatusCodes.BadNotWritable)


# --- security -------------------------------------------------------------------------------------


@pytest.mark.security("OPC UA health server refuses an untrusted client")
def test_untrusted_client_certificate_is_refused(
    server: OpcUaHealthServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    from agent.opcua.trust import certificate_facts, load_certificate_file

    thumbprint = certificate_facts(load_certificate_file(pki.stranger.certificate)).thumbprint_sha1
    caplog.set_level(logging.WARNING, logger="agent.publish.opcua_server")
    started = time.monotonic()
    with pytest.raises(ua.UaStatusCodeError) as refused:
        run(client_for(server.endpoint, pki.stranger), timeout_s=20)
    assert refused.value.code == ua.StatusCodes.BadCertificateUntrusted
    assert time.monotonic() - started < 4.0  # refused, not left to time out
    lines = [r.getMessage() for r in caplog.records if "opcua_client_refused" in r.getMessage()]
    assert any(thumbprint in line and "CN=stranger" in line for line in lines), lines
    # Admitting it is copying its certificate into the trust list: no restart.
    admitted = pki.trusted / "stranger.der"
    shutil.copy(pki.stranger.certificate, admitted)
    try:

        async def read_as_stranger() -> str:
            await server.publish(first_report())
            c = await client_for(server.endpoint, pki.stranger)
            try:
                ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
                return str(await c.get_node(ua.NodeId("robot1/J1/Status", ns)).read_value())
            finally:
                await c.disconnect()

        assert run(read_as_stranger(), timeout_s=20) in ("ok", "watch", "alert", "unknown")
    finally:
        admitted.unlink()
    with pytest.raises(ua.UaStatusCodeError):
        run(client_for(server.endpoint, pki.stranger), timeout_s=20)


@pytest.mark.security("OPC UA health server: no-security, anonymous, wrong password refused")
def test_no_security_and_anonymous_and_wrong_password_are_refused(
    server: OpcUaHealthServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # No endpoint without security is offered.
    with pytest.raises(ua.UaError, match=r"No matching endpoints|BadSecurityPolicyRejected"):
        run(client_for(server.endpoint, None), timeout_s=20)
    for user, password in ((None, ""), ("maint", "wrong " + PASSWORD[::-1]), ("nobody", PASSWORD)):
        with pytest.raises(ua.UaError):
            run(client_for(server.endpoint, pki.client, user=user, password=password), timeout_s=20)
    # Sign-only is not offered either: SignAndEncrypt is the one mode.
    with pytest.raises(ua.UaError):
        run(client_for(server.endpoint, pki.client, mode=ua.MessageSecurityMode.Sign), timeout_s=20)
    refused = [r.getMessage() for r in caplog.records if "opcua_login_refused" in r.getMessage()]
    assert len(refused) >= 2
    # The server's side never logs a password (the test's own client is asyncua's business).
    server_side = "\n".join(
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(("agent.publish.", "asyncua.server", "asyncua.common"))
    )
    assert "login_refused" in server_side
    assert PASSWORD not in server_side and PASSWORD[::-1] not in server_side


async def session_on_plain_channel(endpoint: str, user: str, password: str) -> Any:
    """What a hostile client can do with asyncua's lower layer: skip the endpoint check, open
    an unsecured channel (always allowed, for discovery), create and activate a session on it
    with valid credentials, and read."""
    c = Client(endpoint, timeout=5)
    await c.connect_socket()
    try:
        await c.send_hello()
        await c.open_secure_channel()
        params = ua.CreateSessionParameters()
        params.ClientDescription = ua.ApplicationDescription(
            ApplicationUri=CLIENT_URI, ApplicationType=ua.ApplicationType.Client
        )
        params.EndpointUrl = endpoint
        params.SessionName = "hostile"
        params.RequestedSessionTimeout = 60_000
        params.ClientNonce = os.urandom(32)
        await c.uaclient.create_session(params)
        activate = ua.ActivateSessionParameters()
        activate.UserIdentityToken = ua.UserNameIdentityToken(
            PolicyId="username", UserName=user, Password=password.encode()
        )
        activate.LocaleIds = ["en"]
        await c.uaclient.activate_session(activate)
        read = ua.ReadParameters()
        read.NodesToRead = [
            ua.ReadValueId(
                NodeId=ua.NodeId(ua.ObjectIds.Server_NamespaceArray),
                AttributeId=ua.AttributeIds.Value,
            )
        ]
        return await c.uaclient.read(read)
    finally:
        c.disconnect_socket()


@pytest.mark.security("OPC UA health server: session on an unsecured channel refused")
def test_a_session_on_an_unsecured_channel_is_refused(server: OpcUaHealthServer) -> None:
    with pytest.raises(ua.UaStatusCodeError) as refused:
        run(session_on_plain_channel(server.endpoint, "maint", PASSWORD), timeout_s=20)
    assert refused.value.code == ua.StatusCodes.BadUserAccessDenied


def test_none_security_only_when_allowed_and_said_loudly(
    server: OpcUaHealthServer, state: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.publish.opcua_server")
    insecure = OpcUaServerSettings(endpoint="opc.tcp://127.0.0.1:0/jha/", allow_none_security=True)
    s = OpcUaHealthServer(insecure, state)

    async def go() -> str:
        await s.start()
        try:
            await s.publish(first_report())
            c = await client_for(s.endpoint, None, user=None)
            try:
                ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
                return str(await c.get_node(ua.NodeId("robot1/J2/Ne107Status", ns)).read_value())
            finally:
                await c.disconnect()
        finally:
            await s.close()

    assert run(go()) == "maintenance_required"
    warnings = [r for r in caplog.records if "opcua_server_insecure_endpoint" in r.getMessage()]
    assert warnings and warnings[0].levelno == logging.WARNING
    # Without allow_none_security, a server without a certificate does not start.
    with pytest.raises(ConfigError, match="allow_none_security"):
        run(OpcUaHealthServer(OpcUaServerSettings(), tmp_path).start())


def test_settings_and_secret_files_are_checked(tmp_path: Path, pki: Pki) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"{MINIMAL}publish:\n  opcua_server:\n"
        "    endpoint: opc.tcp://127.0.0.1:4841/jha/\n    users_file: /etc/jha/users\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_config(config)
    text = str(exc.value)
    line = config.read_text().splitlines().index("    endpoint: opc.tcp://127.0.0.1:4841/jha/") + 1
    assert f"agent.yaml:{line}: publish.opcua_server.certificate: required" in text
    assert "users_file: needs the secure endpoint" in text
    # A users file others can read is refused at start, naming the file and its mode.
    loose = tmp_path / "users"
    loose.write_text(pki.users.read_text())
    os.chmod(loose, 0o644)
    with pytest.raises(ConfigError, match=r"users_file .*users: mode 0644"):
        run(OpcUaHealthServer(secure_settings(pki, users_file=str(loose)), tmp_path).start())
    bad = tmp_path / "users_bad"
    bad.write_text(f"maint:{PASSWORD}\n")
    os.chmod(bad, 0o600)
    with pytest.raises(ConfigError) as bad_line:
        load_users(bad)
    assert f"{bad}:1" in str(bad_line.value) and PASSWORD not in str(bad_line.value)


# --- opt-in: no listening socket unless configured ------------------------------------------------


def own_tcp_listeners() -> set[int]:
    """Inodes of the listening TCP sockets this process holds (psutil-free: /proc)."""
    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(int(target[8:-1]))
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    listening.add(int(fields[9]))
    return mine & listening


@pytest.mark.security("no listening socket unless configured")
def test_no_listener_unless_configured(
    server: OpcUaHealthServer, state: Path, tmp_path: Path, pki: Pki
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(MINIMAL)
    cfg = load_config(config)
    before = own_tcp_listeners()

    async def with_publishers(pubs: list[Any]) -> set[int]:
        for p in pubs:
            await p.start()
        try:
            return own_tcp_listeners()
        finally:
            for p in pubs:
                await p.close()

    assert publishers_for(cfg.publish, tmp_path) == []
    assert run(with_publishers(publishers_for(cfg.publish, tmp_path))) == before
    configured = dataclasses.replace(cfg.publish, opcua_server=secure_settings(pki))
    pubs = publishers_for(configured, state)
    assert [type(p) for p in pubs] == [OpcUaHealthServer]
    during = run(with_publishers(pubs))
    assert len(during - before) == 1  # exactly the server's socket...
    assert own_tcp_listeners() == before  # ...and gone after close()


def test_start_keeps_the_callers_loop_responsive(started: Started, pki: Pki, state: Path) -> None:
    # The first start builds asyncua's standard address space (seconds of CPU) in the server's
    # thread; the caller's loop keeps ticking meanwhile (GIL hand-overs only).
    assert started.worst_gap_s < max(0.5, started.took_s / 3), started
    # Later starts load it from the shelf the first one left in the state directory.
    again = OpcUaHealthServer(secure_settings(pki), state)
    took, _ = run(start_watching_the_loop(again))
    run(again.close())
    assert took < max(2.0, started.took_s / 2), (took, started.took_s)
    assert (state / "opcua_server" / f"aspace-asyncua-{asyncua.__version__}" / "done").is_file()


def test_a_port_in_use_fails_start_with_a_clear_error(
    server: OpcUaHealthServer, pki: Pki, state: Path
) -> None:
    taken = OpcUaHealthServer(secure_settings(pki, endpoint=server.endpoint), state)
    with pytest.raises(AgentError, match=f"cannot listen on {server.endpoint}"):
        run(taken.start())
    run(taken.close())  # harmless after a failed start
    run(taken.publish(first_report()))  # logged and skipped, never raised


def test_the_daemon_publishes_its_reports_through_the_server(pki: Pki, state: Path) -> None:
    """End to end: an agent config with publish.opcua_server, a simulated robot with a worn
    joint; the agent runs a cycle, writes its report, and the joint's health is readable."""
    doc = {
        "agent": {"state_dir": str(state), "log_level": "warning"},
        "controllers": [
            {
                "name": "robot",
                "driver": "sim",
                "settings": {
                    "seed": 3,
                    "production_runs_s": 0.0,
                    "stop_length_s": 3600.0,
                    "joints": {"j2": {"backlash_rad": 1.2e-3}},
                },
                "joints": [
                    {
                        "name": "j2",
                        "index": 2,
                        "gear_ratio": 40,
                        "encoder_bits": 19,
                        "backlash_cycle": {
                            "motor_speed_rps": 100,
                            "load_turns": 6,
                            "sample_rate_hz": 500,
                            "settle_s": 0.5,
                        },
                        "thresholds": {"backlash_watch_rad": 4.0e-4, "backlash_alert_rad": 8.0e-4},
                        "calibration": {
                            "source": "points",
                            "points": [
                                {"amplitude_rad_s": a, "backlash_rad": d}
                                for a, d in (
                                    (0.0, 0.0),
                                    (1.07, 3.0e-4),
                                    (2.06, 7.0e-4),
                                    (2.86, 1.1e-3),
                                    (3.57, 1.5e-3),
                                    (4.58, 2.1e-3),
                                )
                            ],
                        },
                    }
                ],
            }
        ],
        "publish": {
            "opcua_server": {
                "endpoint": "opc.tcp://127.0.0.1:0/jha/",
                "certificate": str(pki.server.certificate),
                "private_key": str(pki.server.private_key),
                "trusted_clients": str(pki.trusted),
                "users_file": str(pki.users),
            }
        },
    }
    path = state / "daemon.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    agent = Agent(load_config(path), once=False)

    async def go() -> dict[str, Any]:
        task = asyncio.create_task(agent.run())
        try:
            while not agent.publishers:
                assert not task.done()
                await asyncio.sleep(0.05)
            (server,) = agent.publishers
            assert isinstance(server, OpcUaHealthServer)
            while server.published == 0:  # the first report of the first cycle
                assert not task.done()
                await asyncio.sleep(0.05)
            c = await client_for(server.endpoint, pki.client)
            try:
                ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
                return await read_joint(
                    c,
                    ns,
                    "robot",
                    "j2",
                    ("Ne107Status", "Status", "backlash_rad", "ReportMessageId"),
                )
            finally:
                await c.disconnect()
        finally:
            agent.request_stop("test")
            await task

    found = run(go(), timeout_s=90)
    (directory,) = agent.reports[:1]
    report = json.loads((directory / "report.json").read_text())
    assert found["ReportMessageId"] == report["message_id"]
    assert found["Status"] == "alert" and found["Ne107Status"] == "out_of_specification"
    assert found["backlash_rad"] == pytest.approx(report["joints"][0]["value"])


# --- the pure parts -------------------------------------------------------------------------------


def test_health_values_of_a_report() -> None:
    health = {(h.controller, h.joint): h for h in health_of(second_report())}
    j2 = health[("robot1", "J2")]
    assert j2.ne107 is Ne107.FAILURE and j2.last_estimate is None
    assert math.isnan(next(i.value for i in j2.indicators if i.name == "backlash_rad"))
    assert health[("robot1", "J1")].to_dict()["ne107_letter"] == "S"
    assert unit_of("stiffness_nm_rad") == "N·m/rad" and unit_of("backlash_rad") == "rad"
    assert unit_of("friction_nm", "Nm") == "N·m" and unit_of("mystery") == ""


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    values=st.lists(st.floats(0.0, 3e-3, allow_nan=False), min_size=0, max_size=6),
    latest=st.one_of(st.none(), st.floats(0.0, 3e-3)),
    error=st.sampled_from([None, "capture stalled"]),
)
def test_health_follows_any_report(
    values: list[float], latest: float | None, error: str | None
) -> None:
    j = joint_report(
        "r",
        "j",
        None if latest is None else result(latest),
        LIMITS,
        history(values),
        error=error,
        indicator="backlash_rad",
    )
    (h,) = health_of(Report(T0.isoformat(), ("r",), (j,)))
    assert h.ne107 is j.ne107 and h.status is j.status
    assert (h.error != "") == (error is not None)
    assert all(i.unit for i in h.indicators)
    if h.forecast_limit:
        assert h.forecast_days_low <= h.forecast_days * (1 + 1e-9) + 1e-9
        assert h.forecast_days <= h.forecast_days_high * (1 + 1e-9) + 1e-9
    else:
        assert math.isnan(h.forecast_days) and math.isnan(h.forecast_days_high)
    assert (h.last_estimate is None) == (not values)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    name=st.from_regex(r"[a-z][a-z0-9_.-]{0,15}", fullmatch=True),
    password=st.text(min_size=1, max_size=40).filter(lambda p: "\n" not in p and "\r" not in p),
)
def test_users_file_round_trip(
    tmp_path_factory: pytest.TempPathFactory, name: str, password: str
) -> None:
    path = tmp_path_factory.mktemp("users") / "users"
    path.write_text(hash_line(name, password, iterations=10_000) + "\n")
    os.chmod(path, 0o600)
    users = load_users(path)
    assert users[name].matches(password) and not users[name].matches(password + "x")
    assert password not in path.read_text() or len(password) < 4
    assert len(password) < 4 or password not in repr(users).replace(name, "")
