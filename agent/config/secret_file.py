"""Secret files (the MQTT password, the fleet's token and passwords): a regular file only its
owner may read or write, owned by the user that reads it or by root, one line of UTF-8 (a
trailing newline is not part of it), not empty, not longer than the protocol allows. Checked
both where the secret is used and by the config checks; the value is never part of an error
message.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from agent.errors import ConfigError

MAX_SECRET_BYTES = 65535  # MQTT's length-prefixed binary field
# Debian's UID_MIN (login.defs): below it are system accounts (the service user jha is one),
# from it on the accounts of people.
FIRST_LOGIN_UID = 1000


class SecretFileError(ConfigError):
    """A secret file cannot be used. `problem` says why without naming the file (its caller
    says where it is configured); no part of the secret is ever in it. `access_denied`: this
    user may not look at the file, which says nothing about whether the service user may."""

    def __init__(self, path: str | Path, problem: str, *, access_denied: bool = False) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem
        self.access_denied = access_denied


def read_secret_file(
    path: str | Path,
    what: str,
    *,
    noun: str = "secret",
    too_long: str | None = None,
    error: type[SecretFileError] = SecretFileError,
) -> str:
    """The one-line secret in `path`, or `error`: missing, not a regular file, readable or
    writable by group or others, unreadable, not UTF-8, empty, several lines, or longer than
    MAX_SECRET_BYTES. `what` names the file in the problems ("token file"), `noun` the secret
    ("password"); `too_long` replaces the length problem's text."""
    file = Path(path)
    check_owner_only(file, what, error=error)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise _unreadable(file, what, exc, error) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        # The exception would quote the offending bytes, a piece of the secret.
        raise error(file, f"the {what} is not UTF-8 text") from None
    secret = text.removesuffix("\n").removesuffix("\r")
    if not secret:
        raise error(file, f"the {what} is empty")
    if "\n" in secret:
        raise error(file, f"expected the {noun} on one line, found several lines")
    if len(secret.encode("utf-8")) > MAX_SECRET_BYTES:
        raise error(file, too_long or f"the {what} is longer than {MAX_SECRET_BYTES} bytes")
    return secret


def check_owner_only(
    path: str | Path, what: str, *, error: type[SecretFileError] = SecretFileError
) -> None:
    """`error` unless `path` is a regular file that only its owner may read or write, and that
    owner is the user reading it or root (a secret file, or a private key)."""
    file = Path(path)
    try:
        info = os.stat(file)
    except OSError as exc:
        raise _unreadable(file, what, exc, error) from None
    if not stat.S_ISREG(info.st_mode):
        raise error(file, f"the {what} is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise error(
            file,
            f"permissions {mode:04o} are too open: the {what} must be readable only by the "
            f"service user (chmod 600 {file})",
        )
    reader = os.geteuid()
    # Its owner may read it whatever the mode says, and chmod it: the user that reads it or
    # root, or (when root checks a service's config) a system account such as the service's.
    if info.st_uid not in (reader, 0) and not (reader == 0 and info.st_uid < FIRST_LOGIN_UID):
        raise error(
            file,
            f"owned by {_account(info.st_uid)}, who may read and change it: the {what} must "
            f"belong to the user that reads it ({_account(reader)}) or to root "
            f"(chown {_account(reader, bare=True)} {file})",
        )


def _account(uid: int, *, bare: bool = False) -> str:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (a deleted user, a copied file)
        return str(uid) if bare else f"uid {uid}"
    return name if bare else f"{name} (uid {uid})"


def _unreadable(
    file: Path, what: str, exc: OSError, error: type[SecretFileError]
) -> SecretFileError:
    return error(
        file,
        f"cannot read the {what}: {exc.strerror}",
        access_denied=isinstance(exc, PermissionError),
    )
