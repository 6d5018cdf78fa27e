"""`jha feedrate ...` (agent.cli.feedrate): filter, stream, simulate, sweep.

The command group is mounted on a bare argparse parser here, as agent/cli/main.py mounts it, and run
in-process; errors map to sysexits codes the way agent.cli.main.main maps them. `stream` talks to
the GRBL-protocol peer (tests/peers/grbl_controller.py) on a pseudo-terminal.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cli.feedrate import register
from agent.errors import EX_CONFIG, EX_DATAERR, EX_IOERR, EX_OK, AgentError
from agent.feedrate.filter.toolpath_filter import filter_lines, filtered_lines_with_origin
from agent.feedrate.machine import load_machine

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config" / "machines" / "farouki2022.yaml"
PEER = ROOT / "tests" / "peers" / "grbl_controller.py"

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


# ------------------------------------------------------------------------------- simulate


def test_simulate_json_reproduces_section_4_2_to_the_printed_digits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert jha("feedrate", "simulate", "--example", "farouki2022", "--json") == EX_OK
    d = json.loads(capsys.readouterr().out)
    printed = {
        "gamma_1_s": ("{:.0f}", "5"),
        "lambda_1_s": ("{:.6f}", "44.440972"),
        "motor_gain_rad_m_s2": ("{:.6e}", "1.428571e+05"),
        "p": ("{:.6f}", "-1.000130"),
        "q": ("{:.6f}", "0.002619"),
        "phi_rad": ("{:.6f}", "1.088448"),
        "steady_backlash_s": ("{:.6f}", "0.118743"),
        "reversal_lag_s": ("{:.6f}", "0.005001"),
    }
    for key, (fmt, paper) in printed.items():
        assert fmt.format(d[key]) == paper, (key, d[key])
    assert d["agrees_with_paper"] is True
    assert d["discriminant_s2"] == pytest.approx(-0.001975)
    assert d["period_s"] == pytest.approx(12.0, abs=1e-6)


def test_simulate_text_and_a_modulated_turning_point(capsys: pytest.CaptureFixture[str]) -> None:
    assert jha("feedrate", "simulate", "--example", "farouki2022") == EX_OK
    out = capsys.readouterr().out
    assert "44.440972" in out and "0.118743" in out and "DIFFERS" not in out
    assert (
        jha("feedrate", "simulate", "--example", "farouki2022", "--ratio", "0.25", "--json")
        == EX_OK
    )
    tp = json.loads(capsys.readouterr().out)["turning_point"]
    # Figure 11 at 0.25: the shallow minimum, ~38 % below the constant feed's error.
    assert tp["modulated"]["max_radial_error"] < 0.7 * tp["constant"]["max_radial_error"]
    assert tp["modulated"]["time_penalty_s"] == pytest.approx(0.277, abs=1e-3)


# ------------------------------------------------------------------------------- sweep


def test_sweep_has_figure_11s_shape_as_table_json_and_plot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plot = tmp_path / "fig11.svg"
    assert jha("feedrate", "sweep", "--json", "--plot", str(plot)) == EX_OK
    d = json.loads(capsys.readouterr().out)
    rows = d["rows"]
    assert [r["ratio"] for r in rows] == pytest.approx([-1.0 + 0.1 * k for k in range(26)])
    assert all(r["max_radial_error"] > r["rms_radial_error"] > 0 for r in rows)
    above = [r["max_radial_error"] for r in rows if r["ratio"] >= 1.0 - 1e-9]
    assert above == sorted(above) and len(above) == 6  # larger error above 1
    assert 0.2 <= d["shallow_minimum"]["ratio"] <= 0.4  # the paper: ~0.25
    assert -0.5 <= d["deepest_minimum"]["ratio"] <= -0.3  # the paper: ~-0.45
    assert d["deepest_minimum"]["max_radial_error"] < d["shallow_minimum"]["max_radial_error"]
    svg = plot.read_text()
    assert svg.startswith("<svg") and "figure 11" in svg and "RMS e" in svg
    assert jha("feedrate", "sweep", "--points", "6") == EX_OK
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.strip()[:1] in "-0123456789"]) == 6
    assert "shallow minimum" in out[-1]


# ------------------------------------------------------------------------------- filter


def test_filter_file_to_file_and_stdin_to_stdout(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "in.gcode"
    dst = tmp_path / "out.gcode"
    program = zigzag(6, feed=6000.0)
    src.write_text(program)
    machine = load_machine(EXAMPLE)
    expected = "".join(filter_lines(program.splitlines(keepends=True), machine))
    assert jha("feedrate", "filter", str(src), "-o", str(dst), "--machine", str(EXAMPLE)) == EX_OK
    assert dst.read_text() == expected
    err = capsysbinary.readouterr().err.decode()
    assert f"{src}: 6 lines in" in err and "4 of 4 reversals modulated" in err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(program.encode())))
    assert jha("feedrate", "filter", "--machine", str(EXAMPLE), "--stats") == EX_OK
    captured = capsysbinary.readouterr()
    assert captured.out.decode() == expected
    assert json.loads(captured.err.decode())["modulated"] == 4


def test_filter_errors_name_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_machine = tmp_path / "m.yaml"
    bad_machine.write_text(EXAMPLE.read_text().replace("eps_m: 1.0e-6", "eps_m: -1"))
    src = tmp_path / "in.gcode"
    src.write_text("G21 G90 F600\nG1 X10\nG1 X5 Q1\n")
    assert jha("feedrate", "filter", str(src), "--machine", str(bad_machine)) == EX_CONFIG
    line = 1 + next(
        i
        for i, text in enumerate(bad_machine.read_text().splitlines())
        if text.startswith("eps_m: -1")
    )
    assert f"{bad_machine}:{line}: eps_m: expected a number > 0" in capsys.readouterr().err
    out = tmp_path / "out.gcode"
    assert (
        jha("feedrate", "filter", str(src), "-o", str(out), "--machine", str(EXAMPLE)) == EX_DATAERR
    )
    assert f"{src}:3: unknown word Q" in capsys.readouterr().err
    assert not out.exists()  # nothing half-written


# ------------------------------------------------------------------------------- stream


class Peer:
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

    def wait_idle(self, timeout_s: float = 10.0) -> Any:
        """Poll '?' until the controller reports Idle (all planned motion executed)."""
        from agent.feedrate.streaming.grbl_protocol import parse_status
        from agent.feedrate.streaming.serial_channel import open_serial

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

    def state(self) -> Any:
        """The machine's status from the peer's display (its stdin and stdout, not the port)."""
        from agent.feedrate.streaming.grbl_protocol import parse_status

        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("status\n")
        self.proc.stdin.flush()
        return parse_status(self.proc.stdout.readline().strip())

    def stats(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        return dict(json.loads(self.stats_path.read_text()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Any]:
    started: list[Peer] = []

    def start(*args: str) -> Peer:
        p = Peer(tmp_path, *args)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


def test_stream_filters_on_the_fly_to_a_grbl_controller(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = tmp_path / "grbl.yaml"
    machine.write_text(GRBL_MACHINE)
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(40))
    expected = "".join(filter_lines(zigzag(40).splitlines(keepends=True), load_machine(machine)))
    p = peer("--time-scale", "200")
    assert jha("feedrate", "stream", str(src), "--port", p.path, "--machine", str(machine)) == EX_OK
    err = capsys.readouterr().err
    n_out = expected.count("\n")
    assert f"{n_out} lines acknowledged of {n_out} sent (40 program lines)" in err
    assert "38 reversals modulated" in err
    assert "\rlines " in err and "reversals " in err  # the progress line
    idle = p.wait_idle()
    assert math.dist(idle.machine_mm[:2], (20.0, 19.5)) < 1e-3  # where the program ends
    stats = p.stats()
    assert stats["lines_received"] == stats["oks_sent"] == n_out
    assert stats["errors_sent"] == 0 and stats["rx_overflow_bytes"] == 0
    assert stats["rx_max_bytes"] <= 128


def test_stream_stops_at_an_error_and_names_the_line(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = tmp_path / "grbl.yaml"
    machine.write_text(GRBL_MACHINE)
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(10))
    sent = list(
        filtered_lines_with_origin(zigzag(10).splitlines(keepends=True), load_machine(machine))
    )
    line, origin = sent[11]
    assert origin in (2, 3) and line.startswith("G1 ")  # a segment of a replaced block
    p = peer("--time-scale", "200", "--error-at", "12:33")
    assert (
        jha("feedrate", "stream", str(src), "--port", p.path, "--machine", str(machine), "--quiet")
        == EX_DATAERR
    )
    err = capsys.readouterr().err
    compact = "".join(line.split())  # GRBL streams drop spaces
    assert f"{src}:{origin} ({compact!r}): error:33" in err, err
    assert "(line 12 of the filtered stream)" in err
    disconnect = peer("--time-scale", "200", "--disconnect-at", "3")
    assert (
        jha(
            "feedrate",
            "stream",
            str(src),
            "--port",
            disconnect.path,
            "--machine",
            str(machine),
            "--quiet",
        )
        == EX_IOERR
    )
    assert "filtered stream" in capsys.readouterr().err
