"""Credentials and TLS of the MQTT publisher.

The password is read from a file that only the service user may read (refused otherwise, with the
file's name and mode, like ssh refuses a private key others can read) and is kept in a Secret,
whose repr and str never show it, so that it cannot leak through a log line, a traceback's
locals printed by a debugger, or a report.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from agent.config.mqtt import ClientTls, read_password_text
from agent.errors import ConfigError


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
    """The password in `path` (one line; a trailing newline is not part of it), checked as
    `jha config check` checks it (agent.config.mqtt.read_password_text)."""
    return Secret(read_password_text(path))


def tls_context(settings: ClientTls) -> ssl.SSLContext | None:
    """The client's TLS context (the agent's publisher's, the fleet's subscriber's), or None for
    plain TCP. Verification is on unless tls_insecure."""
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
