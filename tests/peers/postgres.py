"""A real, throwaway PostgreSQL cluster for the fleet tests: initdb + pg_ctl on a unix socket in a
temporary directory, no TCP listener, trust authentication for its own socket only.

PostgreSQL refuses to run as root; run by root (a CI container), the cluster belongs to an
unprivileged account (the Debian package's `postgres`, else `nobody`) and root connects through
the socket as that cluster's superuser. The binaries are taken from PATH, else from Debian's
/usr/lib/postgresql/<version>/bin (newest first): no test skips because they are elsewhere.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType


def pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        candidate = Path(directory) / name
        if candidate.exists():
            return str(candidate)
    raise AssertionError(
        f"PostgreSQL's {name} is not installed: run scripts/system-deps.sh (Debian: postgresql)"
    )


def _account() -> pwd.struct_passwd:
    if os.getuid() != 0:
        return pwd.getpwuid(os.getuid())
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise AssertionError("running as root and no unprivileged account to run PostgreSQL as")


class PostgresCluster:
    """One cluster; `conninfo` reaches its `jha` database through the socket directory."""

    def __init__(self, dbname: str = "jha") -> None:
        self.account = _account()
        # Short path: a unix socket's name is limited to 107 bytes.
        self.directory = Path(tempfile.mkdtemp(prefix="jha-pg-"))
        self.data = self.directory / "data"
        self.socket_dir = self.directory
        self.log_file = self.directory / "postgres.log"
        self.dbname = dbname
        self.user = self.account.pw_name
        self._created = False
        os.chown(self.directory, self.account.pw_uid, self.account.pw_gid)
        self._run(
            [
                pg_bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                self.user,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",  # a throwaway cluster: its files need not survive a power cut
            ]
        )
        conf = self.data / "postgresql.conf"
        with conf.open("a") as f:
            f.write(
                "listen_addresses = ''\n"
                f"unix_socket_directories = '{self.socket_dir}'\n"
                "fsync = on\n"  # commits are durable: the kill -9 tests rely on it
                "max_connections = 40\n"
                "shared_buffers = 32MB\n"
            )

    @property
    def conninfo(self) -> str:
        return f"host={self.socket_dir} dbname={self.dbname} user={self.user}"

    def start(self) -> PostgresCluster:
        self._run(
            [
                pg_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        if not self._created:
            self._run(
                [pg_bin("createdb"), "-h", str(self.socket_dir), "-U", self.user, self.dbname]
            )
            self._created = True
        return self

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop -m fast (sessions ended, clean shutdown) or immediate (like a crash)."""
        if (self.data / "postmaster.pid").exists():
            self._run([pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(self) -> PostgresCluster:
        self.stop()
        return self.start()

    def kill(self) -> None:
        """SIGKILL the postmaster (its children exit when they see it gone)."""
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def _run(self, argv: list[str]) -> None:
        as_other = os.getuid() != self.account.pw_uid
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.directory,
            user=self.account.pw_uid if as_other else None,
            group=self.account.pw_gid if as_other else None,
            extra_groups=[] if as_other else None,
            env={**os.environ, "LC_ALL": "C"},
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}"
                f"\n{self.log_text()[-2000:]}"
            )

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()
