"""Recording a stop's jobs in the history, then writing its report (run in the process pool).

The history entries come first and the report after, so a crash in between leaves a report
the history does not point to yet, never a pointer to a report that is not there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agent.kinds.base import JointJob, utcnow
from agent.kinds.registry import all_kinds

if TYPE_CHECKING:  # the report model loads scipy (trends): only the pool imports it
    from agent.report.model import JointReport, Report


def record_jobs(state_dir: Path, jobs: list[JointJob]) -> list[int]:
    """Pool entry point: every job's history entries, in one connection; their cycle ids."""
    from agent.history.store import HistoryStore

    kinds = all_kinds()
    ids: list[int] = []
    with HistoryStore(state_dir / "history.sqlite") as store:
        for job in jobs:
            ids += kinds[job.cycle.kind].record(store, job)
    return ids


def merge_joint_reports(parts: list[JointReport]) -> tuple[list[JointReport], list[JointReport]]:
    """One entry per joint, (judged, indicators only): a joint that two cycles of the stop
    measured (its backlash and the identification) keeps the entry with a backlash result and
    gains the other's evidence plots."""
    merged: dict[tuple[str, str], JointReport] = {}
    for part in parts:
        key = (part.controller, part.joint)
        before = merged.get(key)
        if before is None:
            merged[key] = part
            continue
        base, other = (part, before) if before.result is None and part.result else (before, part)
        merged[key] = replace(base, evidence=(*base.evidence, *other.evidence))
    everyone = list(merged.values())
    return [j for j in everyone if not j.indicator_only], [j for j in everyone if j.indicator_only]


@dataclass(frozen=True)
class WrittenReport:
    json_path: Path
    html_path: Path
    table: str  # the terminal summary
    report: Report | None  # only when asked for (publishers): it drags scipy into the daemon


def identification_warnings(jobs: list[JointJob]) -> tuple[str, ...]:
    """What the identifications of a stop warned about (the lines `jha identify` prints), for
    its report page: a page that hid them would look surer than the fit was."""
    from agent.kinds.identification.kind import IdentificationAnalysis

    return tuple(
        f"identification of {job.controller.name}: {w}"
        for job in jobs
        if isinstance(job.result, IdentificationAnalysis)
        for w in job.result.warnings
    )


def record_and_report(
    state_dir: Path, ctrl: str, jobs: list[JointJob], want_report: bool
) -> WrittenReport:
    """Pool entry point: record a stop's jobs, then write its report."""
    from agent.history.store import HistoryStore
    from agent.report.model import Report
    from agent.report.table import summary_table
    from agent.report.write import new_report_dir, write_report

    cycle_ids = record_jobs(state_dir, jobs)
    kinds = all_kinds()
    created = utcnow()
    with HistoryStore(state_dir / "history.sqlite") as store:
        parts = [jr for job in jobs for jr in kinds[job.cycle.kind].joint_reports(store, job)]
    judged, others = merge_joint_reports(parts)
    report = Report(
        created_at_iso=created.isoformat(),
        machines=(ctrl,),
        joints=tuple(judged),
        indicator_joints=tuple(others),
        warnings=identification_warnings(jobs),
    )
    json_path, html_path = write_report(report, new_report_dir(state_dir, created))
    # After the files: a crash in between leaves a report the history does not point to yet,
    # never a pointer to a report that is not there.
    with HistoryStore(state_dir / "history.sqlite") as store:
        store.record_report(report.message_id, report.created_at_iso, json_path, cycle_ids)
    return WrittenReport(
        json_path, html_path, summary_table(report), report if want_report else None
    )
