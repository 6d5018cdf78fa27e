"""The plan's HTTPS: a server context from the certificate chain and key the settings name, and
the checks `jha fleet check` makes of them (loadable, a key only its owner may read)."""

from __future__ import annotations

import ssl

from agent.config.secret_file import SecretFileError, check_owner_only
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
    """Why a private key file is not fit (other users may read it, it is not a file), or None:
    the rules of the secret files (agent.config.secret_file)."""
    try:
        check_owner_only(key_file, "HTTPS key file")
    except SecretFileError as exc:
        return exc.problem
    return None
