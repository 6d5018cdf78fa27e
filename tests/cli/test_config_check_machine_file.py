"""`jha config check` reads the machine file a `driver: grbl` controller names, as
`jha feedrate stream` will: a file that is missing or has mistakes, and a DNC drip feed to a
controller not said to pace it with XON/XOFF (GRBL: its 128-byte buffer overruns, issue 14 item
14, issue 28 item 1), whatever dialect the machine file names, fail with exit 78 at the line of
the setting, before anything is streamed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent.cli.main import main
from agent.errors import EX_CONFIG, EX_OK
from tests.support.drivers.grbl import GRBL_MACHINE

EXAMPLE = Path(__file__).parents[2] / "config" / "cnc_example.yaml"


def cnc_config(protocol: str, machine: str, *, xon_xoff: bool = False) -> str:
    return (
        "controllers:\n"
        "  - name: mill\n"
        "    driver: grbl\n"
        "    settings:\n"
        "      port: /dev/ttyUSB0\n"
        f"      protocol: {protocol}\n"
        f"      machine: {machine}\n"
        + ("      xon_xoff: true\n" if xon_xoff else "")
        + "    joints: []\n"
    )


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    config = tmp_path / "cnc.yaml"
    config.write_text(text)
    code = main(["config", "check", str(config)])
    return code, capsys.readouterr().err


@pytest.fixture
def machines(tmp_path: Path) -> Path:
    (tmp_path / "grbl.yaml").write_text(GRBL_MACHINE)
    (tmp_path / "generic.yaml").write_text(
        GRBL_MACHINE.replace("dialect: grbl", "dialect: generic")
    )
    return tmp_path


@pytest.mark.parametrize("machine", ["grbl.yaml", "generic.yaml", "SHIPPED"])
def test_dnc_without_xon_xoff_is_refused_whatever_the_machine_file_says(
    machines: Path, capsys: pytest.CaptureFixture[str], machine: str
) -> None:
    # The field report of issue 28: the shipped machine file (dialect generic) let a drip feed
    # to GRBL through. The controller's pacing is its own setting, xon_xoff.
    shipped = str(EXAMPLE.parent / "machines" / "farouki2022.yaml")
    code, err = check(machines, cnc_config("dnc", machine.replace("SHIPPED", shipped)), capsys)
    assert code == EX_CONFIG
    assert "cnc.yaml:6: controllers[0].settings.protocol: expected xon_xoff: true" in err
    assert "GRBL 1.1 has no XON/XOFF: use protocol grbl" in err


def test_character_counting_to_grbl_and_dnc_to_a_paced_controller_pass(
    machines: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check(machines, cnc_config("grbl", "grbl.yaml"), capsys)[0] == EX_OK
    assert check(machines, cnc_config("dnc", "generic.yaml", xon_xoff=True), capsys)[0] == EX_OK


def test_an_inline_grbl_machine_with_dnc_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dumped = yaml.safe_dump(yaml.safe_load(GRBL_MACHINE), sort_keys=False)
    inline = "".join(f"\n        {line}" for line in dumped.splitlines())
    text = cnc_config("dnc", "MACHINE").replace(" MACHINE", inline)
    code, err = check(tmp_path, text, capsys)
    assert code == EX_CONFIG
    assert "controllers[0].settings.protocol: expected xon_xoff: true" in err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "No such file or directory"),
        (GRBL_MACHINE.replace("gear_ratio: 25", "gear_ratio: -3"), "gear_ratio"),
    ],
    ids=["missing", "a mistake inside"],
)
def test_a_machine_file_that_cannot_be_used_is_named_at_the_machine_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    if content is not None:
        (tmp_path / "m.yaml").write_text(content)
    code, err = check(tmp_path, cnc_config("grbl", "m.yaml"), capsys)
    assert code == EX_CONFIG
    assert "cnc.yaml:7: controllers[0].settings.machine: expected a valid machine file" in err
    assert expected in err


def test_the_cnc_example_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(EXAMPLE)]) == EX_OK
    assert "OK" in capsys.readouterr().out
