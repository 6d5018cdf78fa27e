"""Where a report is written: its directory's report.json and report.html, atomically.

What a report holds and its JSON schema are agent.report.model's, the page agent.report.html's,
the terminal table agent.report.table's.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.atomic import atomic_write_text
from agent.report.html import render_html
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
    atomic_write_text(html_path, render_html(report))
    return json_path, html_path
