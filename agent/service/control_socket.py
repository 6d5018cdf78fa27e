"""The daemon's control socket: `jha cycle now` and `jha status` talk to the running service.

A unix stream socket, mode 0660, JSON lines: one request object, one reply object, then the
daemon closes. The peer is identified with SO_PEERCRED: root, the daemon's own user and members
of the socket's group are served, anyone else gets a refusal. A bad request gets an error reply;
nothing a client sends can take the daemon down.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import grp
import json
import logging
import os
import pwd
import socket
import stat
import struct
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from agent.errors import EX_UNAVAILABLE, AgentError
from agent.logfmt import kv

log = logging.getLogger(__name__)

SOCKET_NAME = "control.sock"
MAX_REQUEST_BYTES = 64 * 1024
# Connections served at once; more are refused at once. Each costs a file descriptor for up to
# READ_TIMEOUT_S: a flood of held connections must not take the descriptors the agent needs to
# record a cycle (agent.service.preflight refuses motion when too few are left).
MAX_CLIENTS = 32
READ_TIMEOUT_S = 5.0
_UCRED = struct.Struct("3i")  # pid, uid, gid

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class ControlCommand(enum.StrEnum):
    """The requests the daemon answers: the `cmd` of a request object."""

    STATUS = "status"  # `jha status`
    CYCLE_NOW = "cycle_now"  # `jha cycle now`


class ControlError(AgentError):
    """The daemon could not be reached, refused us, or answered nonsense."""

    exit_code = EX_UNAVAILABLE


def socket_path(
    state_dir: str | Path, configured: str | None, environ: Mapping[str, str] | None = None
) -> Path:
    """$RUNTIME_DIRECTORY/control.sock (systemd), else the configured path, else in state_dir."""
    env = os.environ if environ is None else environ
    runtime = env.get("RUNTIME_DIRECTORY", "")
    if runtime:
        # systemd lists one directory per RuntimeDirectory= entry, colon-separated.
        return Path(runtime.split(":")[0]) / SOCKET_NAME
    if configured:
        return Path(configured)
    return Path(state_dir) / SOCKET_NAME


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, from the kernel."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def _groups_of(pid: int, uid: int, gid: int) -> set[int]:
    """The peer's groups: /proc knows its supplementary groups; else the group database."""
    groups = {gid}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                groups.update(int(g) for g in line.split()[1:])
                return groups
    except (OSError, ValueError):
        pass
    with contextlib.suppress(KeyError):
        name = pwd.getpwuid(uid).pw_name
        groups.update(g.gr_gid for g in grp.getgrall() if name in g.gr_mem)
    return groups


def peer_allowed(pid: int, uid: int, gid: int, socket_gid: int) -> bool:
    if uid in (0, os.getuid()):
        return True
    return socket_gid in _groups_of(pid, uid, gid)


class ControlServer:
    def __init__(self, path: Path, handler: Handler) -> None:
        self.path = path
        self._handler = handler
        self._server: asyncio.AbstractServer | None = None
        self._clients = 0
        self.refused_busy = 0  # connections refused because MAX_CLIENTS were being served

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            # A socket left by a daemon that died; anything else there is not ours to delete.
            if stat.S_ISSOCK(self.path.lstat().st_mode):
                self.path.unlink()
        old_umask = os.umask(0o117)  # born 0660: no window in which others could connect
        try:
            self._server = await asyncio.start_unix_server(
                self._client, path=str(self.path), limit=MAX_REQUEST_BYTES
            )
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o660)
        log.info(kv("control_socket", path=self.path))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(OSError):
                self.path.unlink()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._clients >= MAX_CLIENTS:
            self.refused_busy += 1
            if self.refused_busy == 1 or self.refused_busy % 100 == 0:  # one line, not a flood
                log.warning(kv("control_busy", clients=self._clients, refused=self.refused_busy))
            writer.write(b'{"ok": false, "error": "busy: too many control connections"}\n')
            writer.close()
            return
        self._clients += 1
        try:
            reply = await self._serve(reader, writer)
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except Exception as exc:  # a vanished or misbehaving client is its own problem
            log.warning(kv("control_client_failed", error=f"{type(exc).__name__}: {exc}"))
        finally:
            self._clients -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> dict[str, Any]:
        # The request is read before the peer is judged, so that a refused client still gets
        # the refusal as its reply (and not a broken pipe); it is not parsed unless allowed.
        try:
            line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
        except (ValueError, asyncio.LimitOverrunError):
            line = None
        except TimeoutError:
            return {"ok": False, "error": f"no request within {READ_TIMEOUT_S:g} s"}
        sock = writer.get_extra_info("socket")
        pid, uid, gid = peer_credentials(sock)
        try:
            socket_gid = self.path.stat().st_gid
        except OSError:
            socket_gid = os.getgid()
        if not peer_allowed(pid, uid, gid, socket_gid):
            log.warning(kv("control_refused", pid=pid, uid=uid, gid=gid))
            return {
                "ok": False,
                "error": f"permission denied: uid {uid} is not root, the agent's user or a member "
                f"of the socket's group (gid {socket_gid})",
            }
        if line is None:
            return {"ok": False, "error": f"request longer than {MAX_REQUEST_BYTES} bytes"}
        try:
            request = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            return {"ok": False, "error": f"expected one JSON object on a line: {exc}"}
        except RecursionError:  # [[[[... 30,000 deep: an answer, not a closed connection
            return {"ok": False, "error": "expected one JSON object on a line: nested too deep"}
        if not isinstance(request, dict):
            return {"ok": False, "error": 'expected a JSON object, e.g. {"cmd": "status"}'}
        log.info(kv("control_request", uid=uid, cmd=request.get("cmd")))
        try:
            return await self._handler(request)
        except Exception as exc:  # a handler bug answers an error; the daemon goes on
            log.exception(kv("control_handler_failed", cmd=request.get("cmd")))
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}


def request(path: Path, payload: Mapping[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """One request to the daemon (blocking client for the CLI)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            sock.sendall(json.dumps(dict(payload)).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except FileNotFoundError:
        raise ControlError(f"{path}: no control socket (is the agent running?)") from None
    except PermissionError:
        raise ControlError(f"{path}: permission denied (are you in the agent's group?)") from None
    except ConnectionRefusedError:
        raise ControlError(f"{path}: connection refused (the agent is not running)") from None
    except OSError as exc:
        raise ControlError(f"{path}: {exc}") from None
    try:
        reply = json.loads(data)
    except ValueError:
        raise ControlError(f"{path}: the agent answered {data[:200]!r}, not JSON") from None
    if not isinstance(reply, dict):
        raise ControlError(f"{path}: the agent answered {reply!r}, not a JSON object")
    return reply
