"""Every early end of a DNC drip feed leaves the controller held and reset (issue 28 item 1).

The peer in --dnc mode is GRBL with XON/XOFF (tests/peers/grbl_controller.py): its feed hold
'!' and soft reset 0x18 are real-time codes taken out of the byte stream. A drip feed that ends
before its last line (an error, a stall, a line it must refuse, a signal) sends the hold, waits
for '?' to show standstill and then the reset, so that a cycle start at the machine runs
nothing. Without a reset code the hold stays (test_gcode_stream_failures.py), and without a hold
code the error says the machine runs out its buffer. A DNC stream to a controller without
XON/XOFF is refused before a byte (test_gcode_stream_safety.py, tests/cli).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.cli.main import main
from agent.errors import EX_DATAERR, EX_OK
from agent.feedrate.streaming.dnc import DncOptions, stream_dnc
from agent.feedrate.streaming.serial_channel import open_serial
from agent.feedrate.streaming.session import HOLD_ON, StreamError, StreamProgress
from tests.support.drivers.grbl import GRBL_MACHINE, jha, polygon, zigzag

GRBL_DNC = {"hold_code": b"!", "reset_code": b"\x18"}
HELD_AND_RESET = ("feed hold (!) sent", "soft reset (0x18) sent")


def _interrupt_after(lines: int) -> Callable[[StreamProgress], None]:
    def progress(p: StreamProgress) -> None:
        if p.lines_sent >= lines:
            raise KeyboardInterrupt  # as Ctrl-C lands in the streaming loop

    return progress


ENDS: dict[str, tuple[tuple[str, ...], dict[str, Any], list[str]]] = {
    # end: (peer arguments, stream options besides the codes, program)
    "error": (("--time-scale", "20", "--error-at", "40:33"), {}, polygon(300)),
    "stall": (
        ("--time-scale", "20", "--deaf-at", "30"),
        {"stall_timeout_s": 0.5},
        polygon(300),
    ),
    "refused line": (  # too long for the controller: found only when the stream reaches it
        ("--time-scale", "20"),
        {"max_line_chars": 40},
        [*polygon(80), "G1 X1.000000000000 Y1.000000000000 Z0.0000000000\n", *polygon(40)],
    ),
    "Ctrl-C": (("--time-scale", "20"), {}, polygon(300)),
}


@pytest.mark.parametrize("end", list(ENDS))
def test_an_early_dnc_end_leaves_the_controller_held_then_reset(peer: Any, end: str) -> None:
    args, extra, program = ENDS[end]
    p = peer("--dnc", *args)
    progress = _interrupt_after(60) if end == "Ctrl-C" else None
    channel = open_serial(p.path)
    try:
        with pytest.raises(StreamError) as info:
            stream_dnc(program, channel, DncOptions(**GRBL_DNC, **extra), progress=progress)
    finally:
        channel.close()
    exc = info.value
    assert exc.kind in HOLD_ON, exc
    assert all(words in str(exc) for words in HELD_AND_RESET), str(exc)
    assert "restarted" in str(exc)  # GRBL prints its banner after the reset
    assert "stood still" in str(exc)  # the reset came after standstill: the position kept
    held = p.buffers()
    assert held["runnable_lines"] == 0, held  # a cycle start now runs nothing
    assert p.settle().state == "Idle"
    stats = p.stats()
    assert [e["code"] for e in stats["realtime"]] == ["!", "0x18"]
    assert not stats["held"]


def test_the_cli_dnc_stream_from_a_config_ends_held_and_reset(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = tmp_path / "generic.yaml"
    machine.write_text(GRBL_MACHINE.replace("dialect: grbl", "dialect: generic"))
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(60))
    p = peer("--dnc", "--time-scale", "20", "--error-at", "30:33")
    config = tmp_path / "cnc.yaml"
    config.write_text(
        "controllers:\n  - name: mill\n    driver: grbl\n    settings:\n"
        f"      port: {p.path}\n      protocol: dnc\n      xon_xoff: true\n"
        "      dnc_feed_hold: '!'\n      dnc_reset: \"\\x18\"\n"
        f"      filter: {{enabled: false}}\n      machine: {machine}\n    joints: []\n"
    )
    assert main(["config", "check", str(config)]) == EX_OK
    capsys.readouterr()
    run = ("feedrate", "stream", str(src), "--config", str(config), "--controller", "mill")
    assert jha(*run, "--confirm-ready", "--quiet") == EX_DATAERR
    err = capsys.readouterr().err
    assert "error:33" in err and all(words in err for words in HELD_AND_RESET), err
    assert p.buffers()["runnable_lines"] == 0
    assert [e["code"] for e in p.stats()["realtime"]] == ["!", "0x18"]
