"""Captures left behind by a crash: saved, but killed before their analysis was recorded.

A capture is written before its fit runs, and the history names it only when the result is
recorded; a daemon killed in between (kill -9, OOM, power cut) leaves an orphan capture. At
start the daemon lists them (before any new capture is saved, so a capture of this run is never
taken for one), then analyses and records each in the background with the trigger "recovered",
exactly as the cycle would have been, report and publishing included. Once recorded, the
history names it and it is never taken up again. A capture that does not load is moved aside to
`<state_dir>/quarantine/` with a log line naming the file and the reason; captures of other
kinds (the identification's MultiCapture) are left where they are, with a log line.

The blocking parts (the directory scan, SQLite, loading and moving files) run in threads.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.capture.model import Capture
from agent.config.model import Config, ControllerSettings, JointSettings
from agent.errors import AgentError
from agent.history.records import Outcome, Trigger
from agent.kinds.backlash.kind import backlash_cycle
from agent.kinds.base import AnalysisContext, JointJob, KindHandler
from agent.logfmt import kv

log = logging.getLogger(__name__)

QUARANTINE_DIR = "quarantine"
TRIGGER = Trigger.RECOVERED
_STAMP = "%Y%m%dT%H%M%S_%fZ"  # agent.kinds.base.stamp: how the daemon names a capture


@dataclass(frozen=True)
class Orphan:
    path: Path
    controller: str  # from the path: captures/<controller>/<joint>/<stamp>.npz
    joint: str


def _named_captures(db: Path) -> set[str]:
    """Every capture path the history names, as written."""
    if not db.exists():
        return set()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT capture_path FROM cycles WHERE capture_path IS NOT NULL")
        return {str(p) for (p,) in rows}
    except sqlite3.OperationalError:  # no cycles table yet: nothing recorded
        return set()
    finally:
        conn.close()


def find_orphans(state_dir: Path) -> list[Orphan]:
    """Capture files under `<state_dir>/captures` the history does not name, oldest name first.
    Blocking: call it in a thread."""
    root = state_dir / "captures"
    if not root.is_dir():
        return []
    _finish_cut_writes(root)
    named = _named_captures(state_dir / "history.sqlite")
    resolved: set[str] | None = None  # made only if a path is not found as written
    found = []
    for path in sorted(root.glob("*/*/*.npz")):
        if path.name.startswith(".") or str(path) in named:  # "." : an atomic write cut short
            continue
        if not path.is_file():  # a FIFO would block its reader (and this daemon) forever
            quarantine(state_dir, path, "not a regular file")
            continue
        if resolved is None:  # a relative state dir, or one reached through a symlink
            resolved = {os.path.realpath(p) for p in named}
        if os.path.realpath(path) not in resolved:
            found.append(Orphan(path, path.parent.parent.name, path.parent.name))
    return found


def _finish_cut_writes(root: Path) -> None:
    """An atomic write (agent.atomic: `.<name>.<random>.tmp`, then renamed) killed before its
    rename leaves a temporary file nobody would take up: renamed to the name it was written
    for, it becomes an orphan like any other (recorded if whole, quarantined if torn); one
    whose target exists already is a leftover copy and goes. Only at start, while no write of
    this agent runs (one agent per state directory: agent.service.instance_lock)."""
    for tmp in sorted(root.glob("*/*/.*.npz.*.tmp")):
        target = tmp.with_name(tmp.name[1:].rsplit(".", 2)[0])
        try:
            if target.exists():
                tmp.unlink()
                log.info(kv("capture_tmp_removed", path=tmp, reason=f"{target.name} exists"))
            else:
                os.replace(tmp, target)
                log.warning(kv("capture_tmp_recovered", path=tmp, renamed_to=target))
        except OSError as exc:
            log.error(kv("capture_tmp_left", path=tmp, error=exc.strerror or str(exc)))


def quarantine(state_dir: Path, path: Path, reason: str) -> Path:
    """Move a capture that cannot be used to `<state_dir>/quarantine/<its captures/ path>`
    (never over another file); logged with the reason. Blocking."""
    try:
        relative = path.relative_to(state_dir / "captures")
    except ValueError:
        relative = Path(path.name)
    target = state_dir / QUARANTINE_DIR / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while target.exists():
        target = target.with_name(f"{path.stem}-{n}{path.suffix}")
        n += 1
    os.replace(path, target)
    log.error(kv("capture_quarantined", path=path, moved_to=target, reason=reason))
    return target


def _load(orphan: Orphan) -> Capture | str:
    """The backlash capture, or the kind of capture it is when it is another (a string).
    Raises when the file does not load. Blocking."""
    from agent.capture.files import load_capture

    try:
        from agent.capture.multi import is_multi_capture
    except ImportError:  # an agent without whole-robot cycles
        pass
    else:
        if is_multi_capture(orphan.path):
            return "identification (MultiCapture)"
    return load_capture(orphan.path)


def _started_at(orphan: Orphan, capture: Capture) -> dt.datetime:
    """When the cycle began: the file's name as the daemon gave it; else the capture's own
    metadata; else the file's modification time."""
    try:
        return dt.datetime.strptime(orphan.path.stem, _STAMP).replace(tzinfo=dt.UTC)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(capture.meta.started_at)
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
    except ValueError:
        return dt.datetime.fromtimestamp(orphan.path.stat().st_mtime, dt.UTC)


