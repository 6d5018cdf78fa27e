"""A flood of idle TCP connections on the OPC UA health server (publish.opcua_server): beyond
max_connections each is closed as it is accepted, the ones within it are closed once
activation_timeout_s passes without an activated session, asyncua's line about each refusal is
logged once a minute, not per connection, and a real client is served once the flood is gone."""

from __future__ import annotations

import logging
import select
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from asyncua import ua

from agent.config.opcua_server import HEALTH_NAMESPACE_URI, OpcUaServerSettings
from agent.publish.opcua_server.server import OpcUaHealthServer
from tests.support.publish.opcua_server import client_for, first_report, run
from tests.support.summary import record

FLOOD = 40
CAP = 4


def _closed(socks: list[socket.socket]) -> int:
    """How many the server has closed (readable at EOF); reads nothing else."""
    readable, _, _ = select.select(socks, [], [], 0)
    closed = 0
    for s in readable:
        try:
            closed += s.recv(1, socket.MSG_PEEK) == b""
        except ConnectionResetError:
            closed += 1
    return closed


def test_idle_connections_beyond_the_cap_are_closed_and_the_rest_time_out(
    state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncua.server.binary_server_asyncio")
    settings = OpcUaServerSettings(
        endpoint="opc.tcp://127.0.0.1:0/jha/",
        allow_none_security=True,
        max_connections=CAP,
        activation_timeout_s=1.0,
    )
    s = OpcUaHealthServer(settings, state)
    seen: dict[str, float] = {}

    async def go() -> str:
        await s.start()
        try:
            await s.publish(first_report())
            where = urlsplit(s.endpoint)
            socks = [socket.create_connection((where.hostname, where.port)) for _ in range(FLOOD)]
            try:
                deadline = time.monotonic() + 30.0
                while _closed(socks) < FLOOD - CAP and time.monotonic() < deadline:
                    time.sleep(0.02)
                seen["at_accept"] = _closed(socks)
                opened = time.monotonic()
                while _closed(socks) < FLOOD and time.monotonic() < deadline:
                    time.sleep(0.05)
                seen["all"] = _closed(socks)
                seen["idle_s"] = time.monotonic() - opened
            finally:
                for sock in socks:
                    sock.close()
            c = await client_for(s.endpoint, None, user=None)
            try:
                ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
                return str(await c.get_node(ua.NodeId("robot1/J2/Ne107Status", ns)).read_value())
            finally:
                await c.disconnect()
        finally:
            await s.close()

    assert run(go()) == "maintenance_required"
    lines = [r for r in caplog.records if r.getMessage().startswith("Refusing connection")]
    record("listening sockets", f"OPC UA server: {FLOOD} idle connections, cap {CAP}",
           f"{seen['at_accept']} closed at accept, {seen['all'] - seen['at_accept']} after "
           f"activation_timeout_s ({seen['idle_s']:.1f} s), {len(lines)} log line(s)")  # fmt: skip
    assert seen["at_accept"] >= FLOOD - CAP and seen["all"] == FLOOD, seen
    assert len(lines) == 1, [r.getMessage() for r in lines]
