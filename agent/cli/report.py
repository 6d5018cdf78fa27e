"""`jha report [--config FILE] [--html FILE] [--json] [--controller NAME]`: the joint-health
report from the history alone (nothing runs): the terminal table, or JSON on stdout, and the
HTML page written to FILE. Also the `--record` plumbing that `jha stiffness estimate` and
`jha identify` share, and the helpers every `jha` sub-command module uses (print_json,
run_standalone).

Every joint of a controller seen in `<state_dir>/history.sqlite` appears: joints with backlash
cycles are judged against their configured limits; joints with other indicators only (a robot
file's joints recorded by `jha stiffness estimate --record`) are listed with those indicators
and no status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from agent.atomic import atomic_write_text
from agent.config.model import Config, ControllerSettings, ThresholdSettings, load_config
from agent.errors import EX_OK, EX_USAGE, AgentError, ConfigError
from agent.history.store import CycleRecord, Estimate, HistoryStore, TrendPoint

if TYPE_CHECKING:  # the report loads scipy: imported when used, so `jha --help` stays quick
    from agent.config.identification_limits import IdentificationLimitSettings
    from agent.report.write import JointReport, Report


# The kind of the daemon's backlash cycles (drivers.base.BacklashCycle.kind).
BACKLASH_KIND = "backlash"
# The installed service's config (systemd/joint-health-agent.service, agent.cli.service).
DEFAULT_CONFIG = Path("/etc/joint-health-agent/config.yaml")


class UsageError(AgentError):
    """Options that do not go together (exit 64)."""

    exit_code = EX_USAGE


# -- recording -----------------------------------------------------------------------------------


def add_record_options(p: argparse.ArgumentParser) -> None:
    """--record --config FILE --controller NAME on an estimator's command."""
    p.add_argument("--record", action="store_true",
                   help="record the estimates in <state_dir>/history.sqlite of --config")
    p.add_argument("--config", type=Path, metavar="FILE", help="agent config (with --record)")
    p.add_argument("--controller", metavar="NAME",
                   help="controller of the config the estimates belong to (with --record)")


def history_path(config: Config) -> Path:
    return Path(config.agent.state_dir) / "history.sqlite"


def controller_of(config: Config, name: str) -> ControllerSettings:
    """The named controller; an unknown name is a ConfigError listing the known ones."""
    for ctrl in config.controllers:
        if ctrl.name == name:
            return ctrl
    known = ", ".join(c.name for c in config.controllers)
    raise ConfigError(f"{config.source}: no controller named {name!r} (controllers: {known})")


def recording_target(args: argparse.Namespace) -> tuple[Path, str] | None:
    """(history file, controller) when --record is given, checked before any estimation runs."""
    if not args.record:
        if args.config is not None or args.controller is not None:
            raise UsageError("--config and --controller only go with --record")
        return None
    if args.config is None or args.controller is None:
        raise UsageError("--record needs --config FILE and --controller NAME")
    config = load_config(args.config)
    controller_of(config, args.controller)
    return history_path(config), args.controller


def record_joint_estimates(
    path: Path,
    controller: str,
    kind: str,
    by_joint: Mapping[str, Sequence[Estimate]],
    started_at: datetime,
    skipped: Mapping[str, str] | None = None,
) -> list[int]:
    """One ok cycle per joint with its estimates, and one rejected cycle per skipped joint
    (with the reason); all written at the same finish time. Returns the cycle ids."""
    finished = datetime.now(UTC)
    ids = []
    with HistoryStore(path) as store, store.transaction():
        for joint, estimates in by_joint.items():
            ids.append(store.record_cycle(
                controller=controller, joint=joint, kind=kind, started_at=started_at,
                finished_at=finished, estimates=estimates, trigger="manual",
            ))
        for joint, reason in (skipped or {}).items():
            ids.append(store.record_rejected(
                controller=controller, joint=joint, kind=kind, started_at=started_at,
                finished_at=finished, reason=reason, trigger="manual",
            ))
    return ids


# -- the report from the history -----------------------------------------------------------------


def _backlash_history(
    store: HistoryStore, controller: str, joint: str
) -> tuple[str, list[TrendPoint]] | None:
    """The judged backlash indicator (the one recorded last) and its history, if any."""
    found = [(name, pts) for name in ("backlash_rad", "amplitude_rad_s")
             if (pts := store.history(controller, joint, name))]
    if not found:
        return None
    return max(found, key=lambda f: f[1][-1].time_iso)


