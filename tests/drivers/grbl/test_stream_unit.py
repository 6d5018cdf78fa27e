"""systemd/jha-stream@.service against the GRBL peer: the streamer is SIGKILLed mid-program with
the spindle on, then the unit's ExecStopPost= line runs as systemd runs it after any end of the
main process ($SERVICE_RESULT=signal): the machine is held, stands, is reset, nothing is left
that cycle start could run and the spindle is off. After a stream that ended well
($SERVICE_RESULT=success) the same line sends nothing (GRBL has no host watchdog: issue 28)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.drivers.grbl.test_driver import write_config
from tests.support.drivers.grbl import GRBL_MACHINE, zigzag
from tests.support.paths import ROOT
from tests.support.summary import record

UNIT = ROOT / "systemd" / "jha-stream@.service"
CONFIG = "/etc/joint-health-agent/config.yaml"


def _exec_stop_post(config: Path, controller: str) -> list[str]:
    """The unit's ExecStopPost= as argv, the installed paths mapped onto this checkout."""
    (line,) = [s for s in UNIT.read_text().splitlines() if s.startswith("ExecStopPost=")]
    argv = line.removeprefix("ExecStopPost=").split()
    assert argv[0] == "/opt/joint-health-agent/venv/bin/jha", argv
    mapped = {CONFIG: str(config), "${CONTROLLER}": controller}
    return [sys.executable, "-m", "agent.cli", *(mapped.get(a, a) for a in argv[1:])]


def _config(tmp_path: Path, port: str) -> Path:
    (tmp_path / "machines").mkdir(exist_ok=True)
    (tmp_path / "machines" / "mill.yaml").write_text(GRBL_MACHINE)
    return write_config(tmp_path, f"port: {port}\nmachine: machines/mill.yaml\n")


def _stop_post(config: Path, result: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _exec_stop_post(config, "mill1"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "SERVICE_RESULT": result},
    )


def test_a_killed_streamer_leaves_the_machine_with_nothing_to_run(
    peer: Any, tmp_path: Path
) -> None:
    src = tmp_path / "part.nc"
    src.write_text("M3 S12000\n" + zigzag(400))
    p = peer("--time-scale", "1")
    config = _config(tmp_path, p.path)
    streamer = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "feedrate", "stream", str(src),
         "--config", str(config), "--controller", "mill1", "--quiet"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while p.buffers()["planner_blocks"] < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        streamer.send_signal(signal.SIGKILL)
        streamer.wait(10)
    finally:
        if streamer.poll() is None:
            streamer.kill()
    left = p.buffers()
    assert left["runnable_lines"] > 0 and left["spindle"] != "off", left  # what GRBL runs on
    done = _stop_post(config, "signal")
    assert done.returncode == 0, done.stdout + done.stderr
    after = p.buffers()
    record("listening sockets", "GRBL streamer SIGKILLed, then jha-stream@'s ExecStopPost",
           f"{left['runnable_lines']} line(s) and spindle {left['spindle']} before; "
           f"{after['runnable_lines']} and spindle {after['spindle']} after")  # fmt: skip
    assert after["runnable_lines"] == 0 and after["spindle"] == "off", after
    assert "feed hold (!) sent; the machine stood still" in done.stdout, done.stdout
    assert "restarted" in done.stdout
    # After the streamer's own handshake reset: the stop's hold and reset.
    assert [e["code"] for e in p.stats()["realtime"][1:]] == ["!", "0x18"]


def test_after_a_stream_that_ended_well_the_stop_sends_nothing(peer: Any, tmp_path: Path) -> None:
    p = peer("--time-scale", "100")
    config = _config(tmp_path, p.path)
    done = _stop_post(config, "success")
    assert done.returncode == 0 and "nothing to stop" in done.stdout, done.stdout + done.stderr
    stats = p.stats()
    assert stats["realtime"] == [] and stats["bytes_received"] == 0
