"""The OPC UA health server's security against a real asyncua Client over loopback: untrusted
certificates, no security, anonymous and wrong passwords, sessions on unsecured channels, the
settings and secret files, the users file."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from asyncua import Client, ua
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.load import load_config
from agent.config.opcua_server import HEALTH_NAMESPACE_URI, OpcUaServerSettings
from agent.errors import ConfigError
from agent.publish.opcua_server.server import OpcUaHealthServer
from agent.publish.opcua_server.users import hash_line, load_users
from tests.support.publish.opcua_server import (
    CLIENT_URI,
    MINIMAL,
    PASSWORD,
    Pki,
    client_for,
    first_report,
    run,
    secure_settings,
)

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
