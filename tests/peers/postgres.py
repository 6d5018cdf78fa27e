"""A real, throwaway PostgreSQL cluster for the fleet tests: initdb + pg_ctl on a unix socket in a
temporary directory, no TCP listener, trust authentication for its own socket only.

PostgreSQL refuses to run as root; run by root (a CI container), the cluster belongs to an
unprivileged account (the Debian package's `postgres`, else `nobody`) and root connects through
the socket as that cluster's superuser. The binaries are taken from PATH, else from Debian's
/usr/lib/postgresql/<version>/bin (newest first): no test skips because they are elsewhere.

`standby()` makes a hot-standby streaming replica of a running cluster (pg_basebackup -R -X
stream through the primary's socket, which initdb's trust authentication opens to replication
connections too), on a socket directory of its own: read-only, it lags the primary by its replay.
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
from typing import Any

import psycopg


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


def _connect(cluster: PostgresCluster) -> psycopg.Connection[Any]:
    return psycopg.connect(cluster.conninfo, autocommit=True, connect_timeout=5)


class PostgresCluster:
    """One cluster; `conninfo` reaches its `jha` database through the socket directory."""

    def __init__(self, dbname: str = "jha", *, primary: PostgresCluster | None = None) -> None:
        """A new cluster, or (with `primary`, which must be running) a standby of it."""
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
        if primary is None:
            self._initdb()
        else:
            self._base_backup(primary)
        self._configure(standby=primary is not None)

    def standby(self) -> PostgresCluster:
        """A hot-standby replica of this running cluster, not started yet."""
        return PostgresCluster(self.dbname, primary=self)

    def _initdb(self) -> None:
        # --auth=trust covers the `local replication all` line as well: standby() needs it.
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

    def _base_backup(self, primary: PostgresCluster) -> None:
        """The primary's files as of now, with standby.signal and its primary_conninfo (-R)
        and the WAL written meanwhile (-X stream): a standby that starts streaming from there."""
        if primary.account.pw_uid != self.account.pw_uid:
            raise AssertionError("a standby must belong to its primary's account")
        self._run(
            [
                pg_bin("pg_basebackup"),
                "-D",
                str(self.data),
                "-h",
                str(primary.socket_dir),
                "-U",
                primary.user,
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",  # not a spread checkpoint: the copy starts at once
                "--no-sync",
            ]
        )
        self._created = True  # the primary's databases came with the copy

    def _configure(self, standby: bool) -> None:
        # Appended after the primary's copied lines on a standby: the last setting wins.
        conf = self.data / "postgresql.conf"
        with conf.open("a") as f:
            f.write(
                "listen_addresses = ''\n"
                f"unix_socket_directories = '{self.socket_dir}'\n"
                "fsync = on\n"  # commits are durable: the kill -9 tests rely on it
                "max_connections = 40\n"
                "shared_buffers = 32MB\n"
            )
            if standby:
                f.write(
                    "hot_standby = on\n"  # read-only queries during recovery
                    # Back to streaming soon after a restarted primary is there again.
                    "wal_retrieve_retry_interval = '200ms'\n"
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

    def replayed(self, primary: PostgresCluster) -> bool:
        """Whether this standby has replayed everything the primary has written until now."""
        with _connect(primary) as conn:
            written = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        with _connect(self) as conn:
            row = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (written and written[0],)
            ).fetchone()
        return bool(row and row[0])

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
