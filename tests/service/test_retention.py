"""Retention (issue 16): captures and reports pruned to an age and a size budget, never each
joint's latest evidence or what an open watch/alert points to; the reports index and `latest`."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent.config.model import RetentionSettings
from agent.history.store import HistoryStore
from agent.report.index import write_index
from agent.service.retention import apply_retention, prune_and_index

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW_S = (T0 + timedelta(days=400)).timestamp()
KB = 1000


def _file(path: Path, size: int, day: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    t = (T0 + timedelta(days=day)).timestamp()
    os.utime(path, (t, t))
    return path


def _report(state: Path, name: str, day: float, worst: str = "ok") -> Path:
    d = state / "reports" / name
    doc = {
        "created_at": (T0 + timedelta(days=day)).isoformat(),
        "machines": ["r"],
        "summary": {"worst_status": worst},
    }
    _file(d / "report.html", 20 * KB, day)
    path = _file(d / "report.json", 0, day)
    path.write_text(json.dumps(doc))
    t = (T0 + timedelta(days=day)).timestamp()
    os.utime(path, (t, t))
    return path


def history(
    state: Path, statuses: dict[str, list[str]]
) -> dict[tuple[str, int], tuple[Path, Path]]:
    """Per joint one cycle a day (day k: capture and report); statuses per joint and day."""
    out = {}
    with HistoryStore(state / "history.sqlite") as store:
        for joint, days in statuses.items():
            for k, status in enumerate(days):
                cap = _file(state / "captures" / "r" / joint / f"day{k:03d}.npz", 100 * KB, k)
                _file(cap.with_name(cap.name + ".meta.yaml"), 1 * KB, k)
                report = _report(state, f"{joint}-day{k:03d}", k, status)
                started = T0 + timedelta(days=k)
                cid = store.record_cycle(
                    controller="r",
                    joint=joint,
                    kind="backlash",
                    started_at=started,
                    finished_at=started,
                    status=status,
                    capture_path=cap,
                )
                store.record_report(f"{joint}-{k}", started, report, [cid])
                out[(joint, k)] = (cap, report.parent)
    return out


def test_the_budget_prunes_oldest_first_and_keeps_latest_and_open_alerts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    # j1: an alert on day 2 that is still open (later verdicts watch); j2: an old alert closed
    # by later ok verdicts.
    made = history(
        state, {"j1": ["ok", "ok", "alert", "ok", "watch"], "j2": ["alert", "ok", "ok", "ok", "ok"]}
    )
    before = sum(
        f.stat().st_size for f in state.rglob("*") if f.is_file() and f.suffix != ".sqlite"
    )
    assert 10 * (101 + 20) * KB <= before < 10 * (101 + 21) * KB  # + the report.json texts
    result = apply_retention(state, RetentionSettings(max_age_days=None, max_mb=0.3), NOW_S)
    left = {p for p in state.rglob("*.npz")}
    # kept: each joint's latest capture (day 4), j1's open watch (day 4, the latest judged);
    # everything else went, oldest first, until under budget or only protected files were left
    assert made[("j1", 4)][0] in left and made[("j2", 4)][0] in left
    assert made[("j2", 0)][0] not in left  # the closed alert's capture is not kept
    assert (
        not made[("j1", 0)][0].exists()
        and not made[("j1", 0)][0].with_name("day000.npz.meta.yaml").exists()
    )
    assert result.kept_bytes <= 0.3e6 or result.over_budget
    assert result.freed_bytes == before - result.kept_bytes
    assert result.protected >= 2
    assert not made[("j1", 0)][1].exists()  # a pruned report directory is gone, not emptied
    # each joint's latest report stays
    assert made[("j1", 4)][1].exists() and made[("j2", 4)][1].exists()


def test_an_open_alert_keeps_its_evidence_whatever_the_budget(tmp_path: Path) -> None:
    state = tmp_path / "state"
    made = history(state, {"j1": ["ok", "ok", "alert"]})
    # a later cycle without a verdict (an aborted one): the alert stays the latest judged
    with HistoryStore(state / "history.sqlite") as store:
        store.record_cycle(
            controller="r",
            joint="j1",
            kind="backlash",
            started_at=T0 + timedelta(days=3),
            finished_at=None,
            outcome="aborted",
            reason="protective stop",
        )
    result = apply_retention(state, RetentionSettings(max_age_days=1.0, max_mb=0.001), NOW_S)
    assert made[("j1", 2)][0].exists() and made[("j1", 2)][1].exists()
    assert not made[("j1", 0)][0].exists() and not made[("j1", 1)][0].exists()
    assert result.over_budget and len(result.deleted) == 4  # 2 captures + 2 reports
    assert "event=retention" in result.to_log() and "over_budget=True" in result.to_log()


def test_age_alone_prunes_what_is_older(tmp_path: Path) -> None:
    state = tmp_path / "state"
    made = history(state, {"j1": ["ok"] * 6})
    now = (T0 + timedelta(days=5, hours=12)).timestamp()
    apply_retention(state, RetentionSettings(max_age_days=3.0, max_mb=None), now)
    assert [k for k in range(6) if made[("j1", k)][0].exists()] == [3, 4, 5]
    # no limits: nothing goes
    apply_retention(state, RetentionSettings(max_age_days=None, max_mb=None), now)
    assert [k for k in range(6) if made[("j1", k)][0].exists()] == [3, 4, 5]


def test_the_index_lists_reports_newest_first_and_latest_points_at_the_newest(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    assert write_index(state) is None  # no report yet: no index
    history(state, {"j1": ["ok", "watch"], "j2": ["alert"]})
    (state / "reports" / "broken").mkdir()
    (state / "reports" / "broken" / "report.json").write_text("{not json")
    result = prune_and_index(state, RetentionSettings(max_age_days=None, max_mb=None))
    assert result.deleted == ()
    page = (state / "reports" / "index.html").read_text()
    rows = [line for line in page.split("<tr>") if "report.html" in line and "<td>" in line]
    names = [r.split('href="')[1].split("/")[0] for r in rows]
    assert names[0] == "broken" and "unreadable" in rows[0]  # newest mtime: listed, not hidden
    assert set(names[1:]) == {"j1-day000", "j1-day001", "j2-day000"}
    latest = state / "reports" / "latest"
    assert latest.is_symlink() and os.readlink(latest) == "broken"
    assert '<td class="watch">watch</td>' in page and '<td class="alert">alert</td>' in page
