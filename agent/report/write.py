"""The joint-health report: versioned JSON, one self-contained HTML page, and a terminal table.

The parts live in agent.report.model (what a report holds, and its JSON schema),
agent.report.html (the page) and agent.report.table (the terminal table); this module gathers
them for the daemon, the publishers and the command line, and writes a report's files.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.atomic import atomic_write_text
from agent.report.html import render_html
from agent.report.model import (
    REPORT_SCHEMA,
    IndicatorSummary,
    JointReport,
    Report,
    indicator_summaries,
    joint_report,
    joint_to_dict,
    json_safe,
    limits_for,
    new_report_dir,
    report_dir,
    report_to_dict,
)
from agent.report.table import (
    TABLE_WIDTH,
    reason_text,
    short_reason,
    summary_table,
    value_text,
)

__all__ = [
    "REPORT_SCHEMA", "TABLE_WIDTH", "IndicatorSummary", "JointReport", "Report",
    "indicator_summaries", "joint_report", "joint_to_dict", "json_safe", "limits_for",
    "new_report_dir", "reason_text", "render_html", "report_dir", "report_to_dict", "short_reason",
    "summary_table", "value_text", "write_report",
]


def write_report(report: Report, directory: str | Path) -> tuple[Path, Path]:
    """Write report.json and report.html (each atomically) into `directory`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / "report.json", out / "report.html"
    text = json.dumps(report_to_dict(report), indent=2, allow_nan=False)
    atomic_write_text(json_path, text + "\n")
    atomic_write_text(html_path, render_html(report))
    return json_path, html_path
