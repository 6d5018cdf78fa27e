"""The UR driver's end of its worker process: start it, ask it, beat for it, reap it.

`WorkerLink` owns the child process (`python -m drivers.ur_rtde.worker`, drivers/ur_rtde/worker/)
and the socket to it (drivers.ur_rtde.wire): requests with ids and futures, the worker's abort
events (a stop it must confirm within stop_timeout_s, or it is killed), and the heartbeat the
driver sends from its event loop while a cycle runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import pickle
import socket
import sys
from collections import deque
from typing import Any

from agent.errors import CycleAborted, DriverError
from drivers.base import within
from drivers.ur_rtde.wire import BEAT, LEN, FaultKind, Op, encode

log = logging.getLogger(__name__)
_BEAT_FRAME = encode(BEAT)
# A worker that does not read its socket (stuck in a stop) must not make the beats pile up.
_BEAT_BACKLOG_BYTES = 64 * 1024


class WorkerLink:
    """The worker process and the length-prefixed pickle socket to it."""

    def __init__(self, label: str, stop_timeout_s: float) -> None:
        self.label = label
        self.stop_timeout_s = stop_timeout_s
        self.proc: asyncio.subprocess.Process | None = None
        self.output: deque[str] = deque(maxlen=20)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._dead: str | None = None
        self.beats_sent = 0
        self.beats_skipped = 0  # the socket had not taken the earlier ones yet

    async def start(self) -> None:
        parent, child = socket.socketpair()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "drivers.ur_rtde.worker",
                "--fd",
                str(child.fileno()),
                pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
        finally:
            child.close()
        reader, self._writer = await asyncio.open_connection(sock=parent)
        self._tasks = [
            asyncio.create_task(self._read(reader)),
            asyncio.create_task(self._log_output()),
        ]

    @property
    def alive(self) -> bool:
        return self._dead is None and self.proc is not None and self.proc.returncode is None

    @property
    def failure(self) -> str:
        """Why the worker is gone ('' while it runs)."""
        return self._dead or ("" if self.alive else "ur_rtde worker ended")

    async def _log_output(self) -> None:
        if self.proc is None or self.proc.stdout is None:  # start() made both
            raise DriverError(f"{self.label}: ur_rtde worker not started")
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.output.append(line)
                log.info("event=ur_rtde_output controller=%s line=%r", self.label, line)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = LEN.unpack(await reader.readexactly(LEN.size))
                msg = pickle.loads(await reader.readexactly(size))
                if "event" in msg:
                    self._on_abort(msg)
                    continue
                fut = self._pending.pop(msg["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        await self._died()

    def _on_abort(self, msg: dict[str, Any]) -> None:
        """The worker is stopping after a fault: it must confirm within the stop timeout."""
        log.warning("event=cycle_abort controller=%s reason=%r", self.label, msg["error"])
        loop = asyncio.get_running_loop()
        loop.call_later(self.stop_timeout_s, self._stop_deadline, msg["id"], msg["error"])

    def _stop_deadline(self, msg_id: int, error: str) -> None:
        fut = self._pending.get(msg_id)
        if fut is not None and not fut.done():
            self.kill(
                f"{error}; the stop was not confirmed in {self.stop_timeout_s:g} s: worker "
                "killed, the controller's RTDE watchdog stops the arm"
            )

    async def _died(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await within(self.proc.wait(), 1.0)
        if self._dead is None:
            rc = None if self.proc is None else self.proc.returncode
            how = f"signal {-rc}" if rc is not None and rc < 0 else f"exit code {rc}"
            last = " | ".join(list(self.output)[-3:])
            self._dead = f"ur_rtde worker ended ({how})" + (f"; it said: {last}" if last else "")
        self._fail_pending(self._dead)

    def _fail_pending(self, why: str) -> None:
        message = why if why.startswith(f"{self.label}: ") else f"{self.label}: {why}"
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(DriverError(message))
        self._pending.clear()

    def kill(self, why: str) -> None:
        if self._dead is None:
            self._dead = why
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
        self._fail_pending(self._dead)

    async def request(self, op: Op, wait_s: float | None, **args: Any) -> Any:
        if not self.alive or self._writer is None:
            raise DriverError(f"{self.label}: {self._dead or 'ur_rtde worker not running'}")
        msg_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        data = pickle.dumps({"id": msg_id, "op": op, **args})
        try:
            self._writer.write(LEN.pack(len(data)) + data)
            await self._writer.drain()
            reply = await within(asyncio.shield(fut), wait_s)
        except TimeoutError:
            raise DriverError(f"{self.label}: no answer to {str(op)!r} in {wait_s:g} s") from None
        except ConnectionError as exc:
            raise DriverError(f"{self.label}: ur_rtde worker unreachable: {exc}") from exc
        finally:
            self._pending.pop(msg_id, None)
        if reply["ok"]:
            return reply["result"]
        error = CycleAborted if reply["kind"] == FaultKind.ABORT else DriverError
        raise error(f"{self.label}: {reply['error']}")

    def beat(self) -> None:
        """One heartbeat to the worker, written without waiting (called from the event loop)."""
        writer = self._writer
        if not self.alive or writer is None or writer.is_closing():
            return
        if writer.transport.get_write_buffer_size() > _BEAT_BACKLOG_BYTES:
            self.beats_skipped += 1
            return
        writer.write(_BEAT_FRAME)
        self.beats_sent += 1

    async def close(self, timeout_s: float) -> None:
        with contextlib.suppress(DriverError, CycleAborted):
            await self.request(Op.CLOSE, timeout_s)
        await self.reap(timeout_s)

    async def reap(self, timeout_s: float) -> None:
        """Wait for the process to end (killing it after `timeout_s`) and release its pipes."""
        if self.proc is not None:
            try:
                await within(self.proc.wait(), timeout_s)
            except TimeoutError:
                self.kill("did not exit")
                await self.proc.wait()
        self.kill("closed")
        if self._writer is not None:
            self._writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
