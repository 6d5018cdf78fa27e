"""A flood of held control connections: at most MAX_CLIENTS are served at once, the rest are
refused at once, so the descriptors the agent needs to record a cycle stay free."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from agent.service.control_socket import MAX_CLIENTS, ControlServer
from tests.support.summary import record

HELD = MAX_CLIENTS + 200


async def _status(_request: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "state": "running"}


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_held_connections_are_capped_and_a_request_gets_through_after(tmp_path: Path) -> None:
    async def go() -> tuple[int, int, int, dict[str, Any]]:
        server = ControlServer(tmp_path / "control.sock", _status)
        await server.start()
        try:
            before = _fds()
            held = [await asyncio.open_unix_connection(str(server.path)) for _ in range(HELD)]
            await asyncio.sleep(0.3)  # let the server accept them all
            # Count the server's side: ours are HELD sockets, the server keeps at most
            # MAX_CLIENTS of its own (the refused ones are closed at once).
            server_side = _fds() - before - HELD
            busy = 0
            for reader, _ in held[MAX_CLIENTS:]:
                line = await asyncio.wait_for(reader.readline(), 5.0)
                busy += b"busy" in line
            for _, writer in held:
                writer.close()
            await asyncio.sleep(0.3)
            reader, writer = await asyncio.open_unix_connection(str(server.path))
            writer.write(json.dumps({"command": "status"}).encode() + b"\n")
            reply = json.loads(await asyncio.wait_for(reader.readline(), 5.0))
            writer.close()
            return server_side, busy, server.refused_busy, reply
        finally:
            await server.close()

    server_side, busy, refused, reply = asyncio.run(go())
    record("control socket flood", f"{HELD} held connections", f"{server_side} server fds",
           f"{refused} refused busy")  # fmt: skip
    assert server_side <= MAX_CLIENTS + 2  # the listening socket and the loop's own
    assert busy == refused == HELD - MAX_CLIENTS
    assert reply.get("ok") is True, reply  # served, not refused as busy


def test_a_request_nested_30000_deep_gets_an_answer(tmp_path: Path) -> None:
    # json.loads recursed out of the stack: the connection closed with a RecursionError logged.
    async def go() -> dict[str, Any]:
        server = ControlServer(tmp_path / "control.sock", _status)
        await server.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(server.path))
            writer.write(b"[" * 30_000 + b"]" * 30_000 + b"\n")
            reply: dict[str, Any] = json.loads(await asyncio.wait_for(reader.readline(), 5.0))
            writer.close()
            return reply
        finally:
            await server.close()

    assert asyncio.run(go()) == {
        "ok": False,
        "error": "expected one JSON object on a line: nested too deep",
    }