def report_from_history(
    store: HistoryStore,
    controller: str,
    thresholds: Mapping[str, ThresholdSettings] | None = None,
    created_at: datetime | None = None,
    ident_limits: IdentificationLimitSettings | None = None,
) -> Report:
    """A report of every joint of `controller` in the history; limits by joint name.

    A joint is judged on the last value of its backlash indicator. When its last backlash cycle
    ended in an error the joint is 'unknown' (NE 107 failure): its health cannot be measured
    now. A refused or aborted last cycle only adds a note: nothing was measured, the last
    verdict stands.
    """
    from agent.health.verdicts import Status, assess, trend
    from agent.report.write import JointReport, indicator_summaries, limits_for

    thresholds = thresholds or {}
    joints: list[JointReport] = []
    others: list[JointReport] = []
    for joint in store.joints(controller):
        limits = thresholds.get(joint, ThresholdSettings())
        judged = _backlash_history(store, controller, joint)
        summaries = indicator_summaries(store, controller, joint,
                                        judged=None if judged is None else judged[0],
                                        limits=ident_limits)
        latest = store.latest(controller, joint)
        if judged is None:
            if summaries:
                others.append(JointReport(
                    controller=controller, joint=joint, status=Status.UNKNOWN,
                    verdict_reason="no backlash cycle recorded", result=None, error=None,
                    thresholds=limits, trend=None, history=(), capture_path=None,
                    indicators=summaries, outcome=None if latest is None else latest.outcome,
                ))
                continue
            # Only failed cycles: say so, as the daemon's report would.
            why = latest.reason if latest is not None else "no cycle recorded"
            joints.append(JointReport(
                controller=controller, joint=joint, status=Status.UNKNOWN,
                verdict_reason=f"cycle failed: {why}", result=None, error=why,
                thresholds=limits, trend=None, history=(), capture_path=None,
                outcome=None if latest is None else latest.outcome,
            ))
            continue
        name, points = judged
        watch, alert = limits_for(name, limits)
        verdict = assess(points[-1].value, watch, alert, name)
        status, reason = verdict.status, verdict.reason
        error: str | None = None
        last = _last_backlash_cycle(store, controller, joint)
        if last is not None and last.outcome == "error":
            status, error = Status.UNKNOWN, last.reason
            reason = f"cycle failed: {last.reason}; the last valid {reason}"
        elif last is not None and last.outcome != "ok":
            reason += f" (last cycle {last.outcome}: {last.reason})"
        joints.append(JointReport(
            controller=controller, joint=joint, status=status, verdict_reason=reason,
            result=None, error=error, thresholds=limits,
            trend=trend(points, watch, alert, name), history=points,
            capture_path=None if latest is None else latest.capture_path, indicator=name,
            latest_value=points[-1].value, indicators=summaries,
            outcome=None if last is None else last.outcome,
        ))
    moment = created_at or datetime.now(UTC)
    from agent.report.write import Report

    return Report(created_at_iso=moment.isoformat(), machines=(controller,), joints=tuple(joints),
                  indicator_joints=tuple(others))


def _last_backlash_cycle(store: HistoryStore, controller: str, joint: str) -> CycleRecord | None:
    """The joint's last cycle that measured (or tried to measure) backlash."""
    return store.latest(controller, joint, kind=BACKLASH_KIND)


def merge_reports(reports: Sequence[Report]) -> Report:
    """One report of several controllers."""
    from agent.report.write import Report

    first = reports[0]
    return Report(
        created_at_iso=first.created_at_iso,
        machines=tuple(m for r in reports for m in r.machines),
        joints=tuple(j for r in reports for j in r.joints),
        indicator_joints=tuple(j for r in reports for j in r.indicator_joints),
    )


# -- helpers the jha sub-command modules share ----------------------------------------------------


def print_json(data: Any, allow_nan: bool = False) -> None:
    """One JSON document on stdout; strict (NaN refused) unless `allow_nan`."""
    print(json.dumps(data, indent=2, allow_nan=allow_nan))


def run_standalone(register: Callable[[Any], None]) -> NoReturn:
    """`python -m agent.cli_X ...`: one command group without agent.cli.main, errors as exit codes."""
    parser = argparse.ArgumentParser(prog="jha")
    register(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args()
    try:
        sys.exit(ns.func(ns))
    except AgentError as exc:
        print(f"jha: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


def _cmd_report(args: argparse.Namespace) -> int:
    from agent.report.write import render_html, report_to_dict, summary_table

    config = load_config(_config_file(args.config))
    chosen = ([controller_of(config, args.controller)] if args.controller
              else list(config.controllers))
    path = history_path(config)
    created = datetime.now(UTC)
    if not path.exists():
        # A report reads: it never creates the daemon's database (nor its state_dir).
        print(f"jha: no history yet at {path}: the report lists no joint", file=sys.stderr)
        from agent.report.write import Report

        report = Report(created_at_iso=created.isoformat(),
                        machines=tuple(c.name for c in chosen), joints=())
    else:
        with HistoryStore(path) as store:
            report = merge_reports([
                report_from_history(store, c.name, {j.name: j.thresholds for j in c.joints},
                                    created,
                                    None if c.identification is None
                                    else c.identification.limits)
                for c in chosen
            ])
    if args.html is not None:
        atomic_write_text(args.html, render_html(report))
    if args.json:
        print_json(report_to_dict(report))
    else:
        print(summary_table(report))
        if args.html is not None:
            print(f"report: {args.html}")
    return EX_OK


def _config_file(given: Path | None) -> Path:
    """--config, else the installed service's config."""
    if given is not None:
        return given
    if DEFAULT_CONFIG.exists():
        return DEFAULT_CONFIG
    raise UsageError(f"no --config FILE given and {DEFAULT_CONFIG} does not exist")


def register(subparsers: Any) -> None:
    """Add `report` to the `jha` parser's sub-parsers."""
    p = subparsers.add_parser("report", help="the joint-health report from the history alone")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help=f"agent config (default: {DEFAULT_CONFIG})")
    p.add_argument("--controller", metavar="NAME", help="only this controller (default: all)")
    p.add_argument("--html", type=Path, metavar="FILE", help="write the HTML report here")
    p.add_argument("--json", action="store_true", help="print the report as JSON (jha.report/1)")
    p.set_defaults(func=_cmd_report)


if __name__ == "__main__":  # pragma: no cover - stand-alone use
    run_standalone(register)
