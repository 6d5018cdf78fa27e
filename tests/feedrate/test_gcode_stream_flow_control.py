"""Streaming G-code without overrunning the controller: GRBL's character-counting budget (and
the send-response baseline), DNC drip feed under XON/XOFF, and the protocol's pure parts.

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
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.feedrate.streaming.dnc import DncOptions, stream_dnc
from agent.feedrate.streaming.grbl import GrblOptions, stream_grbl
from agent.feedrate.streaming.grbl_protocol import parse_status, prepare_line
from agent.feedrate.streaming.serial_channel import FdChannel, open_serial
from agent.feedrate.streaming.session import StreamError, StreamProgress
from tests.support.drivers.grbl import polygon, stream

LATE_ATTEMPTS = 3

# ------------------------------------------------------------------------------ the acceptance


def test_ten_thousand_lines_each_acknowledged_once_within_the_128_byte_budget(peer: Any) -> None:
    p = peer("--time-scale", "1000")
    seen: list[StreamProgress] = []
    result = stream(p, polygon(10_000), progress=seen.append, reversals_modulated=lambda: 7)
    stats = p.stats()
    assert result.lines_sent == result.lines_acked == 10_000
    assert stats["lines_received"] == stats["oks_sent"] == 10_000
    assert stats["errors_sent"] == 0
    # The peer counted its receive ring: full to the byte, never beyond.
    assert stats["rx_overflow_bytes"] == 0
    assert stats["rx_max_bytes"] == 128
    assert result.max_bytes_in_flight == 128
    assert result.banner is not None and result.banner.startswith("Grbl 1.1h")
    assert stats["resets"] == 1  # the handshake's soft reset, nothing else
    sent = [s.lines_sent for s in seen]
    assert sent == sorted(sent) and seen[-1].lines_acked == 10_000
    assert seen[-1].reversals_modulated == 7
    assert all(s.bytes_in_flight <= 128 for s in seen)


def test_a_slow_machine_holds_the_parser_and_the_budget_still_holds(peer: Any) -> None:
    # 0.63 mm chords at 50 mm/s, clock 20x: the planner fills and the parser waits on it.
    p = peer("--time-scale", "20")
    seen: list[StreamProgress] = []
    result = stream(
        p,
        polygon(400),
        GrblOptions(status_interval_s=0.02, progress_interval_s=0.0),
        progress=seen.append,
    )
    stats = p.stats()
    assert result.lines_acked == stats["oks_sent"] == 400
    assert stats["planner_full_waits"] > 0 and stats["planner_max_blocks"] == 15
    assert stats["rx_max_bytes"] <= 128 and stats["rx_overflow_bytes"] == 0
    assert any(s.status is not None and s.status.state == "Run" for s in seen)
    assert any(s.status is not None and s.status.planner_free == 0 for s in seen)
    assert stats["status_reports"] >= 5


def test_ok_means_planned_not_executed(peer: Any) -> None:
    # The last line is a 100 mm move at 10 mm/s (0.5 s of wall clock at 20x): its 'ok' comes
    # when it enters the planner, so the stream ends while the machine still runs.
    p = peer("--time-scale", "20")
    result = stream(p, [*polygon(30), "G1 X-50 Y0 F600\n"])
    status = p.settle()
    assert result.lines_acked == 31
    assert status.state == "Run" and status.planner_free is not None
    assert status.planner_free < 15
    p.stats()


def test_wait_idle_returns_when_the_machine_has_run_the_program_out(peer: Any) -> None:
    p = peer("--time-scale", "20")
    result = stream(p, polygon(100), GrblOptions(wait_idle=True))
    assert result.status is not None and result.status.state == "Idle"
    assert result.status.planner_free == 15
    assert p.stats()["blocks_executed"] == 99


def test_a_sender_that_ignores_the_budget_overflows_the_peer(peer: Any) -> None:
    """The peer's accounting is real: writing the program at once is caught and reported."""
    p = peer("--time-scale", "1000")
    channel = open_serial(p.path)
    try:
        channel.write("".join(polygon(300)).encode(), 2.0)
        time.sleep(0.5)
    finally:
        channel.close()
    stats = p.stats()
    assert stats["rx_overflow_bytes"] > 0
    assert stats["rx_max_bytes"] == 128


def test_send_response_baseline_keeps_one_line_in_flight(peer: Any) -> None:
    p = peer("--time-scale", "1000")
    result = stream(p, polygon(500), GrblOptions(max_lines_in_flight=1))
    stats = p.stats()
    assert result.protocol == "send-response" and result.lines_acked == 500
    assert stats["rx_max_bytes"] <= max(len(prepare_line(x)) + 1 for x in polygon(500))
    assert stats["oks_sent"] == 500


# ------------------------------------------------------------------------------ DNC


