"""`make install DESTDIR=...`: the staged tree, its modes, the installed `jha` and a re-install.

The real install script runs into a temporary root. It installs the package itself into a real
venv with pip (its build backend comes from the package registries); the dependencies are taken
from this checkout's .venv through a .pth file (JHA_DEPS_SITE) instead of being downloaded
again, which would cost ~75 s and 380 MB on every `make test`. Creating the service user is the
one step a staged install skips; the sysusers.d file that does it is checked here with
systemd-sysusers --root.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.service.install import DEPS_SITE, run_install, staged_install
from tests.support.summary import record

PREFIX = "opt/joint-health-agent"
PREFIX_PATH = "/" + PREFIX
CONFDIR = "etc/joint-health-agent"
UNIT = "etc/systemd/system/joint-health-agent.service"


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return staged_install(tmp_path_factory)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tree_has_venv_unit_config_and_sysusers(staged: tuple[Path, str]) -> None:
    dest, _ = staged
    assert (dest / PREFIX / "venv/bin/jha").is_file()
    assert os.access(dest / PREFIX / "venv/bin/jha", os.X_OK)
    assert (dest / UNIT).read_text() == (ROOT / "systemd/joint-health-agent.service").read_text()
    assert (dest / "etc/sysusers.d/joint-health-agent.conf").is_file()
    assert (dest / PREFIX / "share/systemd/ur-realtime.conf").is_file()
    assert (dest / PREFIX / "share/doc/service.md").is_file()
    example = (ROOT / "config/example.yaml").read_text()
    assert (dest / CONFDIR / "config.yaml").read_text() == example
    assert (dest / CONFDIR / "config.example.yaml").read_text() == example
    # The fleet service comes with it, installed and not enabled, its example checked as is.
    fleet_unit = dest / "etc/systemd/system/jha-fleet.service"
    assert fleet_unit.read_text() == (ROOT / "systemd/jha-fleet.service").read_text()
    fleet_example = dest / "etc/jha-fleet/fleet.example.yaml"
    assert fleet_example.read_text() == (ROOT / "config/fleet-example.yaml").read_text()
    assert not (dest / "etc/systemd/system/multi-user.target.wants/jha-fleet.service").exists()
    # The template of G-code streams (ExecStopPost= stops a GRBL whose streamer died).
    stream_unit = dest / "etc/systemd/system/jha-stream@.service"
    assert stream_unit.read_text() == (ROOT / "systemd/jha-stream@.service").read_text()


def test_modes_keep_config_from_other_users(staged: tuple[Path, str]) -> None:
    dest, _ = staged
    assert mode(dest / CONFDIR) == 0o750
    assert mode(dest / CONFDIR / "config.yaml") == 0o640
    assert mode(dest / CONFDIR / "config.example.yaml") == 0o640
    assert mode(dest / UNIT) == 0o644
    # Installed from a shell with umask 077: the program stays readable by the service user.
    venv = dest / PREFIX / "venv"
    package = next(venv.glob("lib/python3*/site-packages/agent/__init__.py"))
    assert mode(package) & 0o004 and mode(package.parent) & 0o005 == 0o005
    assert mode(venv / "bin/jha") & 0o005 == 0o005
    record("security", "config dir 0750, config 0640 (root:jha on the target)", "yes")


def test_staged_venv_names_the_final_paths(staged: tuple[Path, str]) -> None:
    """A venv is not relocatable: the staged scripts must already name /opt/..., not DESTDIR."""
    dest, _ = staged
    shebang = (dest / PREFIX / "venv/bin/jha").read_text().splitlines()[0]
    assert shebang == f"#!/{PREFIX}/venv/bin/python"
    leaks = subprocess.run(
        ["grep", "-rlI", "-F", str(dest), str(dest / PREFIX / "venv/bin")],
        capture_output=True,
        text=True,
    )
    assert leaks.stdout == "", f"staging path left in: {leaks.stdout}"
    # The interpreter must be one the unit can see (ProtectHome=yes hides /root and /home).
    python = os.path.realpath(dest / PREFIX / "venv/bin/python")
    assert not python.startswith(("/root/", "/home/")), python


def test_installed_package_is_a_copy_not_the_checkout(staged: tuple[Path, str]) -> None:
    """The service must run what was installed, not whatever the checkout holds later."""
    dest, _ = staged
    py = dest / PREFIX / "venv/bin/python"
    out = subprocess.run(
        [str(py), "-c", "import agent, drivers.sim.driver; print(agent.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=dest,  # not the checkout
    ).stdout.strip()
    assert out.startswith(str(dest / PREFIX / "venv/lib")), out


def test_installed_jha_accepts_the_installed_config(staged: tuple[Path, str]) -> None:
    dest, output = staged
    assert f"{dest / CONFDIR / 'config.yaml'}: OK" in output  # the script checks it itself
    py = dest / PREFIX / "venv/bin/python"
    proc = subprocess.run(
        [str(py), "-I", "-m", "agent.cli", "config", "check", str(dest / CONFDIR / "config.yaml")],
        capture_output=True,
        text=True,
        cwd=ROOT,  # -I: the checkout in cwd is not imported
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(": OK")
    assert "systemctl daemon-reload && systemctl enable --now joint-health-agent" in output


def test_reinstall_never_overwrites_an_edited_config(
    staged: tuple[Path, str], tmp_path: Path
) -> None:
    """A plant's config survives `make install` of a new version; the example is refreshed."""
    dest = tmp_path / "root"
    shutil.copytree(staged[0], dest, symlinks=True)  # an installed machine, edited below
    config = dest / CONFDIR / "config.yaml"
    edited = config.read_text().replace("log_level: info", "log_level: debug", 1)
    assert edited != config.read_text()
    config.write_text(edited)
    (dest / CONFDIR / "config.example.yaml").write_text("# stale\n")
    output = run_install(dest)
    assert config.read_text() == edited
    assert "kept the existing" in output
    assert mode(config) == 0o640  # the edit did not change the mode; the script left it alone
    assert (dest / CONFDIR / "config.example.yaml").read_text() == (
        ROOT / "config/example.yaml"
    ).read_text()
    record("security", "re-install keeps the plant's config", "yes")


