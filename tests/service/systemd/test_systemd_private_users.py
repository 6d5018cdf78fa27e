"""Why the unit has no PrivateUsers=: in a user namespace the daemon's control socket would see
every operator as nobody (SO_PEERCRED), so it could not tell who asks for a cycle."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tests.support.service.systemd_sandbox import NEEDS_ROOT, SERVICE_UID

PEER_SERVER = r"""
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o666)
s.listen(1)
print("listening", flush=True)
conn, _ = s.accept()
pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
print(uid, gid, flush=True)
"""


def peer_seen_by_service(user_namespace: bool) -> tuple[int, int]:
    """The uid/gid an operator (uid 1234, gid 1234) shows to the daemon's control socket."""
    userns = ["unshare", "--user", "--map-current-user", "--"] if user_namespace else []
    # Not under pytest's tmp_path: its parent is root's 0700, out of both users' reach.
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        os.chmod(tmp, 0o777)
        path = Path(tmp) / "control.sock"
        server = subprocess.Popen(
            [
                "setpriv",
                f"--reuid={SERVICE_UID}",
                f"--regid={SERVICE_UID}",
                "--clear-groups",
                "--",
                *userns,
                "/usr/bin/python3",
                "-I",
                "-c",
                PEER_SERVER,
                str(path),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "listening"
            subprocess.run(
                [
                    "setpriv",
                    "--reuid=1234",
                    "--regid=1234",
                    "--clear-groups",
                    "--",
                    "/usr/bin/python3",
                    "-I",
                    "-c",
                    f"import socket; socket.socket(socket.AF_UNIX).connect({str(path)!r})",
                ],
                check=True,
                timeout=30,
            )
            uid, gid = (int(x) for x in server.stdout.readline().split())
        finally:
            server.kill()
            server.wait()
    return uid, gid


def test_private_users_would_hide_operators_from_the_control_socket() -> None:
    """Why the unit has no PrivateUsers=: the daemon must see who asks for a cycle."""
    assert os.geteuid() == 0, NEEDS_ROOT
    assert peer_seen_by_service(user_namespace=False) == (1234, 1234)
    assert peer_seen_by_service(user_namespace=True) == (65534, 65534)
