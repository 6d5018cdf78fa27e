"""Where a report is written: its own directory under the state directory, holding report.json
and report.html, each written atomically.

What a report holds and its JSON schema are agent.report.model's, the page
agent.report.html.page's, the terminal table agent.report.table's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from agent.atomic import atomic_write_text
from agent.report.html.page import render_html
from agent.report.model import (
    Report,
    report_to_dict,
)


def write_report(report: Report, directory: str | Path) -> tuple[Path, Path]:
    """Write report.json and report.html (each atomically) into `directory`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / "report.json", out / "report.html"
    text = json.dumps(report_to_dict(report), indent=2, allow_nan=False)
    atomic_write_text(json_path, text + "\n")
    atomic_write_text(html_path, render_html(report, json_beside=True))
    return json_path, html_path


def report_dir(state_dir: str | Path, created_at: datetime) -> Path:
    """`<state_dir>/reports/<UTC time>`, with a -N suffix if that directory already exists."""
    stamp = created_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path(state_dir) / "reports"
    candidate = base / stamp
    n = 1
    while candidate.exists():
        candidate = base / f"{stamp}-{n}"
        n += 1
    return candidate


def new_report_dir(state_dir: str | Path, created_at: datetime) -> Path:
    """Like report_dir, but the directory is made here, exclusively: two writers (two
    controllers' stops finishing in two pool workers in the same second, or one second lived
    twice after the wall clock was stepped back) never share it."""
    base = Path(state_dir) / "reports"
    base.mkdir(parents=True, exist_ok=True)
    stamp = created_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate, n = base / stamp, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            candidate = base / f"{stamp}-{n}"
            n += 1
