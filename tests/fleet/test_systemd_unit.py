"""systemd/jha-fleet.service: `systemd-analyze verify` silent and `security` at most 2.0 (on a
copy whose ExecStart names this checkout's jha, the only line changed), and every hardening
setting of the agent's own unit kept or made stricter."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.summary import record, security

FLEET_UNIT = ROOT / "systemd/jha-fleet.service"
AGENT_UNIT = ROOT / "systemd/joint-health-agent.service"
INSTALLED_JHA = "/opt/joint-health-agent/venv/bin/jha"
# Settings of the agent's unit that are about its machine, not its hardening.
_AGENT_ONLY = {"DeviceAllow", "SupplementaryGroups", "User", "Group", "StateDirectory",
               "StateDirectoryMode", "RuntimeDirectory", "RuntimeDirectoryMode",
               "WorkingDirectory", "KillMode", "ExecReload", "Documentation", "Description",
               "ExecStart", "After", "Wants", "WatchdogSec", "UMask",
               "ConfigurationDirectory", "ConfigurationDirectoryMode"}  # fmt: skip


def settings(unit: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def local_copy(tmp_path: Path) -> Path:
    jha = ROOT / ".venv/bin/jha"
    assert jha.exists(), "the checkout's venv (make venv) provides bin/jha"
    copy = tmp_path / "jha-fleet.service"
    copy.write_text(FLEET_UNIT.read_text().replace(INSTALLED_JHA, str(jha)))
    return copy


def test_verify_is_silent(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(local_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""


def test_security_exposure_at_most_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(local_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    level = float(match.group(1))
    record("systemd exposure", "jha-fleet.service", f"{level:.1f}")
    security("fleet: systemd unit exposure <= 2.0", passed=level <= 2.0)
    assert level <= 2.0


def test_the_agent_units_hardening_is_kept() -> None:
    agent, fleet = settings(AGENT_UNIT), settings(FLEET_UNIT)
    for key, values in agent.items():
        if key in _AGENT_ONLY:
            continue
        assert key in fleet, f"{key} of the agent's unit is missing"
        if key == "RestrictAddressFamilies":  # fewer families: stricter
            assert set(fleet[key][0].split()) <= set(values[0].split())
        elif key == "DevicePolicy":
            assert fleet[key] == ["closed"]
        elif key not in ("ExecStart", "Type"):
            assert fleet[key] == values, key
    # Stricter than the agent's, which needs devices and a user that owns files for years.
    assert fleet["PrivateDevices"] == ["yes"] and fleet["PrivateUsers"] == ["yes"]
    assert fleet["DynamicUser"] == ["yes"] and fleet["UMask"] == ["0077"]
    assert fleet["ExecStart"] == [f"{INSTALLED_JHA} fleet --config /etc/jha-fleet/fleet.yaml"]
