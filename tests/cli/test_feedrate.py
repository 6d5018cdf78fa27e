"""`jha feedrate ...` (agent.cli.feedrate): filter, stream, simulate, sweep.

The command group is mounted on a bare argparse parser here, as agent/cli/main.py mounts it, and run
in-process; errors map to sysexits codes the way agent.cli.main.main maps them. `stream` talks to
the GRBL-protocol peer (tests/peers/grbl_controller.py) on a pseudo-terminal.
"""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.errors import EX_CONFIG, EX_DATAERR, EX_IOERR, EX_OK
from agent.feedrate.filter.program import filter_lines, filtered_lines_with_origin
from agent.feedrate.machine import load_machine
from tests.support.drivers.grbl import GRBL_MACHINE, jha, zigzag
from tests.support.paths import MACHINES

EXAMPLE = MACHINES / "farouki2022.yaml"
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
