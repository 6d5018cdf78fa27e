"""A GRBL stream that ends early leaves nothing the controller could still run.

GRBL 1.1 keeps its planner queue and serial receive buffer through a feed hold; cycle start
('~') runs them on, spindle first. So every early end (an `error:N`, Ctrl-C, SIGTERM, SIGHUP, a
filter error found past the lookahead) must hold the feed, wait for standstill and soft-reset
(0x18). Each scenario runs `jha feedrate stream` as its own process against the GRBL peer
(tests/peers/grbl_controller.py) with the spindle on and the machine moving, ends it that way,
and then checks on the peer: the hold came while it moved, the reset only once it stood, the
planner and receive buffer are empty, the spindle is off, and a cycle start runs nothing.
The lines still runnable after the stop, measured on the peer, go to the fault summary.

Also the smaller ends: an idle machine is not held for a refused first line, an empty
program touches nothing, a controller stuck in Run without progress is a stall.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.errors import EX_DATAERR
from agent.feedrate.streaming.grbl import GrblOptions
from agent.feedrate.streaming.serial_channel import open_serial
from tests.support.drivers.grbl import Peer, failure, jha, polygon
from tests.support.paths import MACHINES
from tests.support.summary import fault

MACHINE = MACHINES / "farouki2022.yaml"


def has_open(pid: int, path: str) -> bool:
    """Whether process `pid` has `path` open (its file descriptors in /proc)."""
    try:
        return any(os.readlink(fd) == path for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # the process or one of its descriptors went away meanwhile
        return False


def program(n: int, bad_at: int | None = None) -> str:
    """Spindle on, then n - 1 short chords round a circle; `bad_at`: a line the filter
    refuses (an arc radius shorter than half its chord), found only when it is reached."""
    lines = polygon(n)
    lines.insert(1, "M3 S10000\n")
    if bad_at is not None:
        lines[bad_at - 1] = "G2 X10 Y0 R1\n"
    return "".join(lines)


def cycle_start_runs(p: Peer) -> tuple[int, dict[str, Any]]:
    """Send cycle start '~' and poll; the blocks it ran and the machine afterwards."""
    before = p.buffers()
    channel = open_serial(p.path)
    try:
        channel.write(b"~", 1.0)
    finally:
        channel.close()
    after = p.buffers()
    for _ in range(10):  # ten status round trips: anything started would show
        p.settle()
        after = p.buffers()
    moved = after["position_mm"] != before["position_mm"] or after["state"] != "Idle"
    return int(moved) + after["runnable_lines"], after


# How the stream ends: a signal sent mid-cut, or None (the controller's error:N at line 300,
# the filter's error at program line 900, well past the lines already sent).
ENDS: dict[str, signal.Signals | None] = {
    "error:N": None,
    "SIGINT": signal.SIGINT,
    "SIGTERM": signal.SIGTERM,
    "SIGHUP": signal.SIGHUP,
    "filter error past the lookahead": None,
}


@pytest.mark.parametrize("how", list(ENDS))
def test_a_stream_that_ends_early_leaves_nothing_runnable(
    peer: Any, tmp_path: Path, how: str
) -> None:
    sig = ENDS[how]
    scale = {"error:N": "1", "filter error past the lookahead": "5"}.get(how, "1")
    p = peer("--time-scale", scale, *(["--error-at", "300:20"] if how == "error:N" else []))
    src = tmp_path / "part.nc"
    src.write_text(program(3000, bad_at=900 if how.startswith("filter") else None))
    pid_path = tmp_path / "stream.pid"
    filtering = [] if how.startswith("filter") else ["--no-filter"]
    # A program file is run through the filter whole before the first byte, so a filter error
    # is refused up front; from a pipe it cannot be, and the mid-stream stop is what remains.
    piped = how.startswith("filter")
    argv = ["feedrate", "stream", "-" if piped else str(src), "--port", p.path]
    argv += ["--machine", str(MACHINE), *filtering, "--quiet", "--pid-file", str(pid_path)]
    with src.open() as program_in:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", *argv],
            stdin=program_in if piped else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        if sig is not None:
            deadline = time.monotonic() + 60.0
            while proc.poll() is None and time.monotonic() < deadline:
                if has_open(proc.pid, p.path) and p.state().state == "Run":
                    break
                time.sleep(0.05)
            time.sleep(0.5)  # the spindle is on and the planner full: mid-cut
            assert proc.poll() is None, proc.communicate()
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    expected = 128 + sig if sig is not None else EX_DATAERR
    assert proc.returncode == expected, err
    assert "Traceback" not in err and "b'!'" not in err, err
    assert len(err.strip().splitlines()) == 1, err  # one clear line
    assert "feed hold (!) sent; the machine stood still" in err, err
    assert "soft reset (0x18) sent" in err and "cycle start runs nothing" in err, err
    if sig is not None:
        assert f"stream ended by {sig.name}" in err
    if how.startswith("filter"):
        assert "<stdin>:900" in err and "past the lookahead" in err
    assert not pid_path.exists()  # removed on every end, SIGHUP included

    left = p.buffers()
    runnable = left["runnable_lines"]
    assert (left["planner_blocks"], left["rx_bytes"], left["spindle"]) == (0, 0, "off")
    assert left["state"] == "Idle" and left["alarm"] is None  # no ALARM:3: reset at standstill
    ran, after = cycle_start_runs(p)
    assert after["spindle"] == "off" and after["position_mm"] == left["position_mm"]
    stats = p.stats()
    events = stats["realtime"][1:]  # after the handshake's reset
    codes = [e["code"] for e in events]
    assert codes == ["!", "0x18", "~"], events
    hold, reset = events[0], events[1]
    assert hold["state"] == "Run" and hold["runnable_lines"] > 0  # it was moving, lines queued
    assert reset["state"] in ("Hold:0", "Idle") and reset["speed_mm_min"] == 0.0
    assert stats["alarms_sent"] == 0
    fault(f"grbl stream ended by {how}", records_lost=runnable + ran)
    assert runnable + ran == 0


# ------------------------------------------------------------------------------ smaller ends


def test_a_refused_first_line_leaves_an_idle_machine_untouched(peer: Any) -> None:
    p = peer("--time-scale", "100")
    exc = failure(p, ["G1 X1 F100 ~\n", *polygon(20)])
    assert exc.kind == "rejected" and exc.line_no == 1 and exc.sent == 0
    assert "nothing was sent, so nothing was held or reset" in str(exc)
    assert p.state().state == "Idle"
    stats = p.stats()
    assert stats["bytes_received"] == 0 and stats["realtime"] == []  # not even the handshake


def test_an_empty_or_comment_only_program_touches_nothing(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = peer("--time-scale", "100")
    exc = failure(p, ["(only a comment)\n", "\n", "; and another\n"])  # as from a pipe
    assert exc.kind == "empty" and exc.exit_code == EX_DATAERR and exc.sent == 0
    for text in ("", "(header)\n\n; nothing else\n"):
        src = tmp_path / "empty.nc"
        src.write_text(text)
        run = ("feedrate", "stream", str(src), "--port", p.path, "--machine", str(MACHINE))
        assert jha(*run, "--no-filter", "--quiet") == EX_DATAERR
        err = capsys.readouterr().err
        assert "no G-code line to send" in err and "the controller was not touched" in err
    stats = p.stats()
    assert stats["bytes_received"] == 0 and stats["resets"] == 0


def test_a_controller_stuck_in_run_without_progress_is_a_stall(peer: Any) -> None:
    """'?' keeps being answered, but no line is acknowledged and the position stands: the
    stall timer counts progress, not replies."""
    p = peer("--time-scale", "1", "--stuck-at", "10")
    options = GrblOptions(stall_timeout_s=0.5, hold_timeout_s=0.3)
    exc = failure(p, polygon(400), options)
    assert exc.kind == "stalled" and "no line acknowledged and no motion for 0.5 s" in str(exc)
    assert "it reports Run" in str(exc)
    assert p.buffers()["runnable_lines"] == 0  # reset after the hold timed out
    stats = p.stats()
    assert stats["status_reports"] > 2  # it kept answering '?' all along
