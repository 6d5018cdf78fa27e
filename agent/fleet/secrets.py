"""Secret files of the fleet service (the web token, the broker's and the database's passwords):
held to the rules the agent applies to its MQTT password file (agent.config.mqtt): a regular
file only its owner may read or write, one line of UTF-8, not empty. The value is never part of
an error message.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agent.errors import ConfigError

_MAX_BYTES = 65535


class SecretFileError(ConfigError):
    """A secret file cannot be used; `problem` says why (never any part of the secret)."""

    def __init__(self, path: str | Path, problem: str, *, access_denied: bool = False) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem
        self.access_denied = access_denied


def read_secret_file(path: str | Path, what: str) -> str:
    """The one-line secret in `path`; `what` names it in errors ("token file", ...)."""
    file = Path(path)
    try:
        info = os.stat(file)
    except OSError as exc:
        denied = isinstance(exc, PermissionError)
        problem = f"cannot read the {what}: {exc.strerror}"
        raise SecretFileError(file, problem, access_denied=denied) from None
    if not stat.S_ISREG(info.st_mode):
        raise SecretFileError(file, f"the {what} is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise SecretFileError(
            file,
            f"permissions {mode:04o} are too open: the {what} must be readable only by the "
            f"service user (chmod 600 {file})",
        )
    try:
        raw = file.read_bytes()
    except OSError as exc:
        denied = isinstance(exc, PermissionError)
        problem = f"cannot read the {what}: {exc.strerror}"
        raise SecretFileError(file, problem, access_denied=denied) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        # The exception would quote the offending bytes, a piece of the secret.
        raise SecretFileError(file, f"the {what} is not UTF-8 text") from None
    secret = text.removesuffix("\n").removesuffix("\r")
    if not secret:
        raise SecretFileError(file, f"the {what} is empty")
    if "\n" in secret:
        raise SecretFileError(file, "expected the secret on one line, found several lines")
    if len(secret.encode("utf-8")) > _MAX_BYTES:
        raise SecretFileError(file, f"the {what} is longer than {_MAX_BYTES} bytes")
    return secret
