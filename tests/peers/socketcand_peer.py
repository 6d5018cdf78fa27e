"""A socketcand server with a controller on its virtual bus: the CAN driver's TCP peer.

socketcand (github.com/linux-can/socketcand) exposes a CAN bus as ASCII over TCP. This speaks
the part python-can's `socketcand` interface uses, byte for byte:

  server: < hi >                       on accept
  client: < open can0 >      server: < ok >     (another bus name: < error >)
  client: < rawmode >        server: < ok >
  server: < frame 100 1712345678.123456 00112233 >   every frame on the bus (id hex, 3 digits
                                                       standard / 8 extended, secs.usecs, data)
  client: < send 010 8 1 0 0 0 0 0 0 0 >             a frame to put on the bus (len, bytes hex)

python-can checks the two `< ok >` replies with one recv each, so bus frames are forwarded to a
client only once it has sent its first frame (the driver's ENABLE): otherwise a frame could
arrive in the same TCP read as the `< ok >` and fail the handshake. The controller model is
tests/peers/can_controller.py; run from the repository root as `python -m
tests.peers.socketcand_peer --config ... --controller ...`; it prints {"event": "listening",
"port": N} first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal

from .can_controller import BADTEXT, GARBAGE, Controller, Out
from .can_peer_cli import add_arguments, controller_from_args, emit_json

TICK_S = 0.001


class _Client:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.forwarding = False  # set by the client's first frame


class SocketcandPeer:
    def __init__(self, controller: Controller, bus_name: str) -> None:
        self.controller = controller
        self.bus_name = bus_name
        self.clients: list[_Client] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = _Client(writer)
        emit_json({"event": "client", "peer": str(writer.get_extra_info("peername"))})
        try:
            writer.write(b"< hi >")
            await writer.drain()
            if await self._command(reader) != ["open", self.bus_name]:
                writer.write(b"< error >")
                return
            writer.write(b"< ok >")
            await writer.drain()
            if await self._command(reader) != ["rawmode"]:
                writer.write(b"< error >")
                return
            writer.write(b"< ok >")
            await writer.drain()
            self.clients.append(client)
            while True:
                words = await self._command(reader)
                if words is None:
                    return
                if words[:1] == ["send"] and len(words) >= 3:
                    self._send(client, words)
                elif words == ["echo"]:
                    writer.write(b"< echo >")
                else:
                    emit_json({"event": "unknown_command", "words": words})
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            if client in self.clients:
                self.clients.remove(client)
            writer.close()
            emit_json({"event": "client_gone"})

    @staticmethod
    async def _command(reader: asyncio.StreamReader) -> list[str] | None:
        """The words of the next `< ... >` element; None at end of stream."""
        try:
            await reader.readuntil(b"<")
            body = await reader.readuntil(b">")
        except asyncio.IncompleteReadError:
            return None
        return body[:-1].decode("ascii", "replace").split()

    def _send(self, client: _Client, words: list[str]) -> None:
        try:
            can_id, length = int(words[1], 16), int(words[2], 16)
            data = bytes(int(b, 16) for b in words[3 : 3 + length])
        except ValueError:
            emit_json({"event": "bad_send", "words": words})
            return
        client.forwarding = True
        self.controller.on_frame(can_id, data)

    def deliver(self, outs: list[Out]) -> None:
        chunks: list[str] = []
        for out in outs:
            if out.kind == "frame":
                secs, usecs = divmod(round(out.t * 1e6), 1_000_000)
                chunks.append(
                    f"< frame {out.can_id:03X} {secs}.{usecs:06d} {out.data.hex().upper()} >"
                )
                continue
            self._write(chunks)
            chunks = []
            if out.kind in ("garbage", "badtext"):
                for c in self._live():
                    c.writer.write(GARBAGE if out.kind == "garbage" else BADTEXT)
            elif out.kind == "disconnect":
                emit_json({"event": "disconnecting", "clients": len(self.clients)})
                for c in list(self.clients):
                    c.writer.transport.abort()
                self.clients.clear()
            elif out.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        self._write(chunks)

    def _live(self) -> list[_Client]:
        return [c for c in self.clients if c.forwarding and not c.writer.is_closing()]

    def _write(self, chunks: list[str]) -> None:
        if not chunks:
            return
        blob = "".join(chunks).encode("ascii")
        for c in self._live():
            c.writer.write(blob)

    async def tick(self) -> None:
        while True:
            self.deliver(self.controller.step())
            await asyncio.sleep(TICK_S)


async def serve(args: argparse.Namespace) -> None:
    peer = SocketcandPeer(controller_from_args(args), args.bus)
    server = await asyncio.start_server(peer.handle, args.host, args.port)
    port = server.sockets[0].getsockname()[1]
    emit_json({"event": "listening", "host": args.host, "port": port})
    ticker = asyncio.create_task(peer.tick())
    try:
        async with server:
            await server.serve_forever()
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    parser.add_argument("--bus", default="can0", help="the bus name clients must open")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args))


if __name__ == "__main__":
    main()
