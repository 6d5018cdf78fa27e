"""What rebuilds the systemd unit's restrictions without systemd, for
tests/service/systemd/test_systemd_sandbox.py: a seccomp launcher built from systemd's own
syscall groups, the probe the agent's process runs in there, the devices cgroup rules, and the
shell script that sets up the namespaces, mounts and identity before exec'ing the agent."""

from __future__ import annotations

import grp
import subprocess
from pathlib import Path

SERVICE_UID = 61999  # stands for user jha; no passwd entry, like a user only the unit knows
DIALOUT_GID = grp.getgrnam("dialout").gr_gid  # the serial ports' group (20 on Debian)
NEEDS_ROOT = "the namespace and cgroup setup needs root (make test runs as root here)"


# Loads seccomp filters equivalent to the unit's (libseccomp, as systemd uses), then execs.
LAUNCHER = r"""
import ctypes, errno, json, os, sys

spec = json.load(open(sys.argv[1]))
argv = sys.argv[sys.argv.index("--") + 1:]
lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)


class Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
lib.seccomp_rule_add_array.argtypes = [
    ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(Cmp)]
lib.seccomp_load.argtypes = [ctypes.c_void_p]
lib.seccomp_release.argtypes = [ctypes.c_void_p]
ALLOW, EQ, GE, MASKED_EQ = 0x7FFF0000, 4, 5, 7


def ERRNO(e):
    return 0x00050000 | e


def rule(ctx, action, name, *cmps):
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr < 0:  # not a system call of this architecture
        return
    arr = (Cmp * len(cmps))(*[Cmp(*c) for c in cmps]) if cmps else None
    r = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
    if r != 0:
        raise OSError(-r, f"seccomp rule {name} {cmps}")


def load(ctx):
    r = lib.seccomp_load(ctx)
    if r != 0:
        raise OSError(-r, "seccomp_load")
    lib.seccomp_release(ctx)


ctx = lib.seccomp_init(ALLOW)
# MemoryDenyWriteExecute=yes, the rules systemd adds
W, X = 0x2, 0x4
rule(ctx, ERRNO(errno.EPERM), "mmap", (2, MASKED_EQ, W | X, W | X))
rule(ctx, ERRNO(errno.EPERM), "mprotect", (2, MASKED_EQ, X, X))
rule(ctx, ERRNO(errno.EPERM), "pkey_mprotect", (2, MASKED_EQ, X, X))
rule(ctx, ERRNO(errno.EPERM), "shmat", (2, MASKED_EQ, 0o100000, 0o100000))
# RestrictAddressFamilies=
for family in range(64):
    if family not in spec["families"]:
        rule(ctx, ERRNO(errno.EAFNOSUPPORT), "socket", (0, EQ, family, 0))
rule(ctx, ERRNO(errno.EAFNOSUPPORT), "socket", (0, GE, 64, 0))
# RestrictNamespaces=yes (clone3 hides its flags in a struct: ENOSYS, glibc falls back to clone)
for flag in spec["namespace_flags"]:
    for name in ("unshare", "clone"):
        rule(ctx, ERRNO(errno.EPERM), name, (0, MASKED_EQ, flag, flag))
rule(ctx, ERRNO(errno.EPERM), "setns")
rule(ctx, ERRNO(errno.ENOSYS), "clone3")
# RestrictRealtime=yes: SCHED_FIFO, SCHED_RR, SCHED_DEADLINE
for policy in (1, 2, 6):
    rule(ctx, ERRNO(errno.EPERM), "sched_setscheduler", (1, EQ, policy, 0))
# RestrictSUIDSGID=yes
for bit in (0o4000, 0o2000):
    rule(ctx, ERRNO(errno.EPERM), "chmod", (1, MASKED_EQ, bit, bit))
    rule(ctx, ERRNO(errno.EPERM), "fchmod", (1, MASKED_EQ, bit, bit))
    rule(ctx, ERRNO(errno.EPERM), "fchmodat", (2, MASKED_EQ, bit, bit))
load(ctx)
# Last, as it forbids seccomp() itself: SystemCallFilter= (an allow list) with
# SystemCallErrorNumber=EPERM. A new libseccomp context knows the native architecture only,
# which is SystemCallArchitectures=native.
ctx = lib.seccomp_init(ERRNO(errno.EPERM))
for name in spec["allow"]:
    rule(ctx, ALLOW, name)
load(ctx)
os.execv(argv[0], argv)
"""

