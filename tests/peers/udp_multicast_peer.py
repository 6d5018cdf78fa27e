"""The CAN controller on python-can's `udp_multicast` virtual bus: the CAN driver's second peer.

Every member of the multicast group sees every frame (msgpack-encoded can.Message datagrams),
as nodes on one CAN bus do. Multicast needs a route, so the tests run this and the driver inside
a network namespace of their own (`ip netns add`; inside it `ip link set lo up multicast on` and
`ip route add 224.0.0.0/4 dev lo`). The controller model is tests/peers/can_controller.py; run
from the repository root as `python -m tests.peers.udp_multicast_peer --config ...
--controller ...`; it prints {"event": "listening", ...} once it has joined the group.

On this transport `garbage` and `badtext` are a datagram that is no msgpack frame, and
`disconnect` (there is no connection to drop) silences the controller for good, like a node that
fell off the bus.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import threading
import time

import can

from .can_controller import GARBAGE, Controller
from .can_peer_cli import add_arguments, controller_from_args, emit_json

TICK_S = 0.001


def serve(args: argparse.Namespace) -> None:
    controller: Controller = controller_from_args(args)
    proto = controller.proto
    agent_ids = (proto.command.frame_id, proto.cycle_setup.frame_id, proto.cycle_length.frame_id)
    bus = can.Bus(
        interface="udp_multicast",
        channel=args.group,
        port=args.port,
        fd=False,
        # Every member gets its own datagrams back: keep only what the agent sends.
        can_filters=[{"can_id": i, "can_mask": 0x7FF, "extended": False} for i in agent_ids],
    )
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    lock = threading.Lock()

    def receive() -> None:
        while True:
            try:
                msg = bus.recv(timeout=0.1)
            except can.CanOperationError as exc:  # our own garbage datagram comes back too
                emit_json({"event": "receive_error", "error": str(exc)})
                continue
            if msg is not None and not msg.is_error_frame:
                with lock:
                    controller.on_frame(msg.arbitration_id, bytes(msg.data))

    threading.Thread(target=receive, daemon=True, name="udp-rx").start()
    emit_json({"event": "listening", "group": args.group, "port": args.port})
    while True:
        with lock:
            outs = controller.step()
        for out in outs:
            if out.kind == "frame":
                bus.send(
                    can.Message(arbitration_id=out.can_id, data=out.data, is_extended_id=False)
                )
            elif out.kind in ("garbage", "badtext"):
                raw.sendto(GARBAGE, (args.group, args.port))
            elif out.kind == "disconnect":
                with lock:
                    controller.stalled_until = math.inf
            elif out.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(TICK_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--group", default="239.74.163.2", help="IPv4 multicast group (channel)")
    parser.add_argument("--port", type=int, default=43113)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    serve(args)


if __name__ == "__main__":
    main()