def _joint_of(config: Config, orphan: Orphan) -> tuple[ControllerSettings, JointSettings] | str:
    """The configured controller and joint of an orphan, or why there is none."""
    ctrl = next((c for c in config.controllers if c.name == orphan.controller), None)
    if ctrl is None:
        return f"controller {orphan.controller!r} is not in the config any more"
    joint = next((j for j in ctrl.joints if j.name == orphan.joint), None)
    if joint is None:
        return f"controller {orphan.controller} has no joint {orphan.joint!r} any more"
    return ctrl, joint


async def recover(
    config: Config,
    orphans: list[Orphan],
    kind: KindHandler,
    analysis: AnalysisContext,
    report: Callable[[ControllerSettings, list[JointJob]], Awaitable[None]],
    run_blocking: Callable[..., Awaitable[Any]],
) -> int:
    """Analyse, record and report every orphan (one report per capture, as its stop would
    have had); returns how many could not be recorded (they wait for the next start).
    `run_blocking(f, *args)` runs f in a thread."""
    state_dir = analysis.state_dir
    recorded = not_recorded = 0
    for orphan in orphans:
        try:
            loaded: Capture | str = await run_blocking(_load, orphan)
        except Exception as exc:  # any failure to load: the file is unusable evidence
            await run_blocking(quarantine, state_dir, orphan.path, f"{type(exc).__name__}: {exc}")
            continue
        if isinstance(loaded, str):
            log.info(
                kv(
                    "orphan_capture_skipped",
                    path=orphan.path,
                    kind=loaded,
                    reason="only backlash captures are recovered",
                )
            )
            continue
        found = _joint_of(config, orphan)
        if isinstance(found, str):
            log.warning(kv("orphan_capture_skipped", path=orphan.path, reason=found))
            continue
        ctrl, joint = found
        job = JointJob(
            ctrl,
            joint,
            backlash_cycle(ctrl, joint),
            _started_at(orphan, loaded),
            capture_path=orphan.path,
            trigger=TRIGGER,
        )
        log.info(
            kv(
                "orphan_capture_recovering",
                controller=ctrl.name,
                joint=joint.name,
                path=orphan.path,
            )
        )
        try:
            job.result = await kind.analyse(analysis, job, loaded)
        except AgentError as exc:
            job.outcome, job.error = Outcome.ERROR, str(exc)
        except Exception as exc:  # a bug or a dead worker: recorded as such, not retried
            log.exception(kv("analysis_failed", controller=ctrl.name, joint=joint.name))
            job.outcome, job.error = Outcome.ERROR, f"analysis failed: {type(exc).__name__}: {exc}"
        try:
            await report(ctrl, [job.for_pool()])
        except Exception as exc:  # a full disk: it stays an orphan, taken up at the next start
            log.error(
                kv(
                    "orphan_capture_not_recorded",
                    path=orphan.path,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            not_recorded += 1
            continue
        recorded += 1
    if orphans:
        log.info(
            kv(
                "orphan_captures_done",
                found=len(orphans),
                recorded=recorded,
                not_recorded=not_recorded,
            )
        )
    return not_recorded