# What the agent's process may and may not do in there; each entry names what it proves.
PROBE = r"""
import concurrent.futures, contextlib, ctypes, errno, io, json, mmap, multiprocessing, os
import socket, sqlite3, asyncio

def outcome(fn):
    try:
        fn()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "allowed"


def write(path):
    with open(path, "w") as f:
        f.write("x")
    os.unlink(path)


def main():
    out = {}
    lines = open("/proc/self/status").read().splitlines()
    status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    caps = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
    out["caps"] = {k: status[k].strip() for k in caps}
    out["no_new_privs"] = status["NoNewPrivs"].strip()
    out["seccomp"] = status["Seccomp"].strip()
    out["uid"], out["gid"], out["groups"] = os.getuid(), os.getgid(), sorted(os.getgroups())
    out["write"] = {p: outcome(lambda p=p: write(p)) for p in (
        "/etc/jha-probe", "/opt/joint-health-agent/venv/jha-probe", "/usr/jha-probe",
        "/var/jha-probe", "/work-probe", "/etc/joint-health-agent/jha-probe",
        "/var/lib/joint-health-agent/jha-probe", "/run/joint-health-agent/jha-probe",
        "/tmp/jha-probe", "/var/tmp/jha-probe", "/dev/shm/jha-probe")}
    out["home"] = outcome(lambda: os.listdir("/home"))
    out["root_home"] = outcome(lambda: os.listdir("/root"))
    out["config_read"] = outcome(lambda: open("/etc/joint-health-agent/config.yaml").read())
    out["dialout_file_read"] = outcome(lambda: open("/run/jha-sandbox/dialout-only").read())
    out["proc_cpuinfo"] = os.path.exists("/proc/cpuinfo")
    out["proc_sys"] = os.path.exists("/proc/sys/kernel")
    out["cpu_count"] = os.cpu_count()
    out["dev_null"] = outcome(lambda: open("/dev/null", "w").write("x"))
    out["dev_kmsg"] = outcome(lambda: open("/dev/kmsg").close())
    out["wx_mmap"] = outcome(lambda: mmap.mmap(-1, 4096, prot=7))
    out["packet_socket"] = outcome(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
    for name, family, kind in (
        ("inet", socket.AF_INET, socket.SOCK_STREAM),
        ("inet6", socket.AF_INET6, socket.SOCK_DGRAM),
        ("unix", socket.AF_UNIX, socket.SOCK_DGRAM),
        ("netlink", socket.AF_NETLINK, socket.SOCK_RAW),
    ):
        out[name + "_socket"] = outcome(lambda f=family, k=kind: socket.socket(f, k).close())
    out["sched_setaffinity"] = outcome(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
    out["setpriority"] = outcome(lambda: os.setpriority(os.PRIO_PROCESS, 0, 1))
    libc = ctypes.CDLL(None, use_errno=True)

    def unshare_user():
        if libc.unshare(0x10000000) != 0:
            raise OSError(ctypes.get_errno(), "unshare")

    out["unshare_user"] = outcome(unshare_user)
    with open("/tmp/suid", "w"):
        pass
    out["chmod_suid"] = outcome(lambda: os.chmod("/tmp/suid", 0o4755))
    out["ctypes_callback"] = outcome(lambda: ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1)())
    from drivers.ur_rtde.worker.stream import realtime  # the UR worker's request for SCHED_FIFO
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        realtime(0, 20)
    out["ur_realtime"] = said.getvalue().strip()
    import numpy as np, scipy.linalg
    a = np.random.default_rng(1).normal(size=(50, 50)) + 50 * np.eye(50)
    out["scipy_solve"] = float(np.abs(a @ scipy.linalg.solve(a, np.ones(50)) - 1).max())
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        out["spawn_pool"] = list(pool.map(np.linalg.norm, [np.ones(4), np.ones(9)]))
    db = sqlite3.connect("/var/lib/joint-health-agent/probe.sqlite")
    out["sqlite_wal"] = db.execute("pragma journal_mode=wal").fetchone()[0]
    db.execute("create table t(x)")
    db.commit()
    db.close()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/var/lib/joint-health-agent/probe.sqlite" + suffix)
    out["asyncio"] = asyncio.run(asyncio.sleep(0, result="ok"))
    print("PROBE " + json.dumps(out))


if __name__ == "__main__":  # spawn workers import this file again
    main()
"""

SANDBOX_CONFIG = """\
agent:
  state_dir: /var/lib/joint-health-agent
  log_level: info
controllers:
  - name: robot1
    driver: sim
    settings:
      seed: 3
      production_runs_s: 0.2
      stop_length_s: 3600
      joints:
        axis1: {backlash_rad: 1.0e-3}
    joints:
      - name: axis1
        index: 1
        gear_ratio: 40
        backlash_cycle: {motor_speed_rps: 100, load_turns: 3, sample_rate_hz: 500, settle_s: 0.2}
        thresholds: {amplitude_watch_rad_s: 2.0, amplitude_alert_rad_s: 4.0}
"""

# RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_CAN AF_NETLINK
FAMILIES = [1, 2, 10, 29, 16]
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
NAMESPACE_FLAGS = [
    0x20000,
    0x2000000,
    0x4000000,
    0x8000000,
    0x10000000,
    0x20000000,
    0x40000000,
    0x80,
]


