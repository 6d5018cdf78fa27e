"""`jha identify CAPTURE --robot FILE [--method ols|wls] [--json]`: dynamic identification of a
robot with two encoders per joint (papers 002 and 004) from an excitation capture.

CAPTURE is a directory holding one capture file per joint (.npz, or .csv with its .meta.yaml
sidecar), or the files themselves. Each has link_pos_rad (or link_counts), motor_pos_rad (or
motor_counts) and motor_torque_nm on the same time base; the metadata field `joint` names its
joint (else the files are taken in the robot's joint order). A capture that misses an encoder
channel, whose drive saturated or whose motion does not excite the dynamics is refused with the
reason and exit code 65.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import EX_OK, CaptureError
from agent.store import Estimate

if TYPE_CHECKING:  # the estimator loads scipy: imported by the command, not by `jha --help`
    from agent.estimation.identification import IndicatorRow

CAPTURE_SUFFIXES = (".npz", ".csv")


def register(subparsers: Any) -> None:
    """Add the `identify` sub-command to the `jha` parser's sub-parsers."""
    p = subparsers.add_parser(
        "identify",
        help="dynamic identification from a dual-encoder excitation capture (papers 002, 004)",
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
        help="elastic: paper 002 (identifies rotor inertia and stiffness); rigid: "
        "paper 004 IDIM with rotor-side compensation (rotor inertia from the file)",
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
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    from agent.cli_report import add_record_options

    add_record_options(p)
    p.set_defaults(func=_cmd_identify)


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
            raise CaptureError(str(path), "no such file or directory")
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
            found.append(Estimate(r.indicator, r.value, r.unit,
                                  {**detail, "rel_std_pct": r.rel_std_pct}))
    return by_joint


def _cmd_identify(args: argparse.Namespace) -> int:
    from agent.capture_io import load_capture
    from agent.cli_report import record_joint_estimates, recording_target
    from agent.estimation.identification import IdentificationSettings, identify
    from agent.estimation.signal_chain import FilterSettings
    from agent.models.robot import load_robot

    target = recording_target(args)  # a bad config or controller fails before the fit
    started = datetime.now(UTC)
    robot = load_robot(args.robot)
    files = capture_files(args.capture)
    captures = [load_capture(f) for f in files]
    settings = IdentificationSettings(
        method=args.method,
        model=args.model,
        filter=FilterSettings(
            bandwidth_hz=args.bandwidth_hz, cutoff_hz=args.cutoff_hz, decimation=args.decimation
        ),
    )
    if args.max_condition is not None:
        settings = replace(settings, max_condition_number=args.max_condition)
    where = str(args.capture[0]) if len(args.capture) == 1 else f"{len(files)} capture files"
    result = identify(captures, robot, settings, where=where)
    if target is not None:
        detail = {"method": result.method, "model": result.model, "source": where}
        recorded = identification_estimates(result.indicator_rows(), detail)
        record_joint_estimates(target[0], target[1], "identification", recorded, started)
        # stderr: --json output on stdout stays one JSON document
        print(f"recorded {sum(map(len, recorded.values()))} indicators of {len(recorded)} "
              f"joints in {target[0]} (controller {target[1]})", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return EX_OK
    out = sys.stdout
    print(
        f"{robot.name}: {result.model} model, {result.method.upper()}, {result.n_samples} samples "
        f"-> {result.n_rows} rows, condition number {result.condition_number:.1f}",
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
        f"torque NMSE {result.nmse_nm:.4g} N·m (sum over joints, paper 004 section 4.5)", file=out
    )
    for w in result.warnings:
        print(f"warning    {w}", file=out)
    return EX_OK
