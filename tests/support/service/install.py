"""`make install DESTDIR=...` into a temporary root, once per test session: the staged tree
tests/service/systemd/test_install.py, test_systemd_unit.py and test_systemd_sandbox.py read.

The dependencies come from this checkout's .venv through a .pth file (JHA_DEPS_SITE) instead of
being downloaded again.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.support.paths import ROOT

DEPS_SITE = sysconfig.get_path("purelib")  # this interpreter's site-packages (.venv)


def run_install(destdir: Path, *extra: str, timeout_s: float = 600.0) -> str:
    """`make install DESTDIR=...` as a user types it, from a shell whose umask is 077; returns
    what it printed."""
    proc = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "install",
            f"DESTDIR={destdir}",
            f"JHA_DEPS_SITE={DEPS_SITE}",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        # A hardened host's root umask: what the service user must read stays readable.
        umask=0o077,
    )
    assert proc.returncode == 0, f"install failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def staged_install(factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One staged install per test session, shared by the test files that read it (never
    change it: copy it first). The venv and pip build take 10 s, 40 s on a loaded machine."""
    dest = factory.getbasetemp() / "jha-staged-install"
    done = dest.with_suffix(".out")
    if not done.exists():
        shutil.rmtree(dest, ignore_errors=True)
        done.write_text(run_install(dest))
    return dest, done.read_text()
