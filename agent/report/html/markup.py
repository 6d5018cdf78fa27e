"""The small pieces every part of the report page is made of: escaped text, status and NE 107
badges, times and display units.

Every text from config or data goes through esc (escaped, XML-invalid characters replaced), so
the page stays well-formed XML.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime

from agent.health.display import indicator_info
from agent.health.status import Ne107, Status
from agent.report.svg import clean_text

NE107_TEXT = {
    Ne107.NORMAL: "normal",
    Ne107.MAINTENANCE_REQUIRED: "maintenance required",
    Ne107.OUT_OF_SPECIFICATION: "out of specification",
    Ne107.FAILURE: "failure",
    Ne107.CHECK_FUNCTION: "check function",
}


def esc(value: object) -> str:
    return html.escape(clean_text(str(value)), quote=True)


def badge(status: Status) -> str:
    return f'<span class="badge status s-{esc(status.value)}">{esc(status.value.upper())}</span>'


def dry_run_badge() -> str:
    """The status cell of a dry run: no verdict was made, and the cell says so."""
    return '<span class="badge status s-dry">DRY RUN</span>'


def ne107_letter(signal: Ne107) -> str:
    """The NE 107 badge with the letter only, for narrow table cells."""
    return (
        f'<span class="badge ne107 ne-{signal.letter}" title="NAMUR NE 107: '
        f'{NE107_TEXT[signal]}">{signal.letter}</span>'
    )


def ne107_badge(signal: Ne107) -> str:
    return (
        f'<span class="badge ne107 ne-{signal.letter}" title="NAMUR NE 107">'
        f"NE 107 {signal.letter}: {NE107_TEXT[signal]}</span>"
    )


def when(time_iso: str) -> str:
    try:
        return datetime.fromisoformat(time_iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return time_iso


def display_unit(indicator: str, stored_unit: str = "") -> tuple[float, str]:
    """(scale, unit) to show an indicator in: its display unit, else the stored SI unit."""
    info = indicator_info(indicator)
    return (info.scale, info.display_unit) if info.display_unit else (1.0, stored_unit)


def figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"
