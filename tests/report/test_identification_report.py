"""The identification report (`jha identify --html`): judged by the daemon's rule against the
history, never against a robot file's nominal values; its reasons in words, its warnings kept."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from agent.config.identification_limits import IdentificationLimitSettings
from agent.health.identification.joint import joint_verdict
from agent.health.status import Ne107, Status
from agent.history.records import Estimate
from agent.history.store import HistoryStore
from agent.report.html.page import render_html
from agent.report.identification import NOMINAL_BASIS, one_off_report, recorded_report
from agent.report.indicators import indicator_summaries
from agent.report.model import report_to_dict
from tests.support.identification.history import T0, WEEK, record_identification
from tests.support.paths import ROBOTS

NOW = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)


def est(name: str, value: float, unit: str, rel: float | None = 1.0) -> Estimate:
    return Estimate(name, value, unit, {"rel_std_pct": rel})


def test_a_robot_files_nominal_values_never_raise_a_watch_or_an_alert() -> None:
    # A robot file's friction is a design value, often a guess: a healthy joint identified at
    # 1.95 x its file's Coulomb friction read +95 %, an alert, when the file was the baseline.
    estimates = {
        "joint_1": [
            est("coulomb_friction_nm", 3.9, "N·m"),  # 1.95 x nominal: was an alert
            est("viscous_friction_nm_s_rad", 1.5, "N·m·s/rad"),
            est("stiffness_nm_rad", 9.0e3, "N·m/rad"),  # half the file's: was an alert
            est("rotor_inertia_kg_m2", 1.0, "kg·m²"),
            est("torque_nmse_nm", 1e-3, "N·m"),
        ],
        # a robot file without friction values (0): nothing to show beside it
        "joint_2": [est("coulomb_friction_nm", 0.4, "N·m"), est("torque_nmse_nm", 1e-3, "N·m")],
    }
    nominal = {
        "joint_1": {
            "coulomb_friction_nm": 2.0,
            "viscous_friction_nm_s_rad": 1.5,
            "stiffness_nm_rad": 1.8e4,
        },
        "joint_2": {"coulomb_friction_nm": 0.0},
    }
    report = one_off_report("planar2", estimates, nominal, {}, ("fc2: noisy",), NOW)
    one, two = report.indicator_joints
    assert report.joints == () and report.worst_status is Status.OK  # no backlash verdicts
    for joint in (one, two):
        v = joint.identification
        assert v is not None and joint.status is Status.UNKNOWN
        assert all(w.status is Status.UNKNOWN and w.baseline is None for w in v.indicators)
        assert joint.signal is Ne107.CHECK_FUNCTION and joint.recommendation.severity <= 1
    assert report.identification_worst is Status.UNKNOWN
    v = one.identification
    assert v is not None
    # every judged indicator says it has no baseline yet (the NMSE has no nominal value at all)
    assert [w.indicator for w in v.indicators] == [
        "coulomb_friction_nm", "viscous_friction_nm_s_rad", "stiffness_nm_rad", "torque_nmse_nm"
    ]  # fmt: skip
    coulomb = v.indicators[0]
    assert coulomb.no_baseline is not None and coulomb.reason.endswith(coulomb.no_baseline)
    assert re.match(
        r"no baseline yet; x1\.95 of the robot file's 2(\.0+)? N·m", coulomb.no_baseline
    )
    assert "jha identify --record" in coulomb.no_baseline
    said = two.identification.indicators[0].no_baseline  # type: ignore[union-attr]
    assert said is not None and said.startswith("no baseline yet (the robot file gives no value)")
    doc = report_to_dict(report)
    assert doc["warnings"] == ["fc2: noisy"] and doc["basis"] == NOMINAL_BASIS
    page = render_html(report)
    assert "Worst identification status:" in page and "Worst status:" not in page
    assert "past the watch limit" not in page and "past the alert limit" not in page
    assert "Coulomb friction" in page and "no baseline yet; x1.95 of the robot file" in page
    assert "<li>fc2: noisy</li>" in page
    assert "report.json" not in page


def test_a_recorded_identification_is_judged_as_the_daemons_report_judges_it(
    tmp_path: Path,
) -> None:
    limits = IdentificationLimitSettings(viscous_rise_watch=0.2, viscous_rise_alert=0.5)
    with HistoryStore(tmp_path / "history.sqlite") as store:
        for week, viscous in enumerate([1.0, 1.02, 0.98, 1.3]):
            record_identification(
                store,
                T0 + week * WEEK,
                {"joint_2": [est("viscous_friction_nm_s_rad", viscous, "N·m·s/rad", 2.0)]},
                limits,
            )
        report = recorded_report(store, "cell1", ["joint_2"], limits, {}, (), NOW)
        daemon = joint_verdict(
            [
                s.verdict
                for s in indicator_summaries(store, "cell1", "joint_2", limits=limits)
                if s.verdict is not None
            ]
        )
    (joint,) = report.indicator_joints
    assert joint.identification == daemon
    assert daemon is not None and daemon.status is Status.WATCH  # +30 % past the +20 % watch
    page = render_html(report)
    assert "viscous friction rose 30 % (1 -&gt; 1.3 N·m·s/rad), past the watch limit +20 %" in page
    assert "against the median of the first 3 identifications" in page
    assert "viscous_friction_nm_s_rad" not in page.replace('title="viscous_friction_nm_s_rad"', "")


def _jha(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_identify_record_html_judges_against_the_recorded_one_with_the_controllers_limits(
    tmp_path: Path,
) -> None:
    """`jha identify --record --config F --controller C --html P`: the page judges this
    identification against the ones recorded before it, with the controller's limits."""
    robot = ROBOTS / "planar2.yaml"
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"agent: {{state_dir: {tmp_path / 'state'}}}\n"
        "controllers:\n"
        "  - name: cell1\n"
        "    driver: sim\n"
        f"    robot: {robot}\n"
        "    identification:\n"
        f"      robot: {robot}\n"
        "      every_s: null\n"
        "      limits: {baseline_identifications: 1, viscous_rise_watch: 0.2}\n"
        "    joints:\n"
        "      - {name: joint_1, index: 1, gear_ratio: 100, backlash_cycle: {motor_speed_rps: 9}}\n"
        "      - {name: joint_2, index: 2, gear_ratio: 100, backlash_cycle: {motor_speed_rps: 9}}\n"
    )
    record = ("--record", "--config", str(config), "--controller", "cell1")
    for name, wear in (("new", "joint_1=1.0"), ("worn", "joint_1=1.3")):
        capture, page = tmp_path / f"{name}.npz", tmp_path / f"{name}.html"
        made = _jha("simulate", "identification", "--robot", str(robot), "-o", str(capture),
                    "--friction-scale", wear)  # fmt: skip
        assert made.returncode == 0, made.stderr
        done = _jha("identify", str(capture), "--robot", str(robot), "--html", str(page), *record)
        assert done.returncode == 0, done.stderr
    first, second = (
        render.read_text() for render in (tmp_path / "new.html", tmp_path / "worn.html")
    )
    # the first is its own baseline (baseline_identifications: 1): within its limits
    assert "every identification indicator within its limits" in first
    # the second: friction 1.3 times the first, past the config's +20 % viscous watch limit
    # (the default would be +30 %); judged against the recorded one, not the robot file
    assert re.search(
        r"viscous friction rose (2[5-9]|3\d) % \(1\.5 -&gt; 1\.9\d N·m·s/rad\), past the watch "
        r"limit \+20 % against the median of the first 1 identifications",
        second,
    ), second[second.index("<h2>Summary") : second.index("</table>")]
    assert "robot file&#x27;s nominal values" not in second
    assert "baseline in the history" in second  # agent.report.identification.HISTORY_BASIS
    assert 'Worst identification status: <span class="badge status s-' in second
    assert "report.json" not in second and not (tmp_path / "report.json").exists()


