"""Credentials and TLS of the MQTT publisher.

The password is read from a file that only the service user may read (refused otherwise, with the
file's name and mode, like ssh refuses a private key others can read) and is kept in a Secret,
whose repr and str never show it, so that it cannot leak through a log line, a traceback's
locals printed by a debugger, or a report.
"""

from __future__ import annotations

import os
import ssl
import stat
from pathlib import Path

from agent.config.mqtt import MqttSettings
from agent.errors import ConfigError

_MAX_PASSWORD_BYTES = 65535  # MQTT's length-prefixed binary field


class Secret:
    """A value that must not be printed."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a Secret is not pickled")


def read_password_file(path: str | Path) -> Secret:
    """The password in `path` (one line; a trailing newline is not part of it)."""
    file = Path(path)
    try:
        info = os.stat(file)
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the MQTT password file: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{file}: the MQTT password file is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"{file}: permissions {mode:04o} are too open: the MQTT password file must be "
            f"readable only by the service user (chmod 600 {file})"
        )
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the MQTT password file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        # The exception would quote the offending bytes, that is a piece of the password.
        raise ConfigError(f"{file}: the MQTT password file is not UTF-8 text") from None
    password = text.removesuffix("\n").removesuffix("\r")
    if not password:
        raise ConfigError(f"{file}: the MQTT password file is empty")
    if "\n" in password:
        raise ConfigError(f"{file}: expected the password on one line, found several lines")
    if len(password.encode("utf-8")) > _MAX_PASSWORD_BYTES:
        raise ConfigError(f"{file}: the password is longer than MQTT allows (65535 bytes)")
    return Secret(password)


def tls_context(settings: MqttSettings) -> ssl.SSLContext | None:
    """The client's TLS context, or None for plain TCP. Verification is on unless tls_insecure."""
    if not settings.tls:
        return None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{settings.ca_file}: cannot load the MQTT CA file: {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.cert_file is not None and settings.key_file is not None:
        try:
            ctx.load_cert_chain(settings.cert_file, settings.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"{settings.cert_file}, {settings.key_file}: cannot load the MQTT client "
                f"certificate and key: {exc}"
            ) from None
    if settings.tls_insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
