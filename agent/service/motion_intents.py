"""A record of every motion written before it starts, so that a motion the daemon did not live
to record (kill -9, the OOM killer, a power cut) is still in the history.

Before a cycle moves, run_job writes `<state_dir>/intents/<controller>/<folder>/<stamp>.json`,
the path of its capture's but for the suffix (the folder is the joint, or the kind of a
whole-robot cycle), atomically and fsync'd: controller, joint, kind, trigger, start, pid. It
goes when something else speaks for the motion: the saved capture (recovery analyses an
unrecorded one), the history row of the cycle's outcome, or the interlocks' refusal (nothing
moved). At the next start, before any runner may move, every intent left is recorded as an
aborted cycle ("interrupted: ...") unless its capture is there, then removed. A file that
cannot be read is moved to quarantine with its reason, as a bad capture is.

Blocking throughout (small files, fsync, SQLite): the daemon calls it in threads.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.atomic import atomic_write_text
from agent.history.records import Outcome, Trigger
from agent.history.store import HistoryStore
from agent.kinds.base import JointJob, stamp
from agent.logfmt import kv
from agent.service.recovery import quarantine

log = logging.getLogger(__name__)

INTENTS_DIR = "intents"
INTERRUPTED = (
    "interrupted: the agent stopped (killed, crashed or powered off) during this cycle, before "
    "its end was recorded; it may have moved the joint, and no capture was saved. Check the "
    "joint is where it belongs before the next cycle"
)
_FIELDS = ("controller", "joint", "kind", "trigger", "started_at")


def intent_path(state_dir: Path, job: JointJob, folder: str) -> Path:
    """Where the job's intent goes; `folder` is its capture's (the joint, or the kind)."""
    return state_dir / INTENTS_DIR / job.controller.name / folder / f"{stamp(job.started_at)}.json"


def write_intent(path: Path, job: JointJob, folder: str) -> None:
    """Raises OSError when the disk refuses: the caller must then not move."""
    doc = {
        "controller": job.controller.name,
        "joint": job.joint_name,
        "kind": job.cycle.kind.value,
        "trigger": None if job.trigger is None else str(job.trigger),
        "started_at": job.started_at.isoformat(),
        "pid": os.getpid(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(doc) + "\n")


def drop_intent(path: Path | None) -> None:
    """The motion is accounted for elsewhere; a failure is logged (the next start records the
    motion as interrupted, which says too much but loses nothing)."""
    if path is None:
        return
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.error(kv("intent_not_removed", path=path, error=exc.strerror or str(exc)))


@dataclass(frozen=True)
class Intent:
    path: Path
    controller: str
    joint: str
    kind: str
    trigger: str | None
    started_at: dt.datetime


def _read(path: Path) -> Intent | str:
    """The intent in `path`, or why it is not one."""
    try:
        text = path.read_text(encoding="utf-8")
        doc: Any = json.loads(text) if len(text) < 4096 else None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if not isinstance(doc, dict) or any(not isinstance(doc.get(f), str | None) for f in _FIELDS):
        return f"expected a JSON object with the string fields {', '.join(_FIELDS)}"
    if not all(isinstance(doc.get(f), str) for f in ("controller", "joint", "kind", "started_at")):
        return "controller, joint, kind or started_at missing"
    try:
        started = dt.datetime.fromisoformat(doc["started_at"])
    except ValueError:
        return f"started_at {doc['started_at']!r} is no ISO 8601 time"
    if doc["trigger"] is not None and doc["trigger"] not in {t.value for t in Trigger}:
        return f"trigger {doc['trigger']!r} is none of the agent's"
    return Intent(path, doc["controller"], doc["joint"], doc["kind"], doc["trigger"], started)


def record_interrupted(state_dir: Path) -> int:
    """Record every intent a previous run left as an aborted cycle (unless its capture was
    saved: recovery takes that up), remove it, and return how many were recorded. Only at
    start, before any runner may move (one agent per state directory)."""
    root = state_dir / INTENTS_DIR
    if not root.is_dir():
        return 0
    # A write cut short: the motion waited for the rename, so it never started.
    for tmp in root.glob("*/*/.*.json.*.tmp"):
        drop_intent(tmp)
    recorded = 0
    with contextlib.ExitStack() as opened:
        store: HistoryStore | None = None  # opened at the first intent to record, once
        for path in sorted(root.glob("*/*/*.json")):
            found = _read(path) if path.is_file() else "not a regular file"
            if isinstance(found, str):
                quarantine(state_dir, path, found)
                continue
            # The capture's path mirrors the intent's (the folder is the joint, or the kind).
            capture = state_dir / "captures" / path.relative_to(root).with_suffix(".npz")
            if not capture.exists():
                if store is None:
                    store = opened.enter_context(HistoryStore(state_dir / "history.sqlite"))
                store.record_rejected(
                    controller=found.controller,
                    joint=found.joint,
                    kind=found.kind,
                    started_at=found.started_at,
                    finished_at=None,
                    reason=INTERRUPTED,
                    outcome=Outcome.ABORTED,
                    trigger=found.trigger,
                )
                recorded += 1
                log.warning(
                    kv(
                        "motion_interrupted",
                        controller=found.controller,
                        joint=found.joint,
                        kind=found.kind,
                        started_at=found.started_at.isoformat(),
                        recorded="aborted",
                    )
                )
            drop_intent(path)
    return recorded