def test_sysusers_file_creates_a_system_user_without_login(tmp_path: Path) -> None:
    """What `make install` runs on the machine (DESTDIR empty), applied to a scratch root."""
    if shutil.which("systemd-sysusers") is None:
        pytest.fail("systemd-sysusers missing (scripts/system-deps.sh installs systemd)")
    (tmp_path / "etc").mkdir()
    subprocess.run(
        [
            "systemd-sysusers",
            f"--root={tmp_path}",
            str(ROOT / "systemd/joint-health-agent.sysusers.conf"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    users = {
        line.split(":")[0]: line.split(":")
        for line in (tmp_path / "etc/passwd").read_text().splitlines()
    }
    _, _, uid, gid, _, home, shell = users["jha"]
    assert int(uid) < 1000, "a system user"
    assert home == "/var/lib/joint-health-agent"
    assert shell == "/usr/sbin/nologin"
    groups = {line.split(":")[0]: line for line in (tmp_path / "etc/group").read_text().split()}
    assert groups["jha"].split(":")[2] == gid


def test_refuses_an_interpreter_the_sandbox_hides(tmp_path: Path) -> None:
    """A venv on an interpreter under /root or /home (pyenv) would not start: ProtectHome=yes."""
    hidden = os.path.realpath(sys._base_executable)  # type: ignore[attr-defined]
    made = None
    if not hidden.startswith(("/root/", "/home/")):
        # This machine's interpreter is a system one: put a copy where the unit cannot look.
        made = Path(tempfile.mkdtemp(prefix="jha-install-test-", dir="/home"))
        hidden = str(made / "python3")
        shutil.copy2(os.path.realpath(sys._base_executable), hidden)  # type: ignore[attr-defined]
    try:
        proc = subprocess.run(
            [str(ROOT / "scripts/install.sh")],
            env={**os.environ, "DESTDIR": str(tmp_path), "PYTHON": hidden},
            capture_output=True,
            text=True,
        )
    finally:
        if made is not None:
            shutil.rmtree(made)
    assert proc.returncode != 0
    assert "ProtectHome=yes" in proc.stderr
    assert not (tmp_path / PREFIX).exists(), "refused before installing anything"


def test_bad_destdir_is_named(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(ROOT / "scripts/install.sh")],
        env={**os.environ, "DESTDIR": "relative/dir"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "DESTDIR must be an absolute path" in proc.stderr


def test_uninstall_removes_the_program_and_keeps_config(
    staged: tuple[Path, str], tmp_path: Path
) -> None:
    dest = tmp_path / "root"
    shutil.copytree(staged[0], dest, symlinks=True)
    proc = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "uninstall", f"DESTDIR={dest}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert not (dest / PREFIX).exists()
    assert not (dest / UNIT).exists()
    assert not (dest / "etc/systemd/system/jha-fleet.service").exists()
    assert not (dest / "etc/systemd/system/jha-stream@.service").exists()
    assert (dest / "etc/jha-fleet/fleet.example.yaml").is_file()  # settings stay, as config
    assert not (dest / "etc/sysusers.d/joint-health-agent.conf").exists()
    assert (dest / CONFDIR / "config.yaml").is_file()  # the plant's config stays
    assert "kept" in proc.stdout


def test_install_on_the_machine_creates_user_and_owners(tmp_path: Path) -> None:
    """`sudo make install` with DESTDIR empty, the path a plant takes: user jha is created and
    the config is root:jha. Run in a private mount namespace over an overlay of /etc and an
    empty /opt, so the host's users and files stay as they are.

    The dependencies the test install borrows (JHA_DEPS_SITE, this checkout's .venv) are bound
    at /opt/jha-test-deps: user jha must read them there whatever the modes of the folders above
    the checkout (a clone under a 0700 `mktemp -d` hid them, and `jha config check` failed with
    "No module named 'numpy'"). What jha reads of the install itself stays as installed."""
    assert os.geteuid() == 0, "installing on the machine needs root (make test runs as root)"
    for d in ("up", "work"):
        (tmp_path / d).mkdir()
    script = f"""
        mount -t overlay overlay -o lowerdir=/etc,upperdir=up,workdir=work /etc
        mount -t tmpfs -o mode=0755 tmpfs /opt
        mkdir /opt/jha-test-deps
        mount --bind {DEPS_SITE} /opt/jha-test-deps
        make --no-print-directory -C {ROOT} install JHA_DEPS_SITE=/opt/jha-test-deps
        echo "USER $(getent passwd jha)"
        stat -c 'MODE %n %U:%G %a' /etc/joint-health-agent /etc/joint-health-agent/config.yaml
        setpriv --reuid=jha --regid=jha --init-groups -- \\
            {PREFIX_PATH}/venv/bin/jha config check /etc/joint-health-agent/config.yaml
    """
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-euc", script],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    out = proc.stdout
    user = next(line for line in out.splitlines() if line.startswith("USER "))[5:].split(":")
    assert user[0] == "jha" and int(user[2]) < 1000 and user[6] == "/usr/sbin/nologin"
    assert "MODE /etc/joint-health-agent root:jha 750" in out
    assert "MODE /etc/joint-health-agent/config.yaml root:jha 640" in out
    assert "/etc/joint-health-agent/config.yaml: OK" in out  # read by jha itself
    assert "next: systemctl daemon-reload && systemctl enable --now joint-health-agent" in out
    assert not Path("/etc/joint-health-agent").exists(), "the host's /etc was left alone"
