"""`jha ...`: config check, analyze backlash (JSON, plot, bad input), simulate, drivers.

Most cases call agent.cli.main.main in-process; a few run the installed `jha` as a subprocess, the
way a user or a script does.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from agent.capture.files import load_capture
from agent.cli.main import main
from agent.errors import EX_CONFIG, EX_DATAERR, EX_OK
from tests.support.paths import ROOT

JHA = Path(sys.executable).with_name("jha")
SPEED = ["--speed-rps", "100", "--gear-ratio", "40"]
JSON_KEYS = {
    "amplitude_rad_s",
    "rmse_rad_s",
    "params",
    "backlash_rad",
    "fit_seconds",
    "evaluations",
}
WORN_RAD = 1.2e-3
# (A, delta) pairs of the default simulated joint, as a bench or a sweep would give them.
PAIRS = (
    "amplitude_rad_s,backlash_rad\n0,0\n1.07,3e-4\n2.06,7e-4\n2.86,1.1e-3\n3.57,1.5e-3\n"
    "4.58,2.1e-3\n"
)


def jha(*args: str | Path, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """The installed console script, next to the interpreter running the tests."""
    assert JHA.is_file(), f"{JHA} not found: install the package into this environment"
    return subprocess.run(
        [str(JHA), *map(str, args)], capture_output=True, text=True, timeout=timeout_s
    )


@pytest.fixture(scope="module")
def worn_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated 6-load-turn capture of a worn joint, written by `jha simulate backlash`."""
    path = tmp_path_factory.mktemp("cli") / "worn.csv"
    code = main(
        [
            "simulate",
            "backlash",
            "--backlash-rad",
            str(WORN_RAD),
            "--load-turns",
            "6",
            "--seed",
            "4",
            "-o",
            str(path),
        ]
    )
    assert code == EX_OK
    return path


# --- jha config check ---------------------------------------------------------------------------


def test_config_check_accepts_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    demo = ROOT / "config" / "demo.yaml"
    assert main(["config", "check", str(demo)]) == EX_OK
    assert capsys.readouterr().out.strip() == f"{demo}: OK"


