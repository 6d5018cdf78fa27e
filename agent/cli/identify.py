"""`jha identify CAPTURE --robot FILE [--method ols|wls] [--json]`: dynamic identification of a
robot with two encoders per joint (Zollo, Lopez et al. 2014; Madsen et al. 2020) from an
excitation capture (`jha simulate identification` makes one from the simulated robot).

CAPTURE is a multi-joint capture (.npz of the excitation cycle), a directory holding one
capture file per joint (.npz, or .csv with its .meta.yaml sidecar), or the files themselves.
Each joint has link_pos_rad (or link_counts), motor_pos_rad (or motor_counts) and
motor_torque_nm on the same time base; the metadata field `joint` names it (else the files are
taken in the robot's joint order). A capture that misses an encoder
channel, whose drive saturated or whose motion does not excite the dynamics is refused with the
reason and exit code 65.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import EX_OK, CaptureError, InputMissing
from agent.history.records import Estimate

if TYPE_CHECKING:  # the estimator loads scipy: imported by the command, not by `jha --help`
    from agent.capture.model import Capture
    from agent.config.identification_limits import IdentificationLimitSettings
    from agent.estimation.identification.result import IdentificationResult, IndicatorRow
    from agent.models.robot.description import RobotDescription

CAPTURE_SUFFIXES = (".npz", ".csv")


def register(subparsers: Any) -> None:
    """Add the `identify` sub-command to the `jha` parser's sub-parsers."""
    p = subparsers.add_parser(
        "identify",
        help="dynamic identification from a dual-encoder excitation capture "
        "(Zollo, Lopez et al. 2014; Madsen et al. 2020)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument(
        "capture",
        nargs="+",
        type=Path,
        metavar="CAPTURE",
        help="directory of per-joint capture files, or the files",
    )
    p.add_argument("--robot", required=True, type=Path, help="robot description (YAML)")
    p.add_argument("--method", choices=["ols", "wls"], default="wls")
    p.add_argument(
        "--model",
        choices=["elastic", "rigid"],
        default="elastic",
        help="elastic: Zollo, Lopez et al. 2014 (identifies rotor inertia and stiffness); "
        "rigid: Madsen et al. 2020 IDIM with rotor-side compensation (rotor inertia from the "
        "file)",
    )
    p.add_argument(
        "--max-condition",
        type=float,
        metavar="C",
        help="refuse a trajectory whose regressor condition number exceeds C",
    )
    p.add_argument(
        "--bandwidth-hz",
        type=float,
        help="frequency of the robot dynamics (default: estimated from the link positions)",
    )
    p.add_argument("--cutoff-hz", type=float, help="position filter cut-off (default 5x bandwidth)")
    p.add_argument("--decimation", type=int, default=20)
    p.add_argument(
        "--validate",
        nargs="+",
        type=Path,
        default=None,
        metavar="VALID",
        help="captures held out of the fit (a directory or files): per joint the torque NMSE "
        "and RMS error of the identified model and of the robot file's (nominal) model on them",
    )
    p.add_argument(
        "--feasible",
        action="store_true",
        help="also the physically consistent estimate (positive definite pseudo-inertia per "
        "link, friction >= 0) and what it costs in residual",
    )
    p.add_argument(
        "--torque-offset",
        action="store_true",
        help="fit a constant per joint on the measured torque (a torque or current sensor's "
        "bias) with the rest; reported as torque_offset_nm",
    )
    p.add_argument(
        "--load-friction",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fit a friction share growing with the transmitted torque (strain-wave gears), "
        "mu * sgn(speed) * |link-side torque|, on each joint where the capture pins it "
        "(default: on; --no-load-friction reads it into the Coulomb friction)",
    )
    p.add_argument(
        "--joint-spring",
        action="store_true",
        help="fit a spring on each joint (a cable dress pack, a balancer): k * (q - q0), with "
        "a torque offset",
    )
    p.add_argument(
        "--torque-constant-tolerance",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="the drives' torque-constant tolerance (0.05 for +-5 %%): a systematic error of the "
        "measured torque that widens every interval (default 0: calibrated torque sensors)",
    )
    p.add_argument(
        "--no-model-check",
        dest="model_check",
        action="store_false",
        help="skip the second fit with load-dependent friction and a joint spring whose shift "
        "of each estimate widens its interval (for a model known complete, or the papers' "
        "conditions)",
    )
    p.add_argument(
        "--max-gap-ticks",
        type=int,
        default=5,
        metavar="N",
        help="captures that are not uniformly sampled (a host's log) are put on their tick "
        "first; a gap of more than N missing ticks is refused (default 5)",
    )
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write a report page: per joint its verdict (with --record against the "
        "history; without, 'no baseline yet', the robot file's values shown for reference "
        "only), the fit's warnings and measured vs predicted motor torque",
    )
    from agent.cli.common import add_record_options

    add_record_options(p)
    p.set_defaults(func=_cmd_identify)


