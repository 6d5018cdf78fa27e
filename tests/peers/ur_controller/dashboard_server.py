"""The dashboard server on port 29999: one text line in, one text line out.

The answers are the e-Series dashboard's own strings (PolyScope 5), e.g. `Robotmode: RUNNING`,
`Safetystatus: PROTECTIVE_STOP`, `PLAYING production.urp`. Two faults can be switched on: a
stalled server (reads the request, never answers) and one that answers garbage.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.peers.ur_controller.controller import Controller

log = logging.getLogger("ur_controller.dashboard")

DASHBOARD_PORT = 29999
WELCOME = "Connected: Universal Robots Dashboard Server"


class DashboardServer:
    def __init__(self, host: str, controller: Controller, port: int = DASHBOARD_PORT) -> None:
        self.controller = controller
        self.listener = socket.create_server((host, port))
        self.thread = threading.Thread(target=self._accept_loop, name="dashboard", daemon=True)
        self.requests: list[str] = []

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with sock, sock.makefile("rb") as reader:
            sock.sendall((WELCOME + "\n").encode())
            for raw in reader:
                line = raw.decode(errors="replace").strip()
                self.requests.append(line)
                mode = self.controller.dashboard_fault
                if mode == "stall":
                    continue
                if mode == "garbage":
                    sock.sendall(b"\x00\xfe\x13garbage\x7f\n")
                    continue
                answer = self.answer(line)
                try:
                    sock.sendall((answer + "\n").encode())
                except OSError:
                    return
                if line == "quit":
                    return

    def answer(self, line: str) -> str:
        c = self.controller
        with c.lock:
            if line == "PolyscopeVersion":
                v = c.version
                return f"URSoftware {v[0]}.{v[1]}.{v[2]}.{v[3]} (Mar 22 2021)"
            if line == "get serial number":
                return "20185500001"
            if line == "get robot model":
                return "UR5"
            if line == "is in remote control":
                return "true" if c.remote_control else "false"
            if line == "robotmode":
                return f"Robotmode: {c.robot_mode}"
            if line == "safetystatus":
                return f"Safetystatus: {c.safety_mode}"
            if line == "safetymode":
                return f"Safetymode: {c.safety_mode}"
            if line == "programState":
                return f"{c.program_state} {c.loaded_program}"
            if line == "running":
                return f"Program running: {'true' if c.program_state == 'PLAYING' else 'false'}"
            if line == "get loaded program":
                return f"Loaded program: /programs/{c.loaded_program}"
            if line == "stop":
                c.stop_program("dashboard stop")
                return "Stopped"
            if line == "pause":
                return "Pausing program"
            if line == "play":
                if not c.remote_control:
                    return "Command is not allowed due to safety reasons."
                if c.safety_mode not in ("NORMAL", "REDUCED"):
                    return "Failed to execute: play"
                if c.program_state == "PAUSED" and c.script is not None:
                    # Play resumes a paused program where it stood: a control script that
                    # was paused mid-motion runs its motion on (why the agent stops it).
                    c.program_state = "PLAYING"
                    c.event("paused control script resumed by play")
                    return "Starting program"
                c.play_production()
                return "Starting program"
            if line == "unlock protective stop":
                # Polyscope's answers: refused within 5 s of the stop (and when none is active).
                at = c.protective_stop_at
                if c.safety_mode != "PROTECTIVE_STOP" or at is None or time.monotonic() - at < 5.0:
                    return (
                        "Cannot unlock protective stop until 5s after occurrence. "
                        "Always inspect cause of protective stop before unlocking"
                    )
                c.safety_mode = "NORMAL"
                return "Protective stop releasing"
            if line == "close safety popup":
                return "closing safety popup"
            if line == "quit":
                return "Disconnected"
        return f"could not understand: '{line}'"
