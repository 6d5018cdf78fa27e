"""The G-code streaming driver (`driver: grbl`): settings in the agent's config, status and stop
over GRBL's real-time commands, and `jha feedrate stream --config FILE --controller NAME` end
to end against the GRBL-protocol peer (tests/peers/grbl_controller.py) on a pseudo-terminal."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import pytest

from agent.config.load import config_issues, load_config
from agent.config.model import ControllerSettings
from agent.errors import EX_CONFIG, EX_DATAERR, EX_OK, DriverError
from agent.feedrate.filter.program import filter_lines
from agent.feedrate.machine import load_machine
from agent.feedrate.streaming.dnc import DncOptions
from agent.feedrate.streaming.grbl_protocol import parse_status
from agent.feedrate.streaming.serial_channel import open_serial
from drivers.base import BacklashCycle, Capability, ControllerMode, load_driver_class
from drivers.grbl.driver import GrblDriver, controller_status, overrides_percent
from drivers.grbl.settings import GrblSettings
from tests.support.drivers.grbl import GRBL_MACHINE, jha, zigzag
from tests.support.paths import ROOT


def _joints() -> str:
    """`joints: []` once the config allows a controller without joints (a CNC the agent only
    streams to); until then one joint, which the grbl driver ignores."""
    spec = next(f for f in dataclasses.fields(ControllerSettings) if f.name == "joints")
    if spec.metadata.get("min_len", 0) == 0:
        return "    joints: []\n"
    return (
        "    joints:\n"
        "      - {name: x, index: 1, gear_ratio: 25, backlash_cycle: {motor_speed_rps: 1}}\n"
    )


def config_text(settings: str, name: str = "mill1") -> str:
    body = "".join(f"      {line}\n" for line in settings.strip("\n").splitlines())
    return (
        f"agent:\n  state_dir: var\ncontrollers:\n  - name: {name}\n    driver: grbl\n"
        f"    settings:\n{body}{_joints()}"
    )


def write_config(tmp: Path, settings: str) -> Path:
    path = tmp / "agent.yaml"
    path.write_text(config_text(settings))
    return path


def indented(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.splitlines())


# ------------------------------------------------------------------------------ status mapping


@pytest.mark.parametrize(
    ("line", "mode", "alarms"),
    [
        ("<Idle|MPos:0.000,0.000,0.000|FS:0,0>", ControllerMode.STOPPED, ()),
        ("<Run|MPos:1.000,2.000,0.000|FS:600,0|Ov:100,100,100>", ControllerMode.PRODUCTION, ()),
        ("<Hold:0|MPos:1.000,2.000,0.000|FS:0,0>", ControllerMode.PRODUCTION, ()),
        ("<Hold:1|MPos:1.000,2.000,0.000|FS:0,0>", ControllerMode.PRODUCTION, ()),
        ("<Jog|MPos:1.000,2.000,0.000|FS:0,0>", ControllerMode.MANUAL, ()),
        ("<Home|MPos:1.000,2.000,0.000|FS:0,0>", ControllerMode.MANUAL, ()),
        ("<Alarm|MPos:1.000,2.000,0.000|FS:0,0>", ControllerMode.FAULT, ("Alarm",)),
        ("<Door:1|MPos:1.000,2.000,0.000|FS:0,0>", ControllerMode.FAULT, ("Door:1",)),
        ("<Check|MPos:0.000,0.000,0.000|FS:0,0>", ControllerMode.STOPPED, ()),
        ("<Sleep|MPos:0.000,0.000,0.000|FS:0,0>", ControllerMode.STOPPED, ()),
        (
            "<Dance|MPos:0.000,0.000,0.000|FS:0,0>",
            ControllerMode.FAULT,
            ("unknown GRBL state 'Dance'",),
        ),
    ],
)
def test_grbl_states_map_to_controller_modes(
    line: str, mode: ControllerMode, alarms: tuple[str, ...]
) -> None:
    status = controller_status(parse_status(line))
    assert status.mode is mode
    assert status.alarms == alarms
    assert status.permission is False and status.speed_override == 1.0
    door_or_person = line[1:5] in ("Door", "Jog|", "Home")
    assert status.operator_present is (True if door_or_person else None)


def test_alarm_code_and_overrides_are_carried() -> None:
    report = parse_status("<Alarm|MPos:0,0,0|Ov:120,50,80>")
    assert overrides_percent(report) == (120, 50, 80)
    status = controller_status(
        report, feed_override_percent=120, alarm="ALARM:1 hard limit triggered"
    )
    assert status.alarms == ("ALARM:1 hard limit triggered",)
    assert status.speed_override == pytest.approx(1.2)
    assert overrides_percent(parse_status("<Idle|MPos:0,0,0>")) is None
    with pytest.raises(ValueError, match="Ov: expected three integers"):
        overrides_percent(parse_status("<Idle|Ov:100,x,100>"))


# ------------------------------------------------------------------------------ settings


def test_the_driver_is_registered_as_a_streaming_driver_without_cycles() -> None:
    cls = load_driver_class("grbl")
    assert cls is GrblDriver
    assert cls.capabilities == Capability.TOOLPATH_STREAMING
    assert not cls.capabilities & Capability.CYCLES
    assert cls.settings_type is GrblSettings


def test_config_with_a_grbl_controller_validates_into_grbl_settings(tmp_path: Path) -> None:
    machine = tmp_path / "machines" / "mill.yaml"
    machine.parent.mkdir()
    machine.write_text(GRBL_MACHINE)
    path = write_config(
        tmp_path,
        "port: /dev/ttyUSB0\nmachine: machines/mill.yaml\n"
        "protocol: dnc\nxon_xoff: true\nfilter: {lookahead_lines: 50}\n",
    )
    entry = load_config(path).controllers[0]
    s = entry.settings
    assert isinstance(s, GrblSettings)
    assert (s.port, s.protocol, s.rx_buffer_bytes, s.filter.lookahead_lines) == (
        "/dev/ttyUSB0",
        "dnc",
        128,
        50,
    )
    assert s.machine_settings(path.parent).name == "grbl-test"  # relative to the config file


def test_config_mistakes_name_file_line_and_key(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "port: /dev/ttyUSB0\nmachine: m.yaml\nprotocol: xmodem\n"
        "rx_buffer_bytes: 64\nmax_line_chars: 79\nbaudrat: 9600\n",
    )
    issues = {i.path: i for i in config_issues(path)}
    lines = path.read_text().splitlines()

    def line_of(text: str) -> int:
        return 1 + next(k for k, line in enumerate(lines) if text in line)

    proto = issues["controllers[0].settings.protocol"]
    assert proto.line == line_of("protocol: xmodem") and "one of 'grbl', 'dnc'" in proto.message
    assert "did you mean 'baudrate'" in issues["controllers[0].settings.baudrat"].message
    # one of the two (the cross-field check) only runs once the object builds, so fix the typo
    path.write_text(path.read_text().replace("baudrat:", "baudrate:").replace("xmodem", "grbl"))
    (only,) = config_issues(path)
    assert only.path == "controllers[0].settings.max_line_chars"
    assert only.line == line_of("max_line_chars: 79")
    assert "fit the 64-byte receive buffer" in only.message


def test_an_inline_machine_is_checked_at_its_own_lines(tmp_path: Path) -> None:
    bad = GRBL_MACHINE.replace("eps_m: 2.0e-6", "eps_m: -1").replace("b_s2: 0.0005", "b_s2: 0")
    path = write_config(tmp_path, "port: /dev/ttyUSB0\nmachine:\n" + indented(bad, 2))
    lines = path.read_text().splitlines()
    found = {(i.path, i.line) for i in config_issues(path)}
    eps_line = 1 + next(k for k, line in enumerate(lines) if "eps_m: -1" in line)
    b_line = 1 + next(k for k, line in enumerate(lines) if "b_s2: 0" in line)
    assert ("controllers[0].settings.machine.eps_m", eps_line) in found
    assert ("controllers[0].settings.machine.axes.X.b_s2", b_line) in found
    path.write_text(config_text("port: /dev/ttyUSB0\nmachine:\n" + indented(GRBL_MACHINE, 2)))
    settings = load_config(path).controllers[0].settings
    assert settings.machine_settings().axes["Y"].gear_ratio == 25


# ------------------------------------------------------------------------------ the driver


def settings_for(port: str, **kw: Any) -> GrblSettings:
    return GrblSettings(port=port, machine=str(ROOT / "config/machines/farouki2022.yaml"), **kw)


def test_read_status_run_cycle_and_stop_motion_against_the_peer(peer: Any) -> None:
    p = peer("--time-scale", "1")

    async def scenario() -> None:
        driver = GrblDriver("mill1", settings_for(p.path, exclusive=False))
        assert (await driver.read_status()).mode is ControllerMode.DISCONNECTED
        await driver.connect()
        try:
            idle = await driver.read_status()
            assert idle.mode is ControllerMode.STOPPED and idle.speed_override == 1.0
            # A program someone else streams: a 100 mm move at 600 mm/min takes 10 s.
            other = open_serial(p.path, exclusive=False)
            try:
                other.write(b"G21G90G1X100F600\n", 1.0)
                deadline = time.monotonic() + 5.0
                while (status := await driver.read_status()).mode is not ControllerMode.PRODUCTION:
                    assert time.monotonic() < deadline, status
                    await asyncio.sleep(0.02)
                with pytest.raises(DriverError, match="runs no test cycles"):
                    await driver.run_cycle(
                        BacklashCycle("mill1", "x", 1, 1.0, 25.0, 1.0, 0.1, 100.0, 19, 0.0)
                    )
                await driver.stop_motion()
                await driver.stop_motion()  # safe to repeat
                after = await driver.read_status()
                assert after.mode is ControllerMode.STOPPED and after.alarms == ()
            finally:
                other.close()
        finally:
            await driver.close()
        assert (await driver.read_status()).mode is ControllerMode.DISCONNECTED
        await driver.stop_motion()  # not connected: opens the port for the purpose

    asyncio.run(scenario())
    p.wait_idle()  # answered after the last reset, so the peer has taken that reset in
    stats = p.stats()
    assert stats["resets"] == 3 and stats["alarm"] is None  # held before reset: no ALARM:3
    assert 0.0 < stats["position_mm"][0] < 100.0  # stopped on the way


def test_a_silent_port_is_a_driver_error_naming_it(tmp_path: Path) -> None:
    import os
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)
    try:

        async def scenario() -> None:
            driver = GrblDriver("mill1", settings_for(os.ttyname(slave), reply_timeout_s=0.2))
            await driver.connect()
            try:
                with pytest.raises(DriverError, match=r"no status report .* within 0.2 s"):
                    await driver.read_status()
            finally:
                await driver.close()

        asyncio.run(scenario())
    finally:
        os.close(master)
        os.close(slave)


def test_streaming_refuses_while_the_status_connection_is_open(peer: Any) -> None:
    p = peer("--time-scale", "200")

    async def scenario() -> None:
        driver = GrblDriver("mill1", settings_for(p.path))
        await driver.connect()
        try:
            with pytest.raises(DriverError, match="close the status connection"):
                driver.stream(["G1 X1 F100\n"])
        finally:
            await driver.close()

    asyncio.run(scenario())


# ------------------------------------------------------------------------------ the CLI


def test_cli_streams_through_the_configured_controller(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "machines").mkdir()
    (tmp_path / "machines" / "mill.yaml").write_text(GRBL_MACHINE)
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(40))
    expected = "".join(
        filter_lines(
            zigzag(40).splitlines(keepends=True), load_machine(tmp_path / "machines" / "mill.yaml")
        )
    )
    p = peer("--time-scale", "200")
    config = write_config(tmp_path, f"port: {p.path}\nmachine: machines/mill.yaml\n")
    assert (
        jha("feedrate", "stream", str(src), "--config", str(config), "--controller", "mill1")
        == EX_OK
    )
    err = capsys.readouterr().err
    n_out = expected.count("\n")
    assert f"{n_out} lines acknowledged of {n_out} sent (40 program lines)" in err
    assert "38 reversals modulated" in err and "\rlines " in err
    idle = p.wait_idle()
    assert math.dist(idle.machine_mm[:2], (20.0, 19.5)) < 1e-3
    stats = p.stats()
    assert stats["lines_received"] == stats["oks_sent"] == n_out
    assert stats["rx_overflow_bytes"] == 0 and stats["rx_max_bytes"] <= 128


def test_cli_inline_machine_and_filter_off(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(12))
    p = peer("--time-scale", "200")
    config = write_config(
        tmp_path,
        f"port: {p.path}\nrx_buffer_bytes: 64\n"
        "filter: {enabled: false}\nmachine:\n" + indented(GRBL_MACHINE, 2),
    )
    assert (
        jha(
            "feedrate",
            "stream",
            str(src),
            "--config",
            str(config),
            "--controller",
            "mill1",
            "--quiet",
        )
        == EX_OK
    )
    assert "12 lines acknowledged of 12 sent, " in capsys.readouterr().err
    stats = p.stats()
    assert stats["oks_sent"] == 12 and stats["rx_max_bytes"] <= 64


def test_cli_config_errors(peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(4))
    config = write_config(tmp_path, "port: /dev/null\nmachine: missing.yaml\n")
    run = ("feedrate", "stream", str(src), "--config", str(config))
    assert jha(*run, "--controller", "mill2") == EX_CONFIG
    assert "no controller named 'mill2' (controllers: mill1)" in capsys.readouterr().err
    assert jha(*run, "--controller", "mill1") == EX_CONFIG
    assert "missing.yaml" in capsys.readouterr().err
    assert jha(*run, "--controller", "mill1", "--port", "/dev/null") == EX_CONFIG
    assert "--port cannot be combined with --config" in capsys.readouterr().err
    assert jha("feedrate", "stream", str(src), "--config", str(config)) == EX_CONFIG
    assert "--config and --controller go together" in capsys.readouterr().err
    sim = tmp_path / "sim.yaml"
    joint = "      - {name: x, index: 1, gear_ratio: 25, backlash_cycle: {motor_speed_rps: 1}}\n"
    sim.write_text(
        config_text("{}")
        .replace("driver: grbl", "driver: sim")
        .replace("    settings:\n      {}\n", "")
        .replace("    joints: []\n", "    joints:\n" + joint)
    )
    assert (
        jha("feedrate", "stream", str(src), "--config", str(sim), "--controller", "mill1")
        == EX_CONFIG
    )
    assert "driver sim; G-code is streamed to a serial CNC controller with driver: grbl" in (
        capsys.readouterr().err
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        config_text(
            "port: /dev/null\nmachine:\n"
            + indented(GRBL_MACHINE.replace("eps_m: 2.0e-6", "eps_m: 0"), 2)
        )
    )
    assert (
        jha("feedrate", "stream", str(src), "--config", str(bad), "--controller", "mill1")
        == EX_CONFIG
    )
    line = 1 + next(k for k, t in enumerate(bad.read_text().splitlines()) if "eps_m: 0" in t)
    assert f"{bad}:{line}: controllers[0].settings.machine.eps_m" in capsys.readouterr().err


def test_cli_error_from_the_controller_names_the_program_line(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(10))
    p = peer("--time-scale", "200", "--error-at", "12:33")
    config = write_config(tmp_path, f"port: {p.path}\nmachine:\n" + indented(GRBL_MACHINE, 2))
    assert (
        jha(
            "feedrate",
            "stream",
            str(src),
            "--config",
            str(config),
            "--controller",
            "mill1",
            "--quiet",
        )
        == EX_DATAERR
    )
    err = capsys.readouterr().err
    assert f"{src}:" in err and "error:33" in err and "(line 12 of the filtered stream)" in err


def test_dnc_hold_codes_are_checked_with_the_config(tmp_path: Path) -> None:
    base = "port: /dev/ttyUSB0\nmachine: m.yaml\n"
    cases = (
        (
            "protocol: grbl\ndnc_feed_hold: '!'\n",
            "dnc_feed_hold",
            "expected only with protocol: dnc (GRBL's feed hold, cycle start and reset are "
            "'!', '~' and 0x18), found '!'",
        ),
        (
            'protocol: dnc\nxon_xoff: true\ndnc_feed_hold: "!\\x13"\n',
            "dnc_feed_hold",
            "no line end (CR, LF) and no XON/XOFF (0x11, 0x13) byte",
        ),
        (
            "protocol: dnc\nxon_xoff: true\ndnc_resume: 'cycle start'\n",
            "dnc_resume",
            "expected 1 to 8 ASCII characters, found 'cycle start'",
        ),
    )
    for extra, key, message in cases:
        path = write_config(tmp_path, base + extra)
        (issue,) = config_issues(path)
        assert issue.path == f"controllers[0].settings.{key}", issue
        assert message in issue.message
        assert issue.line == 1 + next(
            k for k, line in enumerate(path.read_text().splitlines()) if f"{key}:" in line
        )
    path = write_config(
        tmp_path,
        base + "protocol: dnc\nxon_xoff: true\ndnc_feed_hold: '!'\ndnc_resume: '~'\n"
        'dnc_reset: "\\x18"\n',
    )
    options = GrblDriver("mill1", load_config(path).controllers[0].settings).stream_options()
    assert isinstance(options, DncOptions)
    assert (options.hold_code, options.resume_code, options.reset_code) == (b"!", b"~", b"\x18")


def test_cli_dnc_stream_from_the_config_holds_the_machine_on_an_error(
    peer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """G3 end to end: the configured hold code reaches the controller when the DNC stream
    stops on an error; without --confirm-ready nothing is sent at all (G1)."""
    src = tmp_path / "zz.gcode"
    src.write_text(zigzag(40))
    p = peer("--dnc", "--time-scale", "20", "--error-at", "30:33")
    config = write_config(
        tmp_path,
        f"port: {p.path}\nprotocol: dnc\nxon_xoff: true\ndnc_feed_hold: '!'\n"
        # A DNC control with XON/XOFF (the peer in --dnc mode), its hold code and no reset
        # code: the hold stays (tests/feedrate/test_gcode_stream_dnc_stop.py: with one).
        "filter: {enabled: false}\nmachine:\n"
        + indented(GRBL_MACHINE.replace("dialect: grbl", "dialect: generic"), 2),
    )
    run = (
        "feedrate",
        "stream",
        str(src),
        "--config",
        str(config),
        "--controller",
        "mill1",
        "--quiet",
    )
    assert jha(*run) == 75
    assert "--confirm-ready" in capsys.readouterr().err
    assert jha(*run, "--confirm-ready") == EX_DATAERR
    err = capsys.readouterr().err
    assert "error:33" in err and "feed hold (!) sent" in err
    assert p.state().state == "Hold"
    stats = p.stats()
    assert stats["held"] and 30 <= stats["lines_received"] < 40


def test_the_example_config_validates() -> None:
    from agent.cli.feedrate.stream import configured_target

    path = ROOT / "config" / "cnc_example.yaml"
    assert config_issues(path) == []
    for name, machine_name, protocol in (
        ("mill1", "farouki2022", "grbl"),
        ("mill2", "mill2", "dnc"),
    ):
        driver, machine = configured_target(path, name)
        assert isinstance(driver, GrblDriver) and driver.controller == name
        assert machine.name == machine_name and driver.settings.protocol == protocol
    _, inline = configured_target(path, "mill2")
    assert inline.source.startswith(f"{path}:")  # an inline machine says where it is written