def syscall_groups() -> dict[str, list[str]]:
    """systemd's own syscall groups, as `systemd-analyze syscall-filter` lists them."""
    text = subprocess.run(
        ["systemd-analyze", "syscall-filter", "--no-pager"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    groups: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        if not line.startswith(" ") and item.startswith("@"):
            current = item
            groups[current] = []
        elif current:
            groups[current].append(item)
    return groups


def expand(groups: dict[str, list[str]], names: list[str]) -> set[str]:
    out: set[str] = set()
    for name in names:
        out |= expand(groups, groups[name]) if name.startswith("@") else {name}
    return out


def allowed_syscalls() -> list[str]:
    """SystemCallFilter=@system-service then ~@privileged @resources (@default is implied)."""
    groups = syscall_groups()
    allowed = expand(groups, ["@default", "@system-service"])
    return sorted(allowed - expand(groups, ["@privileged", "@resources"]))


def device_rules() -> list[str]:
    """DevicePolicy=closed plus the unit's DeviceAllow= (and ProtectClock's rtc), as cgroup v1
    device rules; names resolve through /proc/devices the way systemd resolves them."""
    majors: dict[str, list[int]] = {}
    block = False
    for line in Path("/proc/devices").read_text().splitlines():
        if line.startswith("Block"):
            block = True
        parts = line.split()
        if not block and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], []).append(int(parts[0]))
    rules = [
        "c 1:3 rwm",
        "c 1:5 rwm",
        "c 1:7 rwm",
        "c 1:8 rwm",
        "c 1:9 rwm",
        "c 5:0 rw",
        "c 5:2 rw",
        "c 136:* rw",
    ]
    for name, access in (("ttyS", "rw"), ("ttyUSB", "rw"), ("ttyACM", "rw"), ("rtc", "r")):
        rules += [f"c {major}:* {access}" for major in majors.get(name, [])]
    return rules


SANDBOX_SH = r"""
# ... runs as root in new mount and pid namespaces; every mount below is private to them.
[ -n "$CGROUP" ] && echo $$ > "$CGROUP/cgroup.procs"
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/.etc/up /run/.etc/work /run/joint-health-agent /run/jha-sandbox
chown $SUID:$SUID /run/joint-health-agent && chmod 0750 /run/joint-health-agent
mount --bind /run/joint-health-agent /run/joint-health-agent
mount --bind "$EXTRA" /run/jha-sandbox
# The dependencies the test install borrows (JHA_DEPS_SITE) may live under /tmp or /home, which
# the sandbox hides like the unit does: they are bound at a fixed place the venv's .pth names.
mkdir /run/jha-deps && mount --bind "$DEPS" /run/jha-deps
mkdir /run/systemd && mount --bind "$NOTIFY_DIR" /run/systemd  # the notify socket's place
mount -t overlay overlay -o lowerdir=/etc,upperdir=/run/.etc/up,workdir=/run/.etc/work /etc
mkdir /etc/joint-health-agent
mount --bind "$STAGE/etc/joint-health-agent" /etc/joint-health-agent
mount -t tmpfs -o mode=0755 tmpfs /opt && mkdir /opt/joint-health-agent
mount --bind "$STAGE/opt/joint-health-agent" /opt/joint-health-agent
mount -t tmpfs -o mode=0755 tmpfs /var/lib && mkdir /var/lib/joint-health-agent
mount --bind "$STATE" /var/lib/joint-health-agent
mount -t tmpfs -o mode=1777 tmpfs /tmp && mount -t tmpfs -o mode=1777 tmpfs /var/tmp
for d in /home /root; do [ -d $d ] && mount -t tmpfs -o ro,mode=0 tmpfs $d; done
mount -t proc -o nosuid,nodev,noexec,hidepid=invisible,subset=pid proc /proc
for mp in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
    [ -e "$mp" ] || continue  # under a tmpfs mounted above: out of reach already
    case $mp in
        /proc|/proc/*|/dev|/dev/*|/tmp|/var/tmp|/var/lib/joint-health-agent) ;;
        /run/joint-health-agent) ;;
        *) mount -o remount,bind,ro "$mp" || echo "sandbox: $mp stays writable" >&2 ;;
    esac
done
cd /var/lib/joint-health-agent
umask 0027
exec setpriv --reuid=$SUID --regid=$SUID --groups=$DIALOUT \
    --inh-caps=-all --ambient-caps=-all --bounding-set=-all --no-new-privs -- \
    env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME=/var/lib/joint-health-agent USER=jha \
        NOTIFY_SOCKET=/run/systemd/notify \
        RUNTIME_DIRECTORY=/run/joint-health-agent STATE_DIRECTORY=/var/lib/joint-health-agent \
        CONFIGURATION_DIRECTORY=/etc/joint-health-agent sh -c '
    L="/usr/bin/python3 -I /run/jha-sandbox/launcher.py /run/jha-sandbox/spec.json --"
    J=/opt/joint-health-agent/venv/bin
    $L $J/python -I /run/jha-sandbox/probe.py
    $L $J/jha config check /etc/joint-health-agent/config.yaml; echo "CHECK rc=$?"
    $L $J/jha run --config /etc/joint-health-agent/config.yaml --once --wait-for-stop 30
    echo "RUN rc=$?"'
"""