def load_captures(files: Sequence[Path]) -> list[Capture]:
    """Per-joint captures from the files; a multi-joint .npz gives one per joint. A file
    without a motor channel is read too (link position and torque: a rigid fit's input);
    the identification itself says when its model needs the motor encoder."""
    from agent.capture.files import load_capture
    from agent.capture.multi import is_multi_capture, load_multi_capture

    captures: list[Capture] = []
    for f in files:
        if f.suffix.lower() == ".npz" and is_multi_capture(f):
            captures += load_multi_capture(f).joint_captures()
        else:
            captures.append(load_capture(f, require_motor=False))
    return captures


def capture_files(paths: Sequence[Path]) -> list[Path]:
    """The capture files named by `paths` (directories expand to their .npz and .csv files)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(
                f for f in path.iterdir() if f.suffix.lower() in CAPTURE_SUFFIXES and f.is_file()
            )
            if not found:
                raise CaptureError(str(path), "no .npz or .csv capture files in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise InputMissing(str(path), "no such file")
    return files


def identification_estimates(
    rows: Sequence[IndicatorRow], detail: Mapping[str, Any]
) -> dict[str, list[Estimate]]:
    """History records of indicator rows, by joint in row order; the relative sd in the
    detail. A non-finite value cannot be stored and is left out."""
    by_joint: dict[str, list[Estimate]] = {}
    for r in rows:
        found = by_joint.setdefault(r.joint, [])
        if math.isfinite(r.value):
            found.append(
                Estimate(r.indicator, r.value, r.unit, {**detail, "rel_std_pct": r.rel_std_pct})
            )
    return by_joint


def _cmd_identify(args: argparse.Namespace) -> int:
    from agent.cli.common import UsageError, print_json, record_joint_estimates, recording_target
    from agent.estimation.identification.filters import FilterSettings
    from agent.estimation.identification.fit import identify
    from agent.estimation.identification.model import IdentificationSettings
    from agent.models.robot.description import load_robot

    tolerance = args.torque_constant_tolerance
    if not (math.isfinite(tolerance) and 0.0 <= tolerance < 1.0):  # before anything is read
        raise UsageError(
            f"--torque-constant-tolerance: expected a fraction in [0, 1), found {tolerance:g}"
        )
    robot = load_robot(args.robot)
    # a bad config, controller or joint mismatch fails before the fit
    target = recording_target(args, robot.joint_names)
    started = datetime.now(UTC)
    from agent.cli.progress import Steps

    steps = Steps(2)
    files = capture_files(args.capture)
    steps.step(f"reading {len(files)} capture file(s)")
    captures = load_captures(files)
    settings = IdentificationSettings(
        method=args.method,
        model=args.model,
        filter=FilterSettings(
            bandwidth_hz=args.bandwidth_hz, cutoff_hz=args.cutoff_hz, decimation=args.decimation
        ),
        max_gap_ticks=args.max_gap_ticks,
        torque_offset=args.torque_offset,
        load_friction=args.load_friction,
        joint_spring=args.joint_spring,
        torque_constant_tolerance=args.torque_constant_tolerance,
        feasible=args.feasible,
        model_check=args.model_check,
    )
    if args.max_condition is not None:
        settings = replace(settings, max_condition_number=args.max_condition)
    where = str(args.capture[0]) if len(args.capture) == 1 else f"{len(files)} capture files"
    steps.step(f"identifying {robot.name} ({settings.model}, {settings.method})")
    result = identify(captures, robot, settings, where=where)
    steps.done(f"identified in {result.seconds:.1f} s")
    if target is not None:
        detail = {"method": result.method, "model": result.model, "source": where}
        recorded = identification_estimates(result.indicator_rows(), detail)
        record_joint_estimates(target[0], target[1], "identification", recorded, started)
        # stderr: --json output on stdout stays one JSON document
        print(
            f"recorded {sum(map(len, recorded.values()))} indicators of {len(recorded)} "
            f"joints in {target[0]} (controller {target[1]})",
            file=sys.stderr,
        )
    if args.html is not None:
        judged = None if target is None else (*target, _limits(args))
        identification_report(result, robot, where, started, args.html, judged)
        print(f"report: {args.html}", file=sys.stderr)
    held_out = None if args.validate is None else _held_out(args.validate, result, robot, settings)
    if args.json:
        print_json({**result.to_dict(), "validation": held_out})
        return EX_OK
    out = sys.stdout
    print(
        f"{robot.name}: {result.model} model, {result.method.upper()}, {result.n_samples} samples "
        f"-> {result.n_rows} rows, condition number {result.condition_number:.1f}",
        file=out,
    )
    if len(result.segment_samples) > 1:
        counts = ", ".join(f"{n:,}" for n in result.segment_samples)
        print(
            f"runs       {len(result.segment_samples)} stacked as separate segments (no filter "
            f"or derivative across a boundary), samples per run: {counts}",
            file=out,
        )
    f = result.filter
    print(
        f"filters    position {f.order}th order at {f.cutoff_hz:.3g} Hz (bandwidth "
        f"{f.bandwidth_hz:.3g} Hz), parallel {f.parallel_order}th order at "
        f"{f.parallel_cutoff_hz:.3g} Hz, decimation {f.decimation}",
        file=out,
    )
    print(
        f"{'joint':16s} {'Fc N·m':>10s} {'Fv N·m·s/rad':>13s} {'K N·m/rad':>11s} "
        f"{'Ia kg·m²':>10s} {'NMSE N·m':>9s}",
        file=out,
    )
    for j in result.joints:
        k = "n/a" if j.stiffness_nm_rad is None else f"{j.stiffness_nm_rad:11.5g}"
        print(
            f"{j.joint:16s} {j.coulomb_nm:10.4g} {j.viscous_nm_s_rad:13.4g} {k:>11s} "
            f"{j.rotor_inertia_kg_m2:10.4g} {j.torque_nmse_nm:9.4g}",
            file=out,
        )
    print(
        f"torque NMSE {result.nmse_nm:.4g} N·m (sum over joints, Madsen et al. 2020 section 4.5)",
        file=out,
    )
    if result.feasible is not None:
        fe = result.feasible
        print(
            f"feasible   physically consistent estimate: weighted residual +{fe.cost_pct:.3g} % "
            f"({fe.message}, {fe.evaluations} iterations; {len(fe.violations)} violation(s) of the "
            "unconstrained one, listed in the warnings)",
            file=out,
        )
    if held_out is not None:
        _print_held_out(held_out, out)
    for w in result.warnings:
        print(f"warning    {w}", file=out)
    return EX_OK


def identification_report(
    result: IdentificationResult,
    robot: RobotDescription,
    where: str,
    started: datetime,
    path: Path,
    recorded: tuple[Path, str, IdentificationLimitSettings | None] | None = None,
) -> None:
    """A self-contained report page of one identification: every joint's indicators judged as
    the daemon judges them (against the history when `recorded` names where this one was
    recorded; else not at all: no baseline yet, the robot file's values beside them for
    reference), the measured vs predicted torque and the fit's warnings
    (agent.report.identification)."""
    from agent.atomic import atomic_write_text
    from agent.history.store import HistoryStore
    from agent.kinds.identification.analysis import torque_evidence
    from agent.report.html.page import render_html
    from agent.report.identification import one_off_report, recorded_report

    evidence = torque_evidence(result)
    if recorded is not None:
        history, controller, limits = recorded
        with HistoryStore(history) as store:
            report = recorded_report(
                store,
                controller,
                [j.joint for j in result.joints],
                limits,
                evidence,
                result.warnings,
                started,
            )
    else:
        nominal = {
            j.name: {
                "coulomb_friction_nm": j.coulomb_nm,
                "viscous_friction_nm_s_rad": j.viscous_nm_s_rad,
                **({} if j.stiffness_nm_rad is None else {"stiffness_nm_rad": j.stiffness_nm_rad}),
            }
            for j in robot.joints
        }
        rows = identification_estimates(result.indicator_rows(), {"source": where})
        report = one_off_report(robot.name, rows, nominal, evidence, result.warnings, started)
    atomic_write_text(path, render_html(report))


def _limits(args: argparse.Namespace) -> IdentificationLimitSettings | None:
    """The identification limits of the --record controller (None: it has no identification
    section, and the history's recorded limits or the defaults apply)."""
    from agent.cli.common import controller_of
    from agent.config.load import load_config

    ctrl = controller_of(load_config(args.config), args.controller)
    return None if ctrl.identification is None else ctrl.identification.limits


def _held_out(paths: Sequence[Path], result: Any, robot: Any, settings: Any) -> dict[str, Any]:
    """The identified and the nominal model on captures the fit did not see."""
    from agent.estimation.identification.model import nominal_model
    from agent.estimation.identification.validation import validate

    files = capture_files(paths)
    captures = load_captures(files)
    identified = validate(result.dynamic_model, robot, captures, settings)
    nominal = validate(nominal_model(robot), robot, captures, settings)
    return {
        "captures": [str(f) for f in files],
        "samples": identified.samples,
        "joints": list(robot.joint_names),
        "identified": identified.to_dict(),
        "nominal": nominal.to_dict(),
    }


def _print_held_out(held_out: dict[str, Any], out: Any) -> None:
    ident, nom = held_out["identified"], held_out["nominal"]
    print(
        f"held out   {len(held_out['captures'])} capture file(s), {held_out['samples']} samples: "
        "torque error on samples the fit did not see",
        file=out,
    )
    print(
        f"{'joint':16s} {'NMSE ident.':>12s} {'NMSE nominal':>13s} {'RMS ident.':>11s} "
        f"{'RMS nominal':>12s}  (N·m)",
        file=out,
    )
    for j, name in enumerate(held_out["joints"]):
        print(
            f"{name:16s} {ident['per_joint_nm'][j]:12.4g} {nom['per_joint_nm'][j]:13.4g} "
            f"{ident['rms_nm'][j]:11.4g} {nom['rms_nm'][j]:12.4g}",
            file=out,
        )
    print(
        f"{'total':16s} {ident['nmse_nm']:12.4g} {nom['nmse_nm']:13.4g}  (nominal: the robot "
        "file's parameters, its friction included)",
        file=out,
    )
