"""The G-code stream's guards before and during motion (docs/safety.md §4, gaps G1, G3, G13),
against the GRBL-protocol peer (tests/peers/grbl_controller.py) on a pseudo-terminal.

Before the first byte: a program file is checked whole against the controller's dialect, and a
DNC drip feed is refused to a controller without XON/XOFF (GRBL).

G1: a GRBL stream asks '?' after the handshake and starts only on an Idle controller; a DNC
stream starts only with the operator's --confirm-ready. G13: a running stream is held and
resumed from another terminal (`jha feedrate hold/resume`, SIGUSR1/SIGUSR2), and a DNC stream
through the same control with the controller's own hold code (G3).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.errors import EX_CONFIG, EX_DATAERR, EX_OK, EX_UNAVAILABLE
from agent.feedrate.streaming.dnc import DncOptions, stream_dnc
from agent.feedrate.streaming.grbl import GrblOptions
from agent.feedrate.streaming.grbl_protocol import prepare_line
from agent.feedrate.streaming.serial_channel import open_serial
from agent.feedrate.streaming.session import (
    EX_TEMPFAIL,
    StreamControl,
    StreamError,
    StreamResult,
)
from tests.support.drivers.grbl import GRBL_MACHINE, Peer, failure, jha, polygon, stream, zigzag
from tests.support.paths import MACHINES

MACHINE = MACHINES / "farouki2022.yaml"
MOVE = b"G21G90G1X100F600\n"  # 10 s of motion at 600 mm/min on the peer's real-time clock


def prepare(p: Peer, data: bytes, hold: bool = False) -> None:
    """Another program's lines on the port (its own connection, closed again), each answered
    before the stream starts; then a feed hold '!' when `hold`."""
    channel = open_serial(p.path)
    try:
        buf = b""
        if data:
            channel.write(data, 1.0)
        deadline = time.monotonic() + 2.0
        while buf.count(b"ok") < data.count(b"\n") and time.monotonic() < deadline:
            buf += channel.read(0.05)
        if hold:
            channel.write(b"!", 1.0)
    finally:
        channel.close()
    if hold:  # a feed hold decelerates first (Hold:1), then stands (Hold:0)
        until(lambda: p.state().substate == 0, 2.0, "the hold to complete")


def until(check: Callable[[], Any], timeout_s: float = 5.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
    return value


# ------------------------------------------------------------------------------ G1: GRBL


@pytest.mark.parametrize(
    ("peer_args", "before", "handshake", "state", "why"),
    [
        (["--boot-alarm"], b"", "reset", "Alarm", "[MSG:'$H'|'$X' to unlock]"),
        (["--door-open"], b"", "reset", "Door:1", "the safety door is open"),
        ([], MOVE, "reset", "Alarm", "ALARM:3 (reset while in motion)"),
        ([], MOVE, "none", "Run", "the machine is moving"),
        ([], MOVE + b"!", "none", "Hold:0", "a feed hold is in force"),
        ([], b"$J=G91X50F600\n", "none", "Jog", "the machine is jogging"),
        ([], b"$C\n", "none", "Check", "check mode ($C)"),
    ],
    ids=[
        "alarm_at_power_up",
        "door_open",
        "reset_mid_motion",
        "running",
        "held",
        "jogging",
        "check_mode",
    ],
)
def test_a_grbl_stream_starts_only_on_an_idle_controller(
    peer: Any, peer_args: list[str], before: bytes, handshake: Any, state: str, why: str
) -> None:
    p = peer("--time-scale", "1", *peer_args)
    prepare(p, before.rstrip(b"!"), hold=before.endswith(b"!"))
    exc = failure(p, polygon(50), GrblOptions(handshake=handshake))
    assert exc.kind == "not_ready" and exc.exit_code == EX_TEMPFAIL
    assert f"the controller reports {state}, not Idle" in str(exc) and why in str(exc)
    assert "Refusing to stream; nothing was sent" in str(exc)
    assert exc.sent == 0 and exc.line_no is None
    stats = p.stats()
    assert stats["lines_received"] == before.count(b"\n")  # not one line of the program


def test_a_controller_that_answers_no_status_is_refused() -> None:
    import os
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        channel = open_serial(os.ttyname(slave))
        started = time.monotonic()
        try:
            from agent.feedrate.streaming.grbl import stream_grbl
            from agent.feedrate.streaming.session import StreamError

            with pytest.raises(StreamError) as info:
                stream_grbl(
                    ["G1 X1 F100\n"], channel, GrblOptions(handshake="none", status_timeout_s=0.2)
                )
        finally:
            channel.close()
        assert time.monotonic() - started >= 0.2  # it waited the timeout it was given
        assert info.value.kind == "not_ready" and "no status report within 0.2 s" in str(info.value)
        assert os.read(master, 100) == b"?"  # the question, and no line
    finally:
        os.close(master)
        os.close(slave)


def test_check_mode_can_be_allowed_and_moves_nothing(peer: Any) -> None:
    """start_states is the library's override: a program checked in GRBL's check mode."""
    p = peer("--time-scale", "1")
    prepare(p, b"$C\n")
    result = stream(p, polygon(200), GrblOptions(handshake="none", start_states=("Idle", "Check")))
    assert result.lines_acked == 200 and result.status is not None
    stats = p.stats()
    assert stats["check_mode"] and stats["blocks_executed"] == 0
    assert stats["position_mm"] == [0.0, 0.0, 0.0]


# ------------------------------------------------------------------------------ G1: DNC


def test_a_dnc_stream_needs_the_operators_confirmation(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A DNC control with XON/XOFF (dialect generic); GRBL itself is refused a drip feed.
    machine = tmp_path / "dnc.yaml"
    machine.write_text(GRBL_MACHINE.replace("dialect: grbl", "dialect: generic"))
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(10))
    run = (
        "feedrate",
        "stream",
        str(src),
        "--machine",
        str(machine),
        "--protocol",
        "dnc",
        "--xon-xoff",
        "--quiet",
        "--no-filter",
    )
    p = peer("--dnc", "--time-scale", "1000")
    assert jha(*run, "--port", p.path) == EX_TEMPFAIL
    err = capsys.readouterr().err
    assert "the controller answers no status query" in err and "--confirm-ready" in err
    assert "door closed" in err and "DNC (remote, tape) mode" in err
    assert p.stats()["bytes_received"] == 0  # the port was not even opened
    p = peer("--dnc", "--time-scale", "1000")
    assert jha(*run, "--port", p.path, "--confirm-ready") == EX_OK
    assert "10 lines acknowledged of 10 sent" in capsys.readouterr().err
    assert p.state().state in ("Run", "Idle")  # the peer has taken in every byte sent
    assert p.stats()["lines_received"] == 10


# ------------------------------------------------------------------------------ G13


def test_hold_and_resume_a_running_stream_from_another_terminal(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = peer("--time-scale", "20")  # 1,500 chords of 12.6 ms: ~0.95 s of wall-clock motion
    program = tmp_path / "circle.nc"
    program.write_text("".join(polygon(1500)))
    pid_path = tmp_path / "stream.pid"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "feedrate",
            "stream",
            str(program),
            "--port",
            p.path,
            "--machine",
            str(MACHINE),
            "--no-filter",
            "--pid-file",
            str(pid_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until(lambda: p.state().state == "Run" or proc.poll() is not None, 30.0, "motion")
        assert proc.poll() is None and pid_path.read_text() == f"{proc.pid}\n"
        asked = time.monotonic()
        assert jha("feedrate", "hold", "--pid-file", str(pid_path)) == EX_OK
        held = until(
            lambda: (s := p.state()).state == "Hold" and s.substate == 0 and s, 2.0, "the hold"
        )
        latency_s = time.monotonic() - asked
        time.sleep(0.3)
        still = p.state()
        assert still.state == "Hold" and still.machine_mm == held.machine_mm  # it stands
        assert proc.poll() is None  # a hold pauses the stream, it does not end it
        assert jha("feedrate", "resume", "--pid-file", str(pid_path)) == EX_OK
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == EX_OK, err
    assert latency_s < 1.0
    assert "1500 lines acknowledged of 1500 sent" in err and "HELD (jha feedrate resume)" in err
    assert not pid_path.exists()  # removed with the stream
    out = capsys.readouterr().out
    assert f"feed hold asked of jha feedrate stream, pid {proc.pid}" in out
    stats = p.stats()
    assert stats["lines_received"] == stats["oks_sent"] == 1500
    assert stats["rx_overflow_bytes"] == 0 and not stats["held"]


@pytest.mark.security("jha feedrate hold/resume signal only a running jha feedrate stream")
def test_hold_signals_nothing_but_a_running_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        stale = tmp_path / "stale.pid"
        stale.write_text(f"{sleeper.pid}\n")
        assert jha("feedrate", "hold", "--pid-file", str(stale)) == EX_UNAVAILABLE
        err = capsys.readouterr().err
        assert "is not a `jha feedrate stream`" in err and "nothing was signalled" in err
        time.sleep(0.1)
        assert sleeper.poll() is None  # SIGUSR1 would have ended it
    finally:
        sleeper.kill()
        sleeper.wait()
    assert jha("feedrate", "resume", "--pid", str(sleeper.pid)) == EX_UNAVAILABLE
    assert "nothing was signalled" in capsys.readouterr().err
    assert jha("feedrate", "hold", "--pid-file", str(tmp_path / "none.pid")) == EX_UNAVAILABLE
    assert "cannot read the streamer's pid file" in capsys.readouterr().err


def test_a_dnc_stream_holds_and_resumes_with_the_controllers_codes(peer: Any) -> None:
    """G3 and G13 for DNC: the hold asked through the control sends the configured hold code
    and no further byte; the resume sends the cycle-start code and the stream goes on."""
    p = peer("--dnc", "--time-scale", "5", "--rx-buffer", "256")
    control = StreamControl()
    outcome: dict[str, Any] = {}

    def run() -> None:
        channel = open_serial(p.path)
        try:
            outcome["result"] = stream_dnc(
                polygon(300),
                channel,
                DncOptions(hold_code=b"!", resume_code=b"~", wait_idle=True),
                control=control,
            )
        except Exception as exc:  # reported by the assertions below
            outcome["error"] = exc
        finally:
            channel.close()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        until(lambda: p.state().state == "Run", 10.0, "motion")
        control.hold()  # as the CLI's SIGUSR1 handler does
        held = until(
            lambda: (s := p.state()).state == "Hold" and s.substate == 0 and s, 2.0, "the hold"
        )
        time.sleep(0.3)
        still = p.state()
        assert still.state == "Hold" and still.machine_mm == held.machine_mm
        assert thread.is_alive()
    finally:
        control.resume()
        thread.join(20)
    result: StreamResult = outcome.get("result")  # type: ignore[assignment]
    assert result is not None, outcome.get("error")
    assert result.lines_sent == 300 and result.holds == 1 and not result.held_at_end
    assert result.status is not None and result.status.state == "Idle"
    stats = p.stats()
    assert stats["lines_received"] == 300 and stats["rx_overflow_bytes"] == 0
    assert not stats["held"] and stats["blocks_executed"] == 299


def test_a_remote_resume_releases_only_a_hold_it_asked_for(peer: Any) -> None:
    """The safety door opened and closed mid-stream leaves GRBL held (Door:0) until cycle
    start: a remote resume must not restart that motion; after a remote hold it may."""
    p = peer("--time-scale", "5")
    control = StreamControl()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = stream(p, polygon(400), control=control)
        except Exception as exc:  # reported by the assertions below
            outcome["error"] = exc

    def door(action: str) -> None:
        assert p.proc.stdin is not None
        p.proc.stdin.write(f"door {action}\n")
        p.proc.stdin.flush()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        until(lambda: p.state().state == "Run", 10.0, "motion")
        door("open")
        door("close")
        held = until(
            lambda: (s := p.state()).state == "Door" and s.substate == 0 and s, 2.0, "the door hold"
        )
        assert held.substate == 0  # closed, waiting for cycle start
        control.resume()  # nothing asked from here: nothing is released from here
        time.sleep(0.3)
        still = p.state()
        assert (still.state, still.substate, still.machine_mm) == ("Door", 0, held.machine_mm)
        control.hold()
        control.resume()
        until(lambda: p.state().state in ("Run", "Idle"), 2.0, "the resume")
    finally:
        control.resume()
        thread.join(20)
    result: StreamResult = outcome.get("result")  # type: ignore[assignment]
    assert result is not None, outcome.get("error")
    assert result.lines_acked == 400 and result.holds == 1
    stats = p.stats()
    assert stats["oks_sent"] == 400 and not stats["held"] and not stats["door"]


# ------------------------------------------------------------------------- before the first byte


def test_a_program_file_is_checked_whole_before_the_first_byte(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = polygon(40)
    lines[4] = (
        "G1 X1.0000000000 Y2.0000000000 Z3.0000000000 (comments do not count) "
        "X1.0000000000 Y2.0000000000 Z3.0000000000 F3000\n"
    )
    chars = len(prepare_line(lines[4]))  # as GRBL's line buffer counts: no spaces, comments
    lines[7] = "T2 M6\n"  # GRBL: error:20 (no tool changer)
    lines[9] = "%\n"  # GRBL: error:1
    src = tmp_path / "part.nc"
    src.write_text("".join(lines))
    p = peer("--time-scale", "100")
    run = ("feedrate", "stream", str(src), "--port", p.path, "--machine", str(MACHINE))
    assert jha(*run, "--no-filter", "--quiet") == EX_DATAERR
    err = capsys.readouterr().err
    assert "refused before streaming, nothing was sent: 3 line(s)" in err
    assert chars > 79 and f"{src}:5: {chars} characters, grbl takes at most 79" in err
    assert f"{src}:8: M6 not accepted by grbl" in err and f"{src}:10: '%' is not a grbl" in err
    assert p.stats()["bytes_received"] == 0  # the port was not even opened


@pytest.mark.parametrize("refused", ["G28.1", "G30.1", "G38.2 Z-5 F100", "G53 G0 X0"])
def test_what_the_filter_refuses_is_refused_before_the_first_byte(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], refused: str
) -> None:
    # Issue 28: these passed the up-front check and were refused when the stream reached them
    # ("program refused mid-stream"), the part left half cut.
    lines = polygon(400)
    lines[300] = refused + "\n"
    src = tmp_path / "part.nc"
    src.write_text("".join(lines))
    p = peer("--time-scale", "100")
    run = ("feedrate", "stream", str(src), "--port", p.path, "--machine", str(MACHINE))
    assert jha(*run, "--quiet") == EX_DATAERR
    err = capsys.readouterr().err
    assert "refused before streaming, nothing was sent: the filter refuses the program" in err
    assert f"{src}:301" in err, err
    assert p.stats()["bytes_received"] == 0  # the port was not even opened


def test_an_error_names_the_program_line_that_caused_it(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = polygon(60)
    lines[2] = "G1 X50 Y1 F0\n"  # taken by the dialect, refused by GRBL: error:22, no feed
    src = tmp_path / "part.nc"
    src.write_text("".join(lines))
    p = peer("--time-scale", "1")
    run = ("feedrate", "stream", str(src), "--port", p.path, "--machine", str(MACHINE))
    assert jha(*run, "--no-filter", "--quiet") == EX_DATAERR
    err = capsys.readouterr().err
    assert f"{src}:3 " in err and "error:22" in err, err
    sent = int(err.split("stream stopped after ")[1].split()[0])
    assert sent > 3  # later lines were in flight: the oldest unanswered one is named
    assert p.stats()["lines_received"] >= 3


def test_dnc_is_refused_to_a_controller_without_flow_control(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a drip feed does to GRBL, which paces none: its 128-byte receive buffer overruns
    # (the bytes it drops corrupt lines: error:N, when a mangled line is still parsed in time).
    p = peer("--time-scale", "1")
    channel = open_serial(p.path)
    try:
        with contextlib.suppress(StreamError):
            stream_dnc(polygon(400), channel, DncOptions(line_rate_bytes_s=None))
    finally:
        channel.close()
    assert p.stats()["rx_overflow_bytes"] > 0
    machine = tmp_path / "grbl.yaml"
    machine.write_text(GRBL_MACHINE)
    src = tmp_path / "part.nc"
    src.write_text(zigzag(10))
    p = peer("--time-scale", "100")
    run = ("feedrate", "stream", str(src), "--port", p.path, "--machine", str(machine))
    assert jha(*run, "--protocol", "dnc", "--confirm-ready", "--quiet") == EX_CONFIG
    err = capsys.readouterr().err
    assert "--protocol dnc: expected --xon-xoff for protocol dnc" in err
    assert "GRBL 1.1 has no XON/XOFF: use protocol grbl" in err
    # The machine file's dialect says nothing about the controller's pacing: the shipped one
    # (dialect generic) is refused the same (issue 28's field report).
    shipped = Path(__file__).parents[2] / "config" / "machines" / "farouki2022.yaml"
    run_shipped = (*run[:-1], str(shipped))
    assert jha(*run_shipped, "--protocol", "dnc", "--confirm-ready", "--quiet") == EX_CONFIG
    assert "expected --xon-xoff" in capsys.readouterr().err
    config = tmp_path / "cnc.yaml"
    config.write_text(
        "controllers:\n  - name: mill\n    driver: grbl\n    settings:\n"
        f"      port: {p.path}\n      protocol: dnc\n      machine: {machine}\n    joints: []\n"
    )
    stream_cfg = ("feedrate", "stream", str(src), "--config", str(config), "--controller", "mill")
    assert jha(*stream_cfg, "--confirm-ready", "--quiet") == EX_CONFIG
    assert "controllers[0].settings.protocol: expected xon_xoff: true" in (capsys.readouterr().err)
    assert p.stats()["bytes_received"] == 0


def test_the_example_config_suggests_dnc_only_with_flow_control() -> None:
    from agent.cli.feedrate.stream import configured_target
    from agent.config.load import load_config

    example = Path(__file__).parents[2] / "config" / "cnc_example.yaml"
    for controller in load_config(example).controllers:  # refuses dnc without xon_xoff
        configured_target(example, controller.name)
        if controller.settings.protocol == "dnc":
            assert controller.settings.xon_xoff
    assert "GRBL" not in example.read_text().split("protocol: dnc")[1]