def test_dnc_drip_feed_obeys_xon_xoff(peer: Any) -> None:
    # Clock 5x: ~320 blocks/s, slower than the 115200-baud line (~600 lines/s): XOFF must come.
    # A run in which the peer itself was descheduled long enough for the paced line to fill
    # its ring past the XOFF headroom (late_reads: no XOFF could have stopped those bytes; a real
    # GRBL's interrupt never waits) is the host's, and run again, at most 3 times.
    options = DncOptions(wait_idle=True)
    for attempt in range(1, LATE_ATTEMPTS + 1):
        p = peer("--dnc", "--time-scale", "5", "--rx-buffer", "256")
        channel = open_serial(p.path)
        try:
            result = stream_dnc(polygon(300), channel, options)
        except StreamError:
            if not p.stats()["late_reads"] or attempt == LATE_ATTEMPTS:
                raise
            print(f"attempt {attempt}: the peer read late ({p.stats()['late_reads']}x): again")
            continue
        finally:
            channel.close()
        stats = p.stats()
        if stats["rx_overflow_bytes"] and stats["late_reads"] and attempt < LATE_ATTEMPTS:
            print(f"attempt {attempt}: the peer read late ({stats['late_reads']}x): again")
            continue
        break
    assert result.lines_sent == stats["lines_received"] == 300
    assert result.status is not None and result.status.state == "Idle"
    assert stats["xoff_sent"] >= 2 and result.xoff_count == stats["xoff_sent"]
    assert stats["xon_sent"] >= stats["xoff_sent"] - 1
    assert stats["rx_overflow_bytes"] == 0 and stats["errors_sent"] == 0
    # After an XOFF: one chunk in the race, one read that was on its way; the rest is slack
    # for a loaded machine. A sender that ignores XOFF (below) sends hundreds.
    assert stats["max_bytes_after_xoff"] <= 8 * options.chunk_bytes
    assert stats["bytes_received"] >= result.bytes_sent


def test_a_sender_that_ignores_xoff_is_caught(peer: Any) -> None:
    p = peer("--dnc", "--time-scale", "5", "--rx-buffer", "256")
    channel = open_serial(p.path)
    try:
        for line in polygon(150):
            channel.write(line.encode(), 2.0)
            time.sleep(0.0015)  # the line rate, deaf to XOFF
    finally:
        channel.close()
    stats = p.stats()
    assert stats["xoff_sent"] >= 1
    assert stats["max_bytes_after_xoff"] > 8 * DncOptions().chunk_bytes


# ------------------------------------------------------------------------------ pure parts


def test_parse_status_report() -> None:
    s = parse_status("<Hold:0|MPos:1.000,-2.500,3.000|Bf:15,128|FS:500,8000|Ov:100,100,100>")
    assert (s.state, s.substate, s.machine_mm) == ("Hold", 0, (1.0, -2.5, 3.0))
    assert (s.planner_free, s.rx_free, s.feed_mm_min) == (15, 128, 500.0)
    assert s.fields["Ov"] == "100,100,100"
    s = parse_status("<Idle|WPos:0.000,0.000,0.000|F:0>")
    assert s.work_mm == (0.0, 0.0, 0.0) and s.machine_mm is None and s.feed_mm_min == 0.0
    with pytest.raises(ValueError, match="not a status report"):
        parse_status("ok")
    old = parse_status("<Idle,MPos:0.000,0.000,0.000,WPos:0.000,0.000,0.000>")  # GRBL 0.9
    assert (old.state, old.substate, old.machine_mm) == ("Idle", None, None)


def test_prepare_line() -> None:
    assert prepare_line("N10 G1 X1.5 (cut) Y2 ; done\r\n") == "N10G1X1.5Y2"
    assert prepare_line("G1 X1 (a) Y2\n", compact=False) == "G1 X1  Y2"
    assert prepare_line("(only a comment)\n") == ""
    assert prepare_line("   \n") == ""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(2, 80), min_size=1, max_size=60), st.integers(80, 256))
def test_budget_rule_property(lengths: list[int], rx: int) -> None:
    """Whatever the line lengths and answer timing, un-acked bytes never exceed the buffer:
    a scripted controller answers a random number of the oldest lines after every write."""
    a, b = socket.socketpair()
    lines = ["X" * (n - 1) + "\n" for n in lengths]  # n bytes on the wire with its '\n'
    high = [0]

    def controller() -> None:
        pending: list[int] = []
        buf = b""
        done = 0
        b.settimeout(0.002)
        while done < len(lines):
            try:
                data: bytes | None = b.recv(65536)
            except TimeoutError:
                data = None  # quiet: answer the oldest line, as a controller eventually does
            if data == b"":
                return
            if data:
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    pending.append(len(line) + 1)
                high[0] = max(high[0], sum(pending))
            k = min(1 + sum(pending) % 3 if data else 1, len(pending))
            b.sendall(b"ok\r\n" * k)
            done += k
            del pending[:k]

    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    try:
        result = stream_grbl(
            lines,
            FdChannel(a.fileno(), "socketpair"),
            GrblOptions(
                handshake="none",
                rx_buffer_bytes=rx,
                status_interval_s=None,
                stall_timeout_s=5.0,
                start_states=None,
            ),
        )
    finally:
        a.close()  # the controller thread sees the end of the stream and returns
        thread.join(2)
        b.close()
    assert result.lines_acked == len(lines)
    assert high[0] <= rx and result.max_bytes_in_flight <= rx
