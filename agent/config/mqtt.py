"""Settings of the MQTT publisher (`publish.mqtt:` in the config).

Secure by default: TLS with the server certificate and host name verified (port 8883). Plain TCP
needs `tls: false`; skipping verification needs `tls_insecure: true`, which is logged as a warning
at every connection. The password is never in the config: `password_file` names a file that only
the service user may read, checked by read_password_text() both when the publisher is built (like
ssh checks its keys) and by `jha config check`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from agent.config.secret_file import MAX_SECRET_BYTES, SecretFileError, read_secret_file

# MQTT topic names must not hold the wildcards + and #, nor NUL (MQTT 3.1.1 section 4.7); topics
# starting with $ belong to the broker ($SYS).
_TOPIC_FORBIDDEN = ("+", "#", "\x00")


class ClientTls(Protocol):
    """What an MQTT client's settings say about TLS and login (the publisher's, the fleet's)."""

    @property
    def tls(self) -> bool: ...
    @property
    def tls_insecure(self) -> bool: ...
    @property
    def ca_file(self) -> str | None: ...
    @property
    def cert_file(self) -> str | None: ...
    @property
    def key_file(self) -> str | None: ...
    @property
    def username(self) -> str | None: ...
    @property
    def password_file(self) -> str | None: ...


def client_tls_problems(s: ClientTls) -> list[tuple[str, str]]:
    """(field, problem) of the TLS and login settings that do not go together."""
    out: list[tuple[str, str]] = []
    if (s.cert_file is None) != (s.key_file is None):
        missing = "key_file" if s.key_file is None else "cert_file"
        out.append((missing, "cert_file and key_file go together: expected both or neither"))
    if not s.tls:
        for name in ("ca_file", "cert_file", "key_file"):
            if getattr(s, name) is not None:
                out.append((name, f"{name} needs tls: true"))
        if s.tls_insecure:
            out.append(("tls_insecure", "tls_insecure needs tls: true"))
    if s.password_file is not None and s.username is None:
        out.append(("password_file", "a password_file needs a username"))
    return out


def credential_warning(s: ClientTls, who: str) -> str | None:
    """A warning when `who` logs in to the broker with no credential of its own: then the
    broker cannot bind it to its topics (config/mosquitto/jha.acl.example), and any client that
    reaches the broker may publish as it."""
    if s.cert_file is not None or (s.username is not None and s.password_file is not None):
        return None
    return (
        f"warning: {who} has no credential of its own at the broker (username and "
        "password_file, or a TLS client certificate: cert_file and key_file): the broker "
        "cannot bind it to its own topics, and any client may publish in its name "
        "(config/mosquitto/jha.acl.example, docs/publish.md)"
    )


@dataclass(frozen=True)
class OutboxSettings:
    """Bounds of the store-and-forward outbox; past them the OLDEST full reports are dropped
    (logged and counted), never the latest health of a joint."""

    max_messages: int = field(default=10_000, metadata={"ge": 10, "le": 10_000_000})
    max_bytes: int = field(
        default=64 * 1024 * 1024,
        metadata={"ge": 64 * 1024, "le": 64 * 1024**3, "doc": "payload bytes held at most"},
    )


@dataclass(frozen=True)
class MqttSettings:
    host: str = field(metadata={"min_len": 1, "doc": "the plant broker"})
    port: int = field(default=8883, metadata={"ge": 1, "le": 65535})
    topic_prefix: str = field(
        default="jha", metadata={"min_len": 1, "doc": "topics are <prefix>/<controller>/..."}
    )
    # Default: "jha-<host name>"; it also names the agent's status topic.
    client_id: str | None = field(default=None, metadata={"min_len": 1})
    keepalive_s: int = field(default=60, metadata={"ge": 5, "le": 65535})
    # Only QoS 1 is offered: delivery is confirmed by PUBACK and the outbox dedupes by message_id.
    qos: Literal[1] = 1
    tls: bool = field(default=True, metadata={"doc": "false only for a broker on this host"})
    ca_file: str | None = field(
        default=None, metadata={"min_len": 1, "doc": "CA bundle (PEM); default: the system's"}
    )
    cert_file: str | None = field(default=None, metadata={"min_len": 1})
    key_file: str | None = field(default=None, metadata={"min_len": 1})
    tls_insecure: bool = field(
        default=False,
        metadata={"doc": "DANGEROUS: accept any server certificate (logged at every connect)"},
    )
    username: str | None = field(default=None, metadata={"min_len": 1})
    password_file: str | None = field(
        default=None, metadata={"min_len": 1, "doc": "mode 0600 or 0400, owned by the service"}
    )
    reconnect_min_s: float = field(default=1.0, metadata={"gt": 0.0, "le": 60.0})
    reconnect_max_s: float = field(default=60.0, metadata={"gt": 0.0, "le": 3600.0})
    # Messages handed to the client library and not yet acknowledged, at most.
    max_inflight: int = field(default=20, metadata={"ge": 1, "le": 1000})
    close_timeout_s: float = field(
        default=3.0, metadata={"ge": 0.0, "le": 60.0, "doc": "how long close() flushes"}
    )
    # Brokers cap message sizes (mosquitto's message_size_limit, 128 kB on some cloud brokers)
    # and drop the connection on a bigger one, which the client would resend forever: larger
    # messages are refused when queued (logged, counted) instead.
    max_payload_bytes: int = field(default=1024 * 1024, metadata={"ge": 1024, "le": 268_435_455})
    outbox: OutboxSettings = field(default_factory=OutboxSettings)

    def check(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        out += [("topic_prefix", m) for m in topic_prefix_problems(self.topic_prefix)]
        if self.client_id is not None and any(c in self.client_id for c in "\x00"):
            out.append(("client_id", "expected no NUL character"))
        out += client_tls_problems(self)
        if self.reconnect_max_s < self.reconnect_min_s:
            out.append(
                (
                    "reconnect_max_s",
                    f"expected a number >= reconnect_min_s ({self.reconnect_min_s:g}), "
                    f"found {self.reconnect_max_s:g}",
                )
            )
        return out


def topic_prefix_problems(prefix: str) -> list[str]:
    """Why `prefix` cannot start a topic name (empty when it can). Levels are separated by /."""
    problems = []
    bad = sorted({repr(c) for c in prefix if c in _TOPIC_FORBIDDEN or ord(c) < 0x20})
    if bad:
        problems.append(f"expected no wildcard (+ #) or control characters, found {', '.join(bad)}")
    if prefix.startswith("$"):
        problems.append("expected no leading $ (such topics belong to the broker)")
    if prefix and any(level == "" for level in prefix.split("/")):
        problems.append("expected no empty topic level (no leading, trailing or double /)")
    return problems


class PasswordFileError(SecretFileError):
    """The MQTT password file cannot be used (agent.config.secret_file says why)."""


def read_password_text(path: str | Path) -> str:
    """The password in `path` (one line; a trailing newline is not part of it), or
    PasswordFileError: missing, not a regular file, readable or writable by group or others,
    unreadable, not UTF-8, empty, several lines, or longer than MQTT allows."""
    return read_secret_file(
        path,
        "MQTT password file",
        noun="password",
        too_long=f"the password is longer than MQTT allows ({MAX_SECRET_BYTES} bytes)",
        error=PasswordFileError,
    )
