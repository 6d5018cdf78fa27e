"""One line per event on stderr: `time=... level=... logger=... event=... key=value ...`.

journald adds host, unit and pid; this adds what it cannot know. Values are quoted when they hold
spaces, quotes or '='. A filter on the handler redacts anything that looks like a secret
(password=, token=, ...) and every value registered as a loaded secret, whoever logs it.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sys
import threading
from typing import TextIO

_SECRET_KEYS = re.compile(
    r"(?i)\b((?:[a-z_]*_)?(?:password|passwd|secret|token|api_?key|credentials?))"
    r"(\s*[=:]\s*)(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[^\s,;}]+)"
)
REDACTED = "***"
_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str) -> None:
    """A secret the agent loaded (a password file's content): never printed from now on."""
    if len(value) >= 4:  # shorter strings would redact innocent text everywhere
        with _secrets_lock:
            _secrets.add(value)


def redact(text: str) -> str:
    text = _SECRET_KEYS.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, REDACTED)
    return text


def quote(value: object) -> str:
    """A logfmt value: bare when it is one plain token, else double-quoted with escapes."""
    text = str(value)
    if text and not any(c in text for c in ' "=\\\t\n\r'):
        return text
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def kv(event: str, **fields: object) -> str:
    """The message of one event: `event=name k=v ...` (None values are left out)."""
    parts = [f"event={quote(event)}"]
    parts += [f"{k}={quote(v)}" for k, v in fields.items() if v is not None]
    return " ".join(parts)


class RedactingFilter(logging.Filter):
    """Sits on the handler so every logger's records pass it; rewrites the formatted message."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is still logged, as its raw text
            message = f"{record.msg!r} {record.args!r}"
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
        message = record.getMessage()
        if not message.startswith("event="):
            message = f"event=message msg={quote(message)}"
        line = (
            f"time={moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} "
            f"level={record.levelname.lower()} logger={record.name} {message}"
        )
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:  # one event, one line: the traceback rides along as a field
            line += f" traceback={quote(record.exc_text)}"
        return line


def setup_logging(level: str, stream: TextIO | None = None) -> logging.Handler:
    """Replace the root handlers with one logfmt handler on stderr (idempotent)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    return handler
