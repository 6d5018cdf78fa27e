"""Users of the OPC UA health server: a file of `name:pbkdf2_sha256$iterations$salt$hash` lines.

The file holds password hashes, never passwords, and must still be readable only by the service
user (mode 0600 or 0400, owned by it): a world-readable hash can be attacked offline. Make a
line with `python -m agent.publish.opcua_server.users NAME` (the password is read from stdin).
Blank lines and lines starting with # are ignored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from agent.errors import ConfigError
from agent.opcua.trust import private_file_problem

SCHEME = "pbkdf2_sha256"
ITERATIONS = 200_000


@dataclass(frozen=True)
class UserEntry:
    name: str
    iterations: int
    salt: bytes
    digest: bytes = b""

    def matches(self, password: str) -> bool:
        candidate = hashlib.pbkdf2_hmac("sha256", password.encode(), self.salt, self.iterations)
        return hmac.compare_digest(candidate, self.digest)

    def __repr__(self) -> str:  # never print the hash, not even in a traceback
        return f"UserEntry(name={self.name!r})"


def hash_line(name: str, password: str, *, iterations: int = ITERATIONS) -> str:
    """One users-file line for `name` with a fresh salt."""
    if not name or ":" in name or name.strip() != name:
        raise ValueError(f"user name {name!r}: expected a non-empty name without ':' or spaces")
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{name}:{SCHEME}${iterations}${_b64(salt)}${_b64(digest)}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def check_private(path: Path, what: str) -> None:
    """Refuse a secret file that others can read or that another user owns."""
    problem = private_file_problem(path)
    if problem is not None:
        raise ConfigError(f"{what} {problem}")


def load_users(path: str | Path) -> dict[str, UserEntry]:
    """Parse the users file; errors name the file and line, never the line's content."""
    p = Path(path)
    check_private(p, "users_file")
    users: dict[str, UserEntry] = {}
    for number, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{p}:{number}"
        name, sep, rest = line.partition(":")
        parts = rest.split("$")
        if not sep or not name or len(parts) != 4 or parts[0] != SCHEME:
            raise ConfigError(
                f"{where}: expected name:{SCHEME}$iterations$salt$hash (made by python -m "
                "agent.publish.opcua_server.users NAME)"
            )
        try:
            iterations = int(parts[1])
            salt = base64.b64decode(parts[2], validate=True)
            digest = base64.b64decode(parts[3], validate=True)
        except ValueError:
            raise ConfigError(
                f"{where}: the iterations, salt or hash of user {name!r} do not "
                "parse (expected an integer and two base64 strings)"
            ) from None
        if iterations < 10_000 or not salt or len(digest) != 32:
            raise ConfigError(
                f"{where}: user {name!r}: expected >= 10000 iterations, a salt and "
                "a 32-byte SHA-256 hash"
            )
        if name in users:
            raise ConfigError(f"{where}: user {name!r} is listed twice")
        users[name] = UserEntry(name, iterations, salt, digest)
    return users


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m agent.publish.opcua_server.users NAME < password", file=sys.stderr)
        return 64
    password = sys.stdin.readline().rstrip("\n")
    if not password:
        print("no password on stdin", file=sys.stderr)
        return 64
    print(hash_line(args[0], password))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
