"""The plan's HTTPS: a server context from the certificate chain and key the settings name, and
the checks `jha fleet check` makes of them (loadable, a key only its owner may read)."""

from __future__ import annotations

import os
import ssl
import stat

from agent.errors import ConfigError


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """TLS 1.2 or newer with the chain and key; ConfigError naming what does not load."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"the HTTPS certificate {cert_file} and key {key_file} cannot be loaded: {exc}"
        ) from None
    return ctx


def key_file_problem(key_file: str) -> str | None:
    """Why a private key file is not fit (other users may read it), or None."""
    try:
        mode = os.stat(key_file).st_mode
    except OSError as exc:
        return f"expected a readable key file, found: {exc.strerror}"
    if not stat.S_ISREG(mode):
        return "expected a regular file"
    if mode & 0o077:
        return f"expected a file only its owner may read (0600 or 0400), found {mode & 0o777:04o}"
    return None
