"""`jha config check` checks the MQTT password file as the publisher does when the daemon starts
(agent.config.mqtt.read_password_text, docs/publish.md): a missing file or one that group or
others may read or write, or that a person's account owns, fails with exit 78 at the line of
`password_file`; a 0400 or 0600 file of the current user passes; the password itself is never
printed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.file_findings import password_file_findings
from agent.config.load import load_config
from agent.errors import EX_CONFIG, EX_OK

SECRET = "s3cr3t-never-printed"
LINE = 12  # of password_file in the config below


def config_text(password_file: Path | str) -> str:
    return f"""\
controllers:
  - name: robot
    driver: sim
    joints:
      - name: j1
        index: 1
        gear_ratio: 40
        backlash_cycle: {{motor_speed_rps: 100}}
publish:
  mqtt:
    host: broker.example
    password_file: {password_file}
    username: jha
"""


def run_check(
    tmp_path: Path, password_file: Path | str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, Path]:
    config = tmp_path / "jha.yaml"
    config.write_text(config_text(password_file))
    code = main(["config", "check", str(config)])
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    return code, captured.err, config


def password_file(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / "mqtt-password"
    path.write_text(SECRET + "\n")
    path.chmod(mode)
    return path


def test_a_missing_password_file_fails_naming_the_config_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-password"
    code, err, config = run_check(tmp_path, missing, capsys)
    assert code == EX_CONFIG == 78
    assert (
        f"{config}:{LINE}: publish.mqtt.password_file: expected a file that only the service "
        f"user may read or write (mode 0600 or 0400), found {missing}: cannot read the MQTT "
        "password file: No such file or directory"
    ) in err


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o660])
def test_a_password_file_others_may_read_or_write_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    path = password_file(tmp_path, mode)
    code, err, config = run_check(tmp_path, path, capsys)
    assert code == EX_CONFIG
    assert f"{config}:{LINE}: publish.mqtt.password_file: " in err
    assert f"permissions {mode:04o} are too open" in err and f"chmod 600 {path}" in err


@pytest.mark.parametrize("mode", [0o400, 0o600])
def test_a_password_file_only_its_owner_may_read_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    path = password_file(tmp_path, mode)
    assert path.stat().st_uid == os.geteuid()
    code, err, _ = run_check(tmp_path, path, capsys)
    assert code == EX_OK, err
    assert "publish.mqtt.password_file" not in err


# A person's account (from login.defs' UID_MIN on) and a system account such as the service's.
PERSON_UID, SYSTEM_UID = 4242, 998


def test_a_password_file_a_person_owns_fails_even_at_0600(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert os.geteuid() == 0, "make test runs as root (it installs Debian packages)"
    path = password_file(tmp_path, 0o600)
    os.chown(path, PERSON_UID, PERSON_UID)
    code, err, config = run_check(tmp_path, path, capsys)
    assert code == EX_CONFIG
    assert f"{config}:{LINE}: publish.mqtt.password_file: " in err
    assert f"owned by uid {PERSON_UID}, who may read and change it" in err
    assert f"chown root {path}" in err


def test_root_checking_a_file_of_the_service_user_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `sudo jha config check` on the installed config: the secret belongs to the system user jha.
    assert os.geteuid() == 0, "make test runs as root (it installs Debian packages)"
    path = password_file(tmp_path, 0o400)
    os.chown(path, SYSTEM_UID, SYSTEM_UID)
    code, err, _ = run_check(tmp_path, path, capsys)
    assert code == EX_OK, err


def test_an_empty_password_file_fails_as_the_daemon_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mqtt-password"
    path.write_text("\n")
    path.chmod(0o600)
    code, err, _ = run_check(tmp_path, path, capsys)
    assert code == EX_CONFIG
    assert f"{path}: the MQTT password file is empty" in err


def test_a_systemd_credential_not_yet_created_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # LoadCredential= creates this copy only while the service runs: nothing to check yet.
    credential = "/run/credentials/jha-test-no-such.service/mqtt-password"
    code, err, config = run_check(tmp_path, credential, capsys)
    assert code == EX_OK, err
    assert f"{config}:{LINE}: publish.mqtt.password_file: warning: {credential} is not there" in err
    errors, warnings = password_file_findings(load_config(config), config)
    assert errors == [] and len(warnings) == 1
