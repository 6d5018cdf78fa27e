"""`<state_dir>/reports/index.html` (every report kept, newest first) and the `latest` link.

Written after each stop's report and after retention pruned, so the index lists what is on
disk. Each row reads its report.json's summary only; a report that cannot be read is listed as
such, never skipped silently.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
from pathlib import Path

from agent.atomic import atomic_write_text

LATEST = "latest"


def _summary(directory: Path) -> tuple[str, str, str]:
    """(created, machines, worst status) of one report directory."""
    try:
        doc = json.loads((directory / "report.json").read_text(encoding="utf-8"))
        return (
            str(doc.get("created_at", "")),
            ", ".join(map(str, doc.get("machines", []))),
            str(doc.get("summary", {}).get("worst_status", "")),
        )
    except (OSError, ValueError, AttributeError) as exc:
        return ("", "", f"unreadable: {exc}")


def report_dirs(reports: Path) -> list[Path]:
    """Report directories, newest first (their names are UTC stamps, -N for a repeat)."""
    found = [d for d in reports.glob("*") if d.is_dir() and not d.is_symlink() and d.name != LATEST]
    return sorted(found, key=lambda d: (_mtime(d / "report.json"), d.name), reverse=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # no report.json (yet): oldest
        return 0.0


def write_index(state_dir: Path) -> Path | None:
    """Write reports/index.html and point reports/latest at the newest report; None when
    there is no report yet."""
    reports = state_dir / "reports"
    dirs = report_dirs(reports) if reports.is_dir() else []
    if not dirs:
        return None
    rows = []
    for d in dirs:
        created, machines, worst = _summary(d)
        name = html.escape(d.name)
        rows.append(
            f'<tr><td><a href="{name}/report.html">{name}</a></td><td>{html.escape(created)}</td>'
            f"<td>{html.escape(machines)}</td>"
            f'<td class="{html.escape(worst)}">{html.escape(worst)}</td></tr>'
        )
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>Joint-health reports</title><style>body{font-family:sans-serif}"
        "td,th{padding:2px 10px;text-align:left}.alert{color:#b00}.watch{color:#a60}</style>"
        "</head><body><h1>Joint-health reports</h1>"
        f'<p>{len(dirs)} report(s), newest first. <a href="{LATEST}/report.html">Latest</a>.</p>'
        "<table><thead><tr><th>report</th><th>created</th><th>machines</th><th>worst</th></tr>"
        "</thead><tbody>" + "".join(rows) + "</tbody></table></body></html>\n"
    )
    index = reports / "index.html"
    atomic_write_text(index, page)
    _point_latest(reports, dirs[0].name)
    return index


def _point_latest(reports: Path, target: str) -> None:
    """reports/latest -> target, replaced atomically (a reader never finds it missing)."""
    tmp = reports / f".{LATEST}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, reports / LATEST)
