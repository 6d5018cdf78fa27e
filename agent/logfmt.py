"""One line per event on stderr: `time=... level=... logger=... event=... key=value ...`.

journald adds host, unit and pid; this adds what it cannot know. Values are quoted when they hold
spaces, quotes or '='. A filter on the handler redacts anything that looks like a secret
(password=, token=, ...) and every value registered as a loaded secret, whoever logs it.

When stderr is the journal (systemd sets JOURNAL_STREAM to the device and inode of the stream it
connected, sd_journal_stream_fd(3)), each line starts with its syslog priority, `<4>` for a
warning (sd-daemon(3)), so `journalctl -p warning` finds it; without the prefix every line would
be stored at the stream's default priority, info. `--log-format json` writes one JSON object per
line instead, with the same fields.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import sys
import threading
from typing import Any, Literal, TextIO

LogFormat = Literal["logfmt", "json"]
# sd-daemon(3) / syslog(3) priorities of Python's levels
SYSLOG_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}

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


_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_.]*)=("(?:[^"\\]|\\.)*"|\S*)')
_UNESCAPE = {"n": "\n", "r": "\r", '"': '"', "\\": "\\"}


def parse_kv(message: str) -> dict[str, str]:
    """The fields of a logfmt message (the inverse of kv/quote for the agent's own lines)."""
    out = {}
    for key, raw in _PAIR.findall(message):
        if raw.startswith('"'):
            raw = re.sub(r"\\(.)", lambda m: _UNESCAPE.get(m.group(1), m.group(1)), raw[1:-1])
        out[key] = raw
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, then the event's own fields."""

    def format(self, record: logging.LogRecord) -> str:
        moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
        message = record.getMessage()
        doc: dict[str, Any] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = parse_kv(message) if message.startswith("event=") else {}
        doc.update(fields or {"event": "message", "msg": message})
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["traceback"] = record.exc_text
        return json.dumps(doc, ensure_ascii=False)


class JournalPrefix(logging.Formatter):
    """`<priority>` before another formatter's line, for a stderr that is the journal."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        priority = SYSLOG_PRIORITY.get(record.levelno)
        if priority is None:  # a custom level: the nearest standard one at or below it
            below = [lv for lv in SYSLOG_PRIORITY if lv <= record.levelno]
            priority = SYSLOG_PRIORITY[max(below)] if below else 7
        return f"<{priority}>{self.inner.format(record)}"


def stream_is_journal(stream: TextIO) -> bool:
    """True when `stream` is the journal stream systemd named in JOURNAL_STREAM."""
    named = os.environ.get("JOURNAL_STREAM", "")
    dev, _, ino = named.partition(":")
    try:
        st = os.fstat(stream.fileno())
        return bool(named) and (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (OSError, ValueError, AttributeError):
        # no file descriptor (a StringIO), or JOURNAL_STREAM not two numbers
        return False


def setup_logging(
    level: str,
    stream: TextIO | None = None,
    log_format: LogFormat = "logfmt",
    journal: bool | None = None,
) -> logging.Handler:
    """Replace the root handlers with one handler on stderr (idempotent): logfmt or JSON lines,
    with the journal's priority prefix when stderr is the journal (`journal=None`: detect it)."""
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out)
    formatter: logging.Formatter = JsonFormatter() if log_format == "json" else LogfmtFormatter()
    if journal if journal is not None else stream_is_journal(out):
        formatter = JournalPrefix(formatter)
    handler.setFormatter(formatter)
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    return handler
