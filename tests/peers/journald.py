"""A real systemd-journald for one test, in a journal namespace of its own.

`systemd-journald NAMESPACE` (systemd-journald.service(8), "journal namespaces") listens on
/run/systemd/journal.NAMESPACE/ and stores under /var/log/journal/MACHINE-ID.NAMESPACE; the host's
journal is not touched. `stream()` opens what systemd gives a service's stderr: a stream socket
to the namespace's `stdout` socket, introduced by the seven header lines journald reads first
(identifier, unit id, default priority, level prefix, and the three forward flags, see
src/journal/journald-stream.c), with JOURNAL_STREAM set to the socket's "device:inode".
`entries()` reads back with journalctl --namespace, as an operator would.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

JOURNALD = Path("/lib/systemd/systemd-journald")


class Journald:
    def __init__(self, namespace: str, proc: subprocess.Popen[bytes]) -> None:
        self.namespace = namespace
        self.proc = proc
        self.run_dir = Path(f"/run/systemd/journal.{namespace}")

    @contextmanager
    def stream(
        self, identifier: str, default_priority: int = 6
    ) -> Iterator[tuple[int, dict[str, str]]]:
        """(fd, env) for a child's stderr: the fd is the journal stream, env has JOURNAL_STREAM."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(self.run_dir / "stdout"))
        sock.shutdown(socket.SHUT_RD)
        # identifier, unit id, priority, level_prefix, forward to syslog, kmsg, console
        sock.sendall(f"{identifier}\n\n{default_priority}\n1\n0\n0\n0\n".encode())
        st = os.fstat(sock.fileno())
        env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
        try:
            yield sock.fileno(), env
        finally:
            sock.close()

    def entries(
        self, identifier: str, *args: str, expect: int = 1, timeout_s: float = 20.0
    ) -> list[dict[str, Any]]:
        """journalctl --namespace -t identifier -o json [args]: at least `expect` entries, or
        what there is once timeout_s has passed (journald stores asynchronously)."""
        end = time.monotonic() + timeout_s
        while True:
            done = subprocess.run(
                [
                    "journalctl",
                    f"--namespace={self.namespace}",
                    "-t",
                    identifier,
                    "-o",
                    "json",
                    "--no-pager",
                    *args,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            if len(found) >= expect or time.monotonic() > end:
                return found
            time.sleep(0.2)


@contextmanager
def journald() -> Iterator[Journald]:
    assert JOURNALD.exists(), f"{JOURNALD} is missing: install the Debian package systemd"
    namespace = f"jhatest{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [str(JOURNALD), namespace], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    jd = Journald(namespace, proc)
    try:
        end = time.monotonic() + 20.0
        while not (jd.run_dir / "stdout").exists():
            assert proc.poll() is None, (
                f"systemd-journald exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
            assert time.monotonic() < end, "systemd-journald did not open its sockets"
            time.sleep(0.05)
        yield jd
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stored in (Path("/var/log/journal"), Path("/run/log/journal")):
            for directory in stored.glob(f"*.{namespace}"):
                shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(jd.run_dir, ignore_errors=True)
