"""The systemd unit: `systemd-analyze verify` and `security` on the installed tree, and what
the unit says.

PID 1 here is not systemd, so the unit cannot be started
(tests/service/systemd/test_systemd_sandbox.py runs the agent under the unit's restrictions
instead). verify and security run on the tree the real install script builds (DESTDIR), seen
at its final paths: a private mount namespace binds the staged /opt/joint-health-agent and
/etc/systemd/system over the host's, so ExecStart names an executable that exists and the
host's own units (network-online.target, ...) resolve. Nothing outside the namespace changes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.summary import record, security

UNIT_FILE = ROOT / "systemd/joint-health-agent.service"
UNIT = "joint-health-agent.service"
PREFIX = "/opt/joint-health-agent"
EXPOSURE_MAX = 2.0


def host_view(
    stage: Path, command: str, units: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `command` where /opt/joint-health-agent and /etc/systemd/system are the staged ones."""
    script = f"""
        mount -t tmpfs -o mode=0755 tmpfs /opt
        mkdir {PREFIX}
        mount --bind {stage}{PREFIX} {PREFIX}
        mount --bind {units or stage / "etc/systemd/system"} /etc/systemd/system
        {command}
    """
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-euc", script],
        capture_output=True,
        text=True,
        timeout=120,
    )


def exposure(output: str) -> float:
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", output)
    assert match, f"no exposure level in:\n{output}"
    return float(match.group(1))


# --- verify and security ---------------------------------------------------------------------


def test_verify_is_silent_on_the_installed_unit(stage: Path) -> None:
    proc = host_view(stage, f"systemd-analyze verify {UNIT}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    assert proc.stdout == ""
    security("systemd-analyze verify: empty stderr", True)


def test_verify_would_see_a_missing_executable_or_a_typo(stage: Path, tmp_path: Path) -> None:
    """The silence above means something: without the install, or with a typo, verify speaks."""
    bare = subprocess.run(
        ["systemd-analyze", "verify", str(UNIT_FILE)], capture_output=True, text=True
    )
    if not Path(PREFIX).exists():  # this machine has no real install to hide the point
        assert f"{PREFIX}/venv/bin/jha is not executable" in bare.stderr
    units = tmp_path / "units"
    units.mkdir()
    (units / UNIT).write_text(
        UNIT_FILE.read_text().replace("ProtectSystem=strict", "ProtectSytem=strict")
    )
    typo = host_view(stage, f"systemd-analyze verify {UNIT}", units)
    assert "Unknown key 'ProtectSytem'" in typo.stderr


def test_security_exposure_is_at_most_2(stage: Path) -> None:
    proc = host_view(stage, f"systemd-analyze security --offline=true --no-pager {UNIT}")
    assert proc.returncode == 0, proc.stderr
    level = exposure(proc.stdout)
    record("systemd", "security exposure (offline, <= 2.0)", f"{level:.1f}")
    security(f"systemd-analyze security exposure {level:.1f} <= {EXPOSURE_MAX}", level <= 2.0)
    assert level <= EXPOSURE_MAX, proc.stdout
    # The settings the issue names, as systemd itself judges them (a ✓ on each line).
    for check in (
        "ProtectSystem=",
        "CapabilityBoundingSet=~CAP_SYS_ADMIN",
        "NoNewPrivileges=",
        "RestrictAddressFamilies=~AF_PACKET",
        "SystemCallFilter=~@privileged",
        "SystemCallArchitectures=",
        "MemoryDenyWriteExecute=",
        "PrivateMounts=",
    ):
        line = next(x for x in proc.stdout.splitlines() if check in x)
        assert line.lstrip().startswith("✓"), line


def test_realtime_dropin_verifies_and_stays_under_2(stage: Path, tmp_path: Path) -> None:
    units = tmp_path / "units"
    shutil.copytree(stage / "etc/systemd/system", units)
    (units / f"{UNIT}.d").mkdir()
    shutil.copy(stage / PREFIX.lstrip("/") / "share/systemd/ur-realtime.conf", units / f"{UNIT}.d")
    proc = host_view(
        stage,
        f"systemd-analyze verify {UNIT}; systemd-analyze security --offline=true {UNIT}",
        units,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    level = exposure(proc.stdout)
    record("systemd", "security exposure with ur-realtime.conf", f"{level:.1f}")
    assert level <= EXPOSURE_MAX


# --- what the unit says ---------------------------------------------------------------------


def unit_lines() -> list[tuple[str, str, str, bool]]:
    """(section, key, value, commented) per setting; commented: a comment opens its block."""
    out: list[tuple[str, str, str, bool]] = []
    section, commented, previous = "", False, ""
    for raw in UNIT_FILE.read_text().splitlines():
        line = raw.strip()
        if line.startswith("["):
            section, commented = line.strip("[]"), False
        elif line.startswith("#"):
            commented = True
        elif "=" in line:
            key, value = line.split("=", 1)
            out.append((section, key, value, commented))
            commented = commented and previous != ""  # a blank line ends a commented block
        elif not line:
            commented = False
        previous = line
    return out


def test_unit_has_the_settings_the_issue_names() -> None:
    settings: dict[str, list[str]] = {}
    for _, key, value, _ in unit_lines():
        settings.setdefault(key, []).append(value)
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",
        "WatchdogSec": "30s",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "Restart": "on-failure",
        "TimeoutStopSec": "20s",
        "LimitNOFILE": "4096",
        "KillMode": "mixed",
        "User": "jha",
        "SupplementaryGroups": "dialout",
        "StateDirectory": "joint-health-agent",
        "ConfigurationDirectory": "joint-health-agent",
        "RuntimeDirectory": "joint-health-agent",
        "RuntimeDirectoryMode": "0750",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "DevicePolicy": "closed",
        "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
        "NoNewPrivileges": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_CAN AF_NETLINK",
        "SystemCallArchitectures": "native",
        "ProtectProc": "invisible",
        "ProcSubset": "pid",
        "MemoryDenyWriteExecute": "yes",
        "UMask": "0027",
        "PrivateMounts": "yes",
    }
    for key, value in expected.items():
        assert settings.get(key) == [value], (key, settings.get(key))
    assert settings["DeviceAllow"] == ["char-ttyS rw", "char-ttyUSB rw", "char-ttyACM rw"]
    assert settings["SystemCallFilter"] == ["@system-service", "~@privileged @resources"]
    assert settings["ExecStart"][0].startswith(f"{PREFIX}/venv/bin/jha run --config ")
    for absent in ("DynamicUser", "IPAddressDeny", "PrivateUsers", "PrivateDevices"):
        assert absent not in settings, absent


def test_every_setting_is_explained_by_a_comment() -> None:
    bare = [f"[{s}] {k}={v}" for s, k, v, commented in unit_lines() if not commented]
    bare = [b for b in bare if not b.startswith(("[Unit] Description=", "[Install]"))]
    assert bare == []
