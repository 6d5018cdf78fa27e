"""The daemon under the unit's restrictions, rebuilt without systemd (PID 1 here is not).

The installed agent runs `jha config check` and `jha run --once` (simulated robot) inside
namespaces that rebuild the unit's restrictions with the kernel mechanisms systemd uses:
read-only mounts (ProtectSystem=strict, ProtectHome, PrivateTmp, ProtectKernelTunables,
ProtectControlGroups), a proc of its own (ProtectProc=invisible, ProcSubset=pid), the devices
cgroup (DevicePolicy=closed + DeviceAllow), a non-root user with group dialout and no
capability (User=, SupplementaryGroups=, CapabilityBoundingSet=, AmbientCapabilities=,
NoNewPrivileges=) and seccomp filters built from systemd's own syscall groups
(SystemCallFilter=, SystemCallErrorNumber=, SystemCallArchitectures=, MemoryDenyWriteExecute=,
RestrictAddressFamilies=, RestrictNamespaces=, RestrictRealtime=, RestrictSUIDSGID=).
Not rebuilt: ProtectHostname (UTS namespace), ProtectClock beyond @clock, LockPersonality,
RemoveIPC, PrivateMounts. The notify socket is given (READY and STATUS must come through it);
the watchdog timing is the daemon tests' business.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.service.systemd_sandbox import (
    DIALOUT_GID,
    FAMILIES,
    LAUNCHER,
    NAMESPACE_FLAGS,
    PROBE,
    SANDBOX_CONFIG,
    SANDBOX_SH,
    SERVICE_UID,
    allowed_syscalls,
    device_rules,
)
from tests.support.summary import record, security


@pytest.fixture(scope="module")
def sandbox(stage: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of the installed agent in the rebuilt sandbox; the tests below read it."""
    base = tmp_path_factory.mktemp("sandbox")
    root = base / "root"
    shutil.copytree(stage, root, symlinks=True)
    conf = root / "etc/joint-health-agent"
    (conf / "config.yaml").write_text(SANDBOX_CONFIG)
    (pth,) = root.glob("opt/joint-health-agent/venv/lib/python*/site-packages/jha-deps.pth")
    deps = pth.read_text().strip()
    pth.write_text("/run/jha-deps\n")
    state, extra = base / "state", base / "extra"
    state.mkdir(mode=0o750)
    extra.mkdir()
    os.chown(state, SERVICE_UID, SERVICE_UID)
    for path in (conf, conf / "config.yaml"):  # root:jha as install.sh sets them
        os.chown(path, 0, SERVICE_UID)
    dialout = DIALOUT_GID
    (extra / "dialout-only").write_text("serial\n")
    os.chown(extra / "dialout-only", 0, dialout)
    os.chmod(extra / "dialout-only", 0o640)
    (extra / "launcher.py").write_text(LAUNCHER)
    (extra / "probe.py").write_text(PROBE)
    spec = {"allow": allowed_syscalls(), "families": FAMILIES, "namespace_flags": NAMESPACE_FLAGS}
    (extra / "spec.json").write_text(json.dumps(spec))
    os.chmod(extra, 0o755)
    devices = Path("/sys/fs/cgroup/devices")
    cgroup = devices / f"jha-sandbox-{os.getpid()}" if devices.is_dir() else None
    if cgroup is not None:
        cgroup.mkdir()
        (cgroup / "devices.deny").write_text("a")
        for rule in device_rules():
            (cgroup / "devices.allow").write_text(rule)
    notify_dir = base / "notify"  # the service manager's end of NOTIFY_SOCKET
    notify_dir.mkdir(mode=0o755)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_dir / "notify"))
    os.chmod(notify_dir / "notify", 0o666)
    env = {
        **os.environ,
        "STAGE": str(root),
        "STATE": str(state),
        "EXTRA": str(extra),
        "NOTIFY_DIR": str(notify_dir),
        "DEPS": deps,
        "SUID": str(SERVICE_UID),
        "DIALOUT": str(dialout),
        "CGROUP": str(cgroup or ""),
    }
    try:
        proc = subprocess.run(
            [
                "unshare",
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                "--propagation",
                "private",
                "sh",
                "-euc",
                SANDBOX_SH,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        if cgroup is not None:
            cgroup.rmdir()
    messages = []
    notify.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        while True:
            messages.append(notify.recv(4096).decode())
    notify.close()
    probe = next((line[6:] for line in proc.stdout.splitlines() if line.startswith("PROBE ")), "")
    assert probe, f"the probe did not report:\n{proc.stdout}\n{proc.stderr}"
    return {
        "probe": json.loads(probe),
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "state": state,
        "devices": cgroup is not None,
        "notify": messages,
    }


def test_sandbox_runs_the_installed_agent(sandbox: dict[str, Any]) -> None:
    out = sandbox["stdout"]
    assert "CHECK rc=0" in out and "/etc/joint-health-agent/config.yaml: OK" in out, out
    assert "RUN rc=0" in out, f"{out}\n{sandbox['stderr']}"
    state: Path = sandbox["state"]
    assert (state / "history.sqlite").is_file()
    assert list(state.glob("captures/robot1/axis1/*.npz"))
    assert list(state.glob("reports/*/report.json"))
    # Written by the service user, and nothing world-readable (UMask=0027).
    for path in state.rglob("*"):
        assert path.stat().st_uid == SERVICE_UID, path
        assert path.stat().st_mode & 0o007 == 0, (path, oct(path.stat().st_mode))
    assert "stays writable" not in sandbox["stderr"], sandbox["stderr"]
    # Type=notify works through the sandbox: the daemon reached the socket systemd would give.
    assert "READY=1" in sandbox["notify"], sandbox["notify"]
    assert any(m.startswith("STATUS=") for m in sandbox["notify"])
    security("daemon ran a cycle under the rebuilt unit sandbox", True)


def test_sandbox_identity_has_no_privilege(sandbox: dict[str, Any]) -> None:
    p = sandbox["probe"]
    assert p["uid"] == SERVICE_UID and p["gid"] == SERVICE_UID
    assert set(p["caps"].values()) == {"0000000000000000"}
    assert p["no_new_privs"] == "1" and p["seccomp"] == "2"
    assert DIALOUT_GID in p["groups"]  # SupplementaryGroups=dialout
    assert p["dialout_file_read"] == "allowed"  # what a serial port of group dialout needs
    assert p["config_read"] == "allowed"


def test_sandbox_file_system_is_read_only_but_state(sandbox: dict[str, Any]) -> None:
    writes = sandbox["probe"]["write"]
    writable = {path for path, result in writes.items() if result == "allowed"}
    assert writable == {
        "/var/lib/joint-health-agent/jha-probe",
        "/run/joint-health-agent/jha-probe",
        "/tmp/jha-probe",
        "/var/tmp/jha-probe",
        "/dev/shm/jha-probe",
    }, writes
    p = sandbox["probe"]
    assert p["home"] == "EACCES" and p["root_home"] == "EACCES"  # ProtectHome=yes
    assert p["proc_cpuinfo"] is False and p["proc_sys"] is False  # ProcSubset=pid
    assert p["cpu_count"] >= 1  # ...and os.cpu_count() still works (it reads /sys)
    security("sandbox: only state, runtime and private tmp dirs writable", True)


def test_sandbox_devices_are_closed(sandbox: dict[str, Any]) -> None:
    p = sandbox["probe"]
    assert p["dev_null"] == "allowed"
    if sandbox["devices"]:
        assert p["dev_kmsg"] == "EPERM"  # mode 0644, refused by DevicePolicy=closed
    record("systemd", "DevicePolicy exercised (devices cgroup v1)", str(sandbox["devices"]))


def test_sandbox_system_calls_are_filtered(sandbox: dict[str, Any]) -> None:
    p = sandbox["probe"]
    assert p["wx_mmap"] == "EPERM"  # MemoryDenyWriteExecute
    assert p["packet_socket"] == "EAFNOSUPPORT"  # RestrictAddressFamilies (not EPERM: no cap)
    for family in ("inet", "inet6", "unix", "netlink"):
        assert p[f"{family}_socket"] == "allowed", family
    assert p["sched_setaffinity"] == "EPERM" and p["setpriority"] == "EPERM"  # ~@resources
    assert p["unshare_user"] == "EPERM"  # RestrictNamespaces
    assert p["chmod_suid"] == "EPERM"  # RestrictSUIDSGID
    security("sandbox: W+X memory, packet sockets, namespaces, setuid bits refused", True)


def test_sandbox_keeps_what_the_agent_needs(sandbox: dict[str, Any]) -> None:
    p = sandbox["probe"]
    assert p["scipy_solve"] < 1e-9
    assert p["spawn_pool"] == [2.0, 3.0]  # multiprocessing spawn: semaphores, pipes, exec
    assert p["sqlite_wal"] == "wal"
    assert p["asyncio"] == "ok"
    # The UR worker's SCHED_FIFO request is refused with EPERM, and it carries on.
    assert (
        "no real-time priority" in p["ur_realtime"]
        and "Operation not permitted" in p["ur_realtime"]
    )
    record("systemd", "ctypes callbacks under MemoryDenyWriteExecute", p["ctypes_callback"])
