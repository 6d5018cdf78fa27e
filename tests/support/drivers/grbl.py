"""The GRBL-protocol peer (tests/peers/grbl_controller.py) on a pseudo-terminal, and what the
streaming tests send it: `jha feedrate ...` in-process, small programs, a stream to the peer.

Used by tests/cli/test_feedrate.py, tests/feedrate/test_gcode_stream*.py and
tests/drivers/grbl/; each folder's conftest.py turns `grbl_peers` into its `peer` fixture.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cli.feedrate import register
from agent.errors import EX_DATAERR, AgentError
from agent.feedrate.streaming.grbl import GrblOptions, stream_grbl
from agent.feedrate.streaming.grbl_protocol import parse_status
from agent.feedrate.streaming.serial_channel import open_serial
from agent.feedrate.streaming.session import StreamError
from tests.support.paths import PEERS

PEER = PEERS / "grbl_controller.py"

GRBL_MACHINE = """\
name: grbl-test
eps_m: 2.0e-6
dialect: grbl
inverse_time: true
axes:
  X: &ax
    b_s2: 0.0005
    c_s: 0.005
    gear_ratio: 25
    screw_lead_m_per_rad: 1.0
    motor_inertia_fraction: 0.35
    motor_time_constant_s: 1.0
    backlash_motor_rad: 0.125664
  Y: *ax
modulation: {policy: fixed, half_window_s: 0.05}
"""


def jha(*argv: str) -> int:
    """`jha feedrate ...` in-process: the command group mounted on a bare parser, as
    agent/cli/main.py mounts it, errors mapped to sysexits codes as agent.cli.main.main maps
    them."""
    parser = argparse.ArgumentParser(prog="jha")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    try:
        code: int = args.func(args)
        return code
    except AgentError as exc:
        print(f"jha: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ValueError, OSError) as exc:
        print(f"jha: {exc}", file=sys.stderr)
        return EX_DATAERR


def zigzag(n: int, width: float = 20.0, feed: float = 3000.0) -> str:
    return f"G21 G90 G94 F{feed:g}\n" + "".join(
        f"G1 X{(k % 2) * width:g} Y{k * 0.5:g}\n" for k in range(1, n)
    )


def polygon(n: int, radius: float = 50.0, sides: int = 500, feed: float = 3000.0) -> list[str]:
    """A header line and n - 1 short G1 chords round a circle (lines 17-21 characters)."""
    out = [f"G21 G90 G94 F{feed:g}\n"]
    for k in range(1, n):
        a = 2.0 * math.pi * k / sides
        out.append(f"G1 X{radius * math.cos(a):.3f} Y{radius * math.sin(a):.3f}\n")
    return out


class Peer:
    """One peer process; `path` is the pty's slave side, where the streamer connects."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.stats_path = tmp / f"stats-{time.monotonic_ns()}.json"
        self.proc = subprocess.Popen(
            [sys.executable, "-P", str(PEER), "--stats", str(self.stats_path), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("READY"), f"peer did not start: {line!r}"
        self.path = line.split()[1]

    def stats(self) -> dict[str, Any]:
        """Stop the peer (if it still runs) and read what it counted."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        return dict(json.loads(self.stats_path.read_text()))

    def state(self) -> Any:
        """The machine's status as its display shows it (the peer's stdin, not the port, which
        the streamer may hold); every byte already written to the port has been taken in."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("status\n")
        self.proc.stdin.flush()
        return parse_status(self.proc.stdout.readline().strip())

    def buffers(self) -> dict[str, Any]:
        """What the machine holds and does now (runnable_lines: what a cycle start would run),
        read from the peer's stdin, not the port."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("buffers\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline()))

    def settle(self) -> Any:
        """A '?' round trip: the peer has read all earlier bytes once it answers."""
        channel = open_serial(self.path)
        try:
            channel.write(b"?", 1.0)
            buf = b""
            deadline = time.monotonic() + 2.0
            while b">" not in buf and time.monotonic() < deadline:
                buf += channel.read(0.05)
        finally:
            channel.close()
        line = buf[buf.index(b"<") : buf.index(b">") + 1].decode()
        return parse_status(line)

    def wait_idle(self, timeout_s: float = 10.0) -> Any:
        """Poll '?' until the controller reports Idle (all planned motion executed)."""
        channel = open_serial(self.path)
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                channel.write(b"?", 1.0)
                buf = b""
                while b">" not in buf and time.monotonic() < deadline:
                    buf += channel.read(0.05)
                status = parse_status(buf[buf.rindex(b"<") : buf.rindex(b">") + 1].decode())
                if status.state == "Idle":
                    return status
                time.sleep(0.02)
        finally:
            channel.close()
        raise AssertionError("the controller never became Idle")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def grbl_peers(tmp_path: Path) -> Iterator[Callable[..., Peer]]:
    """The body of a `peer` fixture: a factory of peers (arguments: the peer's options), every
    one it started killed at teardown."""
    started: list[Peer] = []

    def start(*args: str) -> Peer:
        p = Peer(tmp_path, *args)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


def stream(p: Peer, lines: list[str], options: GrblOptions | None = None, **kw: Any) -> Any:
    channel = open_serial(p.path)
    try:
        return stream_grbl(lines, channel, options, **kw)
    finally:
        channel.close()


def failure(p: Peer, lines: list[str], options: GrblOptions | None = None) -> StreamError:
    with pytest.raises(StreamError) as info:
        stream(p, lines, options)
    return info.value
