"""Retention: captures and reports pruned to an age and a size budget after each stop.

An edge PC's disk fills over months otherwise. What goes first is the oldest: a capture file
(with its .meta.yaml / sidecars of the same stem) or a whole report directory. Never pruned:
- each joint's latest capture of each kind, and the report its latest cycle went into;
- what an open finding points to: a joint whose latest verdict is watch or alert keeps that
  cycle's capture and report until a later verdict closes it;
- the newest report directory (the `latest` link's target).
The history database is never touched: a pruned cycle keeps its estimates and verdict; its
capture_path then names a file that is gone, which `jha report` does not need.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agent.config.model import RetentionSettings
from agent.history.store import HistoryStore
from agent.logfmt import kv
from agent.report.index import report_dirs

log = logging.getLogger(__name__)
SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Item:
    """One prunable unit: a capture (its files) or a report directory."""

    path: Path
    files: tuple[Path, ...]
    size_bytes: int
    mtime_s: float


@dataclass(frozen=True)
class RetentionResult:
    deleted: tuple[Path, ...]
    freed_bytes: int
    kept_bytes: int
    protected: int  # items the budget could not touch
    over_budget: bool  # still above max_mb with only protected items left

    def to_log(self) -> str:
        return kv(
            "retention",
            deleted=len(self.deleted),
            freed_mb=round(self.freed_bytes / 1e6, 3),
            kept_mb=round(self.kept_bytes / 1e6, 3),
            protected=self.protected,
            over_budget=self.over_budget or None,
        )


def _size(paths: Iterable[Path]) -> int:
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):  # gone since it was listed
            total += p.stat().st_size
    return total


def capture_items(state_dir: Path) -> list[Item]:
    root = state_dir / "captures"
    items = []
    for main in root.glob("*/*/*.npz"):
        if main.name.startswith("."):
            continue  # a write in progress (atomic rename pending)
        files = (main, *sorted(p for p in main.parent.glob(main.name + ".*")))
        items.append(Item(main, files, _size(files), main.stat().st_mtime))
    return items


def report_items(state_dir: Path) -> list[Item]:
    """Report directories (never the `latest` link), newest first, as report_dirs lists them."""
    items = []
    for d in report_dirs(state_dir / "reports"):
        if (d / "report.json").exists():
            files = tuple(p for p in d.rglob("*") if p.is_file())
            items.append(Item(d, files, _size(files), (d / "report.json").stat().st_mtime))
    return items


def protected_paths(store: HistoryStore) -> set[Path]:
    """Latest capture per joint and kind, the latest cycle's report, and what open findings
    point to (resolved paths; report directories, not their report.json)."""
    out: set[Path] = set()
    for capture, report in store.evidence_to_keep():
        if capture:
            out.add(Path(capture).resolve())
        if report:
            out.add(Path(report).resolve().parent)  # reports.path is the report.json
    return out


def apply_retention(
    state_dir: Path, settings: RetentionSettings, now_s: float | None = None
) -> RetentionResult:
    """Delete what the age and the size budget let go, oldest first (see the module doc)."""
    now_s = time.time() if now_s is None else now_s
    reports = report_items(state_dir)
    items = capture_items(state_dir) + reports
    history = state_dir / "history.sqlite"
    protected: set[Path] = set()
    if history.exists():
        with HistoryStore(history) as store:
            protected = protected_paths(store)
    if reports:  # newest first: the `latest` link's target
        protected.add(reports[0].path.resolve())
    items.sort(key=lambda i: (i.mtime_s, str(i.path)))
    keep = [i for i in items if i.path.resolve() in protected]
    candidates = [i for i in items if i.path.resolve() not in protected]
    total = sum(i.size_bytes for i in items)
    budget = None if settings.max_mb is None else settings.max_mb * 1e6
    deleted: list[Path] = []
    freed = 0
    for item in candidates:
        too_old = (
            settings.max_age_days is not None
            and now_s - item.mtime_s > settings.max_age_days * SECONDS_PER_DAY
        )
        over = budget is not None and total - freed > budget
        if not (too_old or over):
            continue
        for f in item.files:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        if item.path.is_dir():
            _remove_empty_tree(item.path)
        deleted.append(item.path)
        freed += item.size_bytes
    return RetentionResult(
        tuple(deleted),
        freed,
        total - freed,
        len(keep),
        budget is not None and total - freed > budget,
    )


def _remove_empty_tree(directory: Path) -> None:
    for dirpath, _, _ in sorted(os.walk(directory), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):  # not empty: someone put a file there; leave it
            os.rmdir(dirpath)


def prune_and_index(state_dir: Path, settings: RetentionSettings) -> RetentionResult:
    """After a stop's report: apply retention, then rewrite the reports index and `latest`."""
    from agent.report.index import write_index

    result = apply_retention(state_dir, settings)
    write_index(state_dir)
    return result
