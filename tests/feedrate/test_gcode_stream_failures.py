"""Streaming G-code when something goes wrong: controller errors and alarms named with their
program line, stalls, disconnects, refused lines, answers nobody asked for, DNC errors, a port
that cannot be opened; the machine is held and, on GRBL, reset once it stands, so nothing is left
to run (a stream ended by a signal or a filter error: test_gcode_stream_end.py).

Every test with a `peer` starts the GRBL-protocol peer (tests/peers/grbl_controller.py) as its own
process on the master side of a pty pair and streams to the slave side through pyserial, as to a
real controller; the peer's execution clock runs accelerated (--time-scale) and it writes what it
counted (receive-buffer high water, overflows, lines read, answers sent) to a JSON stats file
when it exits.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.errors import EX_DATAERR, EX_IOERR
from agent.feedrate.streaming.dnc import DncOptions, stream_dnc
from agent.feedrate.streaming.grbl import GrblOptions, stream_grbl
from agent.feedrate.streaming.grbl_protocol import prepare_line
from agent.feedrate.streaming.serial_channel import FdChannel, open_serial
from agent.feedrate.streaming.session import StreamError
from tests.support.drivers.grbl import failure, polygon, stream

# ------------------------------------------------------------------------------ failures


def test_injected_error_names_its_line_and_leaves_nothing_to_run(peer: Any) -> None:
    p = peer("--time-scale", "1000", "--error-at", "500:20")
    exc = failure(p, polygon(2000))
    assert p.settle().state == "Idle"  # held, then reset once it stood
    assert p.buffers()["runnable_lines"] == 0
    assert "feed hold (!) sent" in str(exc) and "soft reset (0x18) sent" in str(exc)
    stats = p.stats()
    assert exc.kind == "error" and exc.code == 20 and exc.line_no == 500
    assert exc.text == prepare_line(polygon(2000)[499])
    assert "line 500" in str(exc) and "error:20 unsupported or invalid g-code" in str(exc)
    assert exc.exit_code == EX_DATAERR
    assert exc.acked == 500  # 499 ok + the error, each line answered once
    assert exc.sent < 520  # the stream stopped: no line after the budget that was in flight
    assert not stats["held"] and stats["lines_received"] == exc.sent
    assert [e["code"] for e in stats["realtime"][1:]] == ["!", "0x18"]  # after the handshake


def test_a_bad_line_gets_grbl_error_codes(peer: Any) -> None:
    for bad, code in (
        ("G1 X1 A5", 20),
        ("G1 X", 2),
        ("G1 X1.2.3", 1),
        ("G1 X1 X2", 25),
        ("G5 X1", 20),
        ("G0 G1 X1", 21),
        ("G4", 28),
        ("G2 X1", 35),
        ("1X", 1),
    ):
        p = peer("--time-scale", "1000")
        exc = failure(p, ["G21 G90 F600\n", "G1 X1\n", bad + "\n", "G1 X0\n"])
        assert (exc.kind, exc.code, exc.line_no) == ("error", code, 3), bad
        p.stats()


def test_stop_on_error_false_collects_errors_and_continues(peer: Any) -> None:
    p = peer("--time-scale", "1000")
    lines = polygon(200)
    lines[50] = "G1 X1 A1\n"
    lines[120] = "G17 G18\n"
    result = stream(p, lines, GrblOptions(stop_on_error=False))
    assert result.lines_acked == 200
    assert result.errors == ((51, 20), (121, 21))
    assert p.stats()["errors_sent"] == 2


def test_injected_alarm_is_fatal_and_names_the_line(peer: Any) -> None:
    p = peer("--time-scale", "1000", "--alarm-at", "300:1")
    exc = failure(p, polygon(1000))
    assert exc.kind == "alarm" and exc.code == 1 and exc.line_no == 300
    assert "ALARM:1 hard limit triggered" in str(exc)
    assert p.stats()["alarm"] == "critical"


def test_soft_limit_breach_raises_alarm_2_at_that_line(peer: Any) -> None:
    p = peer("--time-scale", "1000", "--soft-limits", "100,100,50")
    lines = [*polygon(400), "G1 X150 Y0\n", *polygon(50)[1:]]
    exc = failure(p, lines)
    assert exc.kind == "alarm" and exc.code == 2 and exc.line_no == 401
    assert exc.text == "G1X150Y0" and "soft limit" in str(exc)


def test_disconnect_is_reported_with_the_line(peer: Any) -> None:
    p = peer("--time-scale", "1000", "--disconnect-at", "300")
    exc = failure(p, polygon(1000))
    assert exc.kind == "disconnected" and exc.line_no == 300
    assert "vanished" in str(exc) and exc.exit_code == EX_IOERR
    assert exc.acked == 299


def test_stall_is_detected_by_timeout(peer: Any) -> None:
    p = peer("--time-scale", "1000", "--stall-at", "300")
    started = time.monotonic()
    options = GrblOptions(stall_timeout_s=0.5, hold_timeout_s=0.3, startup_timeout_s=1.0)
    exc = failure(p, polygon(1000), options)
    assert time.monotonic() - started >= 0.5
    assert exc.kind == "stalled" and exc.line_no == 300 and exc.acked == 299
    assert "feed hold (!) sent; no standstill reported within 0.3 s" in str(exc)
    # The silent controller's receive interrupt took the hold and the reset: nothing is left.
    assert p.state().state == "Idle" and p.buffers()["runnable_lines"] == 0
    stats = p.stats()
    assert stats["stalled"] and not stats["held"]
    assert [e["code"] for e in stats["realtime"][1:]] == ["!", "0x18"]  # after the handshake


def test_idle_with_lines_unanswered_is_a_stall(peer: Any) -> None:
    # The field report of issue 28: GRBL sat Idle with moves still queued for 167 s, and the
    # streamer took Idle for progress. The peer stops reading at line 300, runs its planner out
    # and answers '?' Idle.
    p = peer("--time-scale", "1000", "--deaf-at", "300")
    options = GrblOptions(stall_timeout_s=0.5, hold_timeout_s=0.3, startup_timeout_s=1.0)
    exc = failure(p, polygon(1000), options)
    assert exc.kind == "stalled" and exc.line_no == 300 and exc.acked == 299
    assert "it reports Idle at MPos" in str(exc) and "line(s) unanswered" in str(exc)
    p.settle()
    assert p.buffers()["runnable_lines"] == 0  # reset: the unread lines are gone
    assert [e["code"] for e in p.stats()["realtime"][1:]] == ["!", "0x18"]


def test_a_dwell_is_quiet_time_the_program_asked_for(peer: Any) -> None:
    # G4 P2 at 10x real time is 0.2 s of Idle with the next lines unanswered (the peer, like
    # GRBL, reports Idle while it dwells); the stall timeout is shorter, the dwell owed extends it.
    p = peer("--time-scale", "10")
    lines = [*polygon(20), "G4 P2\n", *polygon(20)[1:]]
    options = GrblOptions(stall_timeout_s=0.15, startup_timeout_s=1.0, wait_idle=True)
    result = stream(p, lines, options)
    assert result.lines_acked == len(lines)


def test_a_line_with_a_realtime_character_is_refused_before_it_is_sent(peer: Any) -> None:
    p = peer("--time-scale", "1000")
    lines = [*polygon(20), "G1 X1 (what?)\n", "G1 X2 ~\n", *polygon(20)[1:]]
    exc = failure(p, lines)
    assert exc.kind == "rejected" and exc.line_no == 22 and "'~'" in str(exc)
    assert exc.exit_code == EX_DATAERR
    assert exc.sent == 21  # the lines before the refused one went ('?' of the comment stripped)
    p.settle()
    assert p.buffers()["runnable_lines"] == 0  # held, then reset: the 21 lines are gone
    stats = p.stats()
    assert [e["code"] for e in stats["realtime"][1:]] == ["!", "0x18"]  # after the handshake
    assert stats["lines_received"] <= 21 and stats["rx_overflow_bytes"] == 0


def test_no_banner_is_a_handshake_failure() -> None:
    a, b = socket.socketpair()
    try:
        channel = FdChannel(a.fileno(), "socketpair")
        with pytest.raises(StreamError) as info:
            stream_grbl(["G0 X1\n"], channel, GrblOptions(startup_timeout_s=0.2))
        assert info.value.kind == "handshake" and info.value.line_no is None
        assert b.recv(16) == b"\x18"
    finally:
        a.close()
        b.close()


def test_an_answer_nobody_asked_for_is_a_protocol_error() -> None:
    """Any byte stream with a descriptor works: here a socket pair and a scripted controller
    that answers one line twice (and speaks no status reports, so none is asked for)."""
    a, b = socket.socketpair()
    received = bytearray()

    def controller() -> None:
        buf = b""
        count = 0
        while True:
            data = b.recv(4096)
            if not data:
                return
            received.extend(data)
            if count >= 3:
                continue
            buf += data
            while b"\n" in buf:
                _, buf = buf.split(b"\n", 1)
                count += 1
                b.sendall(b"ok\r\nok\r\n" if count == 2 else b"ok\r\n")

    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    try:
        channel = FdChannel(a.fileno(), "socketpair")
        with pytest.raises(StreamError) as info:
            stream_grbl(
                ["G0 X1\n", "G0 X2\n", "G0 X3\n"],
                channel,
                GrblOptions(
                    handshake="none",
                    max_lines_in_flight=1,
                    start_states=None,
                    hold_timeout_s=0.2,
                    startup_timeout_s=0.2,
                ),
            )
        assert info.value.kind == "protocol" and "'ok' with no line" in str(info.value)
        assert "feed hold (!) sent; no standstill reported" in str(info.value)
    finally:
        a.close()  # the controller thread sees the end of the stream and returns
        thread.join(2)
        b.close()
    # The hold, status queries while it stopped (unanswered here), then the reset.
    assert received.endswith(b"\x18") and b"!" in received


def test_an_answer_nobody_asked_for_holds_the_peer(peer: Any) -> None:
    # Character counting cannot tell a surplus `ok` from the answer to a later line while
    # several are in flight; one line at a time it can.
    p = peer("--time-scale", "20", "--extra-ok-at", "40")
    exc = failure(p, polygon(400), GrblOptions(max_lines_in_flight=1))
    assert exc.kind == "protocol" and "'ok' with no line awaiting" in str(exc)
    assert exc.exit_code == EX_IOERR and exc.acked == exc.sent
    assert p.settle().state == "Idle" and p.buffers()["runnable_lines"] == 0
    stats = p.stats()
    assert not stats["held"] and stats["lines_received"] == exc.sent < 400


# ------------------------------------------------------------------------------ DNC


def test_a_dnc_error_after_the_last_byte_is_not_called_success(peer: Any) -> None:
    # Two planner blocks of half a second each: the controller parses line 5 only once the
    # first move is done, long after the sender wrote the whole (short) program. Returning at
    # the last byte called that program done while the controller refused its fifth line.
    p = peer("--dnc", "--planner-blocks", "2", "--error-at", "5:33")
    channel = open_serial(p.path)
    lines = ["G21 G91\n", *["G1 X5 F600\n"] * 5]
    try:
        with pytest.raises(StreamError) as info:
            stream_dnc(lines, channel, DncOptions(hold_code=b"!"))
    finally:
        channel.close()
    assert info.value.kind == "error" and info.value.code == 33
    assert "stream stopped after 6 lines sent" in str(info.value)  # every line, then the error
    assert p.state().state == "Hold"
    stats = p.stats()
    assert stats["lines_received"] >= 5 and stats["blocks_executed"] >= 1


@pytest.mark.parametrize("hold_code", [b"!", None], ids=["hold_code", "no_hold_code"])
def test_dnc_error_and_stall(peer: Any, hold_code: bytes | None) -> None:
    # The peer in DNC mode is GRBL with XON/XOFF: its feed hold '!' is a real-time code. A
    # control without one (hold_code None) keeps running what it holds, and the error says so.
    p = peer("--dnc", "--time-scale", "20", "--error-at", "40:33")
    channel = open_serial(p.path)
    try:
        with pytest.raises(StreamError) as info:
            stream_dnc(polygon(300), channel, DncOptions(hold_code=hold_code))
    finally:
        channel.close()
    assert info.value.kind == "error" and info.value.code == 33
    assert info.value.line_no is not None and info.value.line_no >= 40
    held = "feed hold (!) sent" if hold_code else "no feed hold sent: the controller's settings"
    assert held in str(info.value)
    assert (p.state().state == "Hold") is (hold_code is not None)
    assert p.stats()["held"] is (hold_code is not None)
    # A DNC controller that stops reading is only noticed when it must answer: the final
    # wait for Idle (or, on a long program, the port's buffer filling up).
    p = peer("--dnc", "--time-scale", "1000", "--stall-at", "30")
    channel = open_serial(p.path)
    try:
        with pytest.raises(StreamError) as info:
            stream_dnc(
                polygon(200),
                channel,
                DncOptions(stall_timeout_s=0.5, wait_idle=True, hold_code=hold_code),
            )
    finally:
        channel.close()
    assert info.value.kind == "stalled" and held in str(info.value)
    assert (p.state().state == "Hold") is (hold_code is not None)
    stats = p.stats()
    assert stats["stalled"] and stats["held"] is (hold_code is not None)


# ------------------------------------------------------------------------------ the port


def test_a_port_that_cannot_be_opened_stops_the_stream_before_the_first_line(
    tmp_path: Path,
) -> None:
    from agent.feedrate.streaming.grbl import stream_to_port
    from agent.feedrate.streaming.serial_channel import ChannelLost

    missing = str(tmp_path / "ttyNONE")
    with pytest.raises(ChannelLost, match="cannot open serial port"):
        open_serial(missing)
    with pytest.raises(StreamError, match="before the first line: cannot open serial port") as info:
        stream_to_port(["G1 X1 F100\n"], missing)
    assert info.value.kind == "disconnected" and info.value.sent == 0