def test_the_daemons_identification_report_shows_the_fits_warnings(tmp_path: Path) -> None:
    """A stop's report (agent.service.recording) carries what its identification warned about,
    as `jha identify` prints it, and the page shows it."""
    from agent.kinds.base import JointJob
    from agent.kinds.identification.analysis import excitation_cycle
    from agent.kinds.identification.kind import IdentificationAnalysis
    from agent.service.recording import record_and_report
    from tests.support.identification.captures import controller

    ctrl = controller()
    analysis = IdentificationAnalysis(
        robot="planar2", model="elastic", method="wls", condition_number=28.0, nmse_nm=1e-4,
        estimates={
            "joint_1": (est("coulomb_friction_nm", 2.0, "N·m"),),
            "joint_2": (est("coulomb_friction_nm", 1.0, "N·m"),),
        },
        evidence={}, warnings=("fc2: relative standard deviation 63 %",), seconds=1.0,
    )  # fmt: skip
    job = JointJob(ctrl, None, excitation_cycle(ctrl), NOW, result=analysis)
    written = record_and_report(tmp_path, ctrl.name, [job], want_report=True)
    assert written.report is not None
    said = "identification of cell1: fc2: relative standard deviation 63 %"
    assert written.report.warnings == (said,)
    assert f"<li>{said}</li>" in written.html_path.read_text()