@pytest.mark.parametrize(
    ("file", "kind"),
    [
        ("robots/ur5e.yaml", "robot"),
        ("robots/panda.yaml", "robot"),
        ("machines/farouki2022.yaml", "machine"),
    ],
)
def test_config_check_knows_robot_and_machine_files(
    file: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "unknown key ... expected controllers": each kind is checked by its own loader."""
    path = ROOT / "config" / file
    assert main(["config", "check", str(path)]) == EX_OK
    assert capsys.readouterr().out.strip() == f"{path}: OK ({kind} file)"
    # a mistake in one is found at its line
    text = path.read_text()
    broken = tmp_path / "broken.yaml"
    key = "encoder_counts_per_turn:" if kind == "robot" else "eps_m:"
    broken.write_text(text.replace(key, key + " -3 #", 1))
    assert main(["config", "check", str(broken)]) == EX_CONFIG
    err = capsys.readouterr().err
    line = text[: text.index(key)].count("\n") + 1
    assert f"{broken}:{line}:" in err and "controllers" not in err


BROKEN = """\
controllers:
  - name: robot
    driver: sim
    joints:
      - name: j1
        index: 1
        gear_ration: 40
        backlash_cycle:
          motor_speed_rps: -5
"""


def test_config_check_lists_every_mistake_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    assert main(["config", "check", str(path)]) == EX_CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert lines[-1] == f"{path}: {len(lines) - 1} error(s)"
    issues = lines[:-1]
    assert all(line.startswith(f"{path}:") for line in issues)
    by_line = {int(line.split(":")[1]): line for line in issues}
    # The typo: an unknown key, with the near miss suggested; the missing key it was meant as.
    assert "controllers[0].joints[0].gear_ration" in by_line[7]
    assert "gear_ratio" in by_line[7]
    assert "controllers[0].joints[0].backlash_cycle.motor_speed_rps" in by_line[9]
    assert "expected a number > 0" in by_line[9] and "-5" in by_line[9]


def test_config_check_runs_as_a_command(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    done = jha("config", "check", path)
    assert done.returncode == EX_CONFIG == 78
    assert f"{path}:7: controllers[0].joints[0].gear_ration" in done.stderr
    assert jha("config", "check", ROOT / "config" / "demo.yaml").returncode == 0


def test_run_refuses_a_broken_config_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    assert main(["run", "--config", str(path), "--once"]) == EX_CONFIG
    assert f"{path}:9:" in capsys.readouterr().err


# --- jha analyze backlash ---------------------------------------------------------------------


def test_analyze_json_has_the_documented_keys(
    worn_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "backlash", str(worn_csv), *SPEED, "--json"]) == EX_OK
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= JSON_KEYS
    assert data["backlash_rad"] is None  # no calibration given
    assert data["amplitude_rad_s"] > 1.0  # a worn joint rings hard (healthy: ~1e-3 rad/s)
    assert 0 < data["rmse_rad_s"] < data["amplitude_rad_s"]
    assert data["fit_seconds"] > 0 and isinstance(data["evaluations"], int)
    assert data["evaluations"] > 0
    params = data["params"]
    for name in ("A_rad_s", "t0_s", "tau_per_s", "omega_rad_s", "T1_s", "T2_s", "Td_s", "Tf_s"):
        assert math.isfinite(params[name])
    assert params["Tf_s"] == pytest.approx(0.4)
    assert params["Td_s"] == pytest.approx(0.2)


def test_analyze_with_a_calibration_and_a_plot(
    worn_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "pairs.csv"
    pairs.write_text(PAIRS)
    plot = tmp_path / "signature.svg"
    args = [*SPEED, "--calibration", str(pairs), "--plot", str(plot), "--json"]
    assert main(["analyze", "backlash", str(worn_csv), *args]) == EX_OK
    data = json.loads(capsys.readouterr().out)
    assert data["backlash_rad"] == pytest.approx(WORN_RAD, rel=0.15)
    # With its interval; measured pairs say nothing of model mismatch, and the result says so.
    low, high = data["backlash_interval_rad"]
    assert low <= data["backlash_rad"] <= high and data["ambiguous"] is False
    assert any("without a model-mismatch term" in w for w in data["warnings"])

    root = ET.parse(plot).getroot()  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    drawn = [e for e in root.iter() if e.tag.rsplit("}", 1)[-1] in ("polyline", "path")]
    assert len(drawn) >= 2  # the residual and the fitted signature
    text = plot.read_text()
    assert "residual" in text and "fitted" in text


@pytest.mark.parametrize(
    ("flags", "code", "expected"),
    [
        (["--speed-rps", "0", "--gear-ratio", "40"], 64, "--speed-rps: expected a motor speed > 0"),
        (["--speed-rps", "nan", "--gear-ratio", "40"], 64, "--speed-rps: expected"),
        ([*SPEED[:2], "--gear-ratio", "0.5"], 64, "--gear-ratio: expected a reduction: >= 1"),
        ([*SPEED, "--encoder-bits", "64"], 64, "--encoder-bits: expected 12 to 32 bits"),
        ([*SPEED, "--resonance-hz", "200", "10"], 64, "--resonance-hz: expected 0 < LO < HI"),
        ([*SPEED, "--resonance-hz", "10", "5000"], 65, "below the capture's Nyquist frequency"),
    ],
    ids=["speed 0", "speed nan", "gear below 1", "encoder bits", "band reversed", "band > Nyquist"],
)
def test_analyze_flags_are_held_to_the_config_s_rules(
    worn_csv: Path, capsys: pytest.CaptureFixture[str], flags: list[str], code: int, expected: str
) -> None:
    assert main(["analyze", "backlash", str(worn_csv), *flags]) == code
    assert expected in capsys.readouterr().err


def test_analyze_refuses_calibration_pairs_that_do_not_increase(
    worn_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("amplitude_rad_s,backlash_rad\n0,0\n1.07,3e-4\n2.06,2e-4\n2.86,1.1e-3\n")
    args = ["analyze", "backlash", str(worn_csv), *SPEED, "--calibration", str(pairs)]
    assert main(args) == EX_DATAERR
    err = capsys.readouterr().err
    assert f"{pairs}:4: expected amplitude and backlash both above the row before" in err


def test_analyze_puts_a_host_s_log_on_its_tick_and_refuses_a_long_gap(
    worn_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.capture.files import load_capture, save_capture
    from agent.capture.model import Capture

    clean = load_capture(worn_csv)
    assert main(["analyze", "backlash", str(worn_csv), *SPEED, "--json"]) == EX_OK
    reference = json.loads(capsys.readouterr().out)
    assert reference["resampling"] is None  # uniform: left as it is
    tick = float(np.median(np.diff(clean.time_s)))
    jitter = np.random.default_rng(5).uniform(-0.25, 0.25, len(clean)) * tick
    logged = tmp_path / "host.csv"
    save_capture(Capture(clean.time_s + jitter, clean.channels, clean.meta), logged)
    assert main(["analyze", "backlash", str(logged), *SPEED, "--json"]) == EX_OK
    data = json.loads(capsys.readouterr().out)
    done = data["resampling"]
    assert done["filled"] == 0 and done["repeated"] == 0 and done["samples_out"] == len(clean)
    assert 0.2 < done["jitter_max_ticks"] < 0.35
    assert data["amplitude_rad_s"] == pytest.approx(reference["amplitude_rad_s"], rel=0.05)
    # A gap of 1e6 s fitted "converged" before: now refused, where it is.
    t = clean.time_s.copy()
    t[1000:] += 1e6
    gapped = tmp_path / "gap.csv"
    save_capture(Capture(t, clean.channels, clean.meta), gapped)
    assert main(["analyze", "backlash", str(gapped), *SPEED]) == EX_DATAERR
    assert "more than the 5 that may be filled" in capsys.readouterr().err


def test_analyze_prints_a_summary_without_json(
    worn_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "backlash", str(worn_csv), *SPEED]) == EX_OK
    out = capsys.readouterr().out
    assert out.startswith("amplitude ")
    assert "(95 % interval " in out.splitlines()[0]
    assert "n/a (no calibration)" in out


# Bad input: each file has one problem; the message must name the file and the problem.
FS = 500.0


def _rows(turns: float = 6.0) -> list[list[str]]:
    """A plausible constant-speed capture: 100 rev/s with a small ripple, 0.4 s per load turn."""
    t = np.arange(round(turns * 0.4 * FS) + 1) / FS
    pos = 2 * math.pi * 100 * t + 0.01 * np.sin(2 * math.pi * 37 * t)
    return [[repr(float(a)), repr(float(b))] for a, b in zip(t, pos, strict=True)]


def _nan(rows: list[list[str]]) -> tuple[str, list[list[str]]]:
    rows[10][1] = "nan"
    return "time_s,motor_pos_rad", rows


def _inf(rows: list[list[str]]) -> tuple[str, list[list[str]]]:
    rows[10][1] = "-inf"
    return "time_s,motor_pos_rad", rows


def _backwards(rows: list[list[str]]) -> tuple[str, list[list[str]]]:
    rows[10][0], rows[11][0] = rows[11][0], rows[10][0]
    return "time_s,motor_pos_rad", rows


def _short(rows: list[list[str]]) -> tuple[str, list[list[str]]]:
    return "time_s,motor_pos_rad", _rows(turns=1.5)


def _constant(rows: list[list[str]]) -> tuple[str, list[list[str]]]:
    return "time_s,motor_speed_rad_s", [[r[0], repr(2 * math.pi * 100)] for r in rows]


def _unknown(rows: list[list[str]]) -> tuple[str, list[list[str]]]:
    return "time_s,motor_pos_deg", rows


def _no_motor(rows: list[list[str]]) -> tuple[str, list[list[str]]]:
    return "time_s,current_a", [[r[0], "0.5"] for r in rows]


def _counts(rows: list[list[str]]) -> tuple[str, list[list[str]]]:
    counts = [str(int(float(r[1]) / (2 * math.pi) * 2**19) % 2**19) for r in rows]
    return "time_s,motor_counts", [[r[0], c] for r, c in zip(rows, counts, strict=True)]


BAD: dict[str, tuple[Callable[[list[list[str]]], tuple[str, list[list[str]]]], str]] = {
    "nan": (_nan, ":12: column motor_pos_rad: 'nan' is not finite"),
    "inf": (_inf, ":12: column motor_pos_rad: '-inf' is not finite"),
    "non_monotonic_time": (_backwards, ":13: column time_s: time 0.02 s is not after"),
    "under_two_load_turns": (_short, ": the capture covers 1.50 load turns"),
    "constant": (_constant, ": the speed signal is constant"),
    "unknown_column": (_unknown, ":1: unknown column 'motor_pos_deg'"),
    "no_motor_column": (_no_motor, ":1: no motor channel"),
    "counts_without_bits": (_counts, ":1: motor_counts needs the encoder bit width"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_65_naming_the_file_and_the_problem(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, problem = BAD[case]
    header, rows = make(_rows())
    path = tmp_path / f"{case}.csv"
    path.write_text(header + "\n" + "\n".join(",".join(r) for r in rows) + "\n")
    plot = tmp_path / "never.svg"
    code = main(["analyze", "backlash", str(path), *SPEED, "--json", "--plot", str(plot)])
    captured = capsys.readouterr()
    assert code == EX_DATAERR == 65
    assert captured.err.startswith(f"jha: {path}{problem}"), captured.err
    assert captured.out == ""  # no half-written JSON
    assert not plot.exists()  # nothing stored


def test_the_good_twin_of_the_bad_inputs_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same synthetic file without its defect: the failures above are the defects' doing."""
    path = tmp_path / "good.csv"
    path.write_text("time_s,motor_pos_rad\n" + "\n".join(",".join(r) for r in _rows()) + "\n")
    assert main(["analyze", "backlash", str(path), *SPEED, "--json"]) == EX_OK
    assert set(json.loads(capsys.readouterr().out)) >= JSON_KEYS


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0,0\n1.0;3e-4\n", ":2: expected 'amplitude_rad_s,backlash_rad', found '1.0;3e-4'"),
        ("0,0\n1,1e-4\n", ": calibration needs at least 4 (A, delta) pairs, got 2"),
    ],
)
def test_a_bad_calibration_file_exits_65_naming_it(
    text: str, problem: str, worn_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "pairs.csv"
    pairs.write_text(text)
    code = main(["analyze", "backlash", str(worn_csv), *SPEED, "--calibration", str(pairs)])
    assert code == EX_DATAERR
    assert capsys.readouterr().err.startswith(f"jha: {pairs}{problem}")


# --- jha simulate backlash / jha drivers -------------------------------------------------------


def test_simulate_writes_a_capture_that_reads_back(worn_csv: Path, tmp_path: Path) -> None:
    capture = load_capture(worn_csv)  # metadata from the sidecar: nothing else needed
    assert len(capture) == round(6 * 0.4 * 500) + 1
    assert capture.meta.encoder_bits == 19
    assert capture.meta.gear_ratio == 40.0
    assert capture.meta.commanded_speed_rad_s == pytest.approx(2 * math.pi * 100)
    assert {"motor_counts", "motor_pos_rad"} <= set(capture.channels)
    # The native format holds the very same samples.
    npz = tmp_path / "worn.npz"
    assert (
        main(
            [
                "simulate",
                "backlash",
                "--backlash-rad",
                str(WORN_RAD),
                "--load-turns",
                "6",
                "--seed",
                "4",
                "-o",
                str(npz),
            ]
        )
        == EX_OK
    )
    native = load_capture(npz)
    assert np.array_equal(native.time_s, capture.time_s)
    for name, values in capture.channels.items():
        assert np.array_equal(native.channels[name], values), name


def test_simulate_then_analyze_as_commands(tmp_path: Path) -> None:
    path = tmp_path / "capture.csv"
    done = jha("simulate", "backlash", "--backlash-rad", "6e-4", "--load-turns", "4", "-o", path)
    assert done.returncode == 0, done.stderr
    assert str(path) in done.stdout
    done = jha("analyze", "backlash", path, "--json")  # speed and gear ratio from the sidecar
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) >= JSON_KEYS
    assert data["backlash_rad"] is None
    assert data["params"]["Tf_s"] == pytest.approx(0.4)


def test_drivers_lists_sim_with_its_capabilities(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drivers"]) == EX_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["DRIVER", "ENTRY", "POINT", "CAPABILITIES"]
    # aligned: every row's entry point and capabilities start in the header's columns
    for column in ("ENTRY POINT", "CAPABILITIES"):
        at = lines[0].index(column)
        assert all(line[at - 2 : at] == "  " and line[at] != " " for line in lines[1:])
    (sim,) = [line for line in lines if line.split()[0] == "sim"]
    assert "drivers.sim:SimDriver" in sim
    assert sim.rstrip().endswith(
        "cycles, motor_encoder, link_encoder, current, toolpath_streaming, excitation, return_move"
    )
