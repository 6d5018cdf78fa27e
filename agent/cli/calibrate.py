"""`jha calibrate drive-gains`: each drive's gain (motor current to torque) from a payload pair,
for arms that report current and not torque (Universal Robots), written to the calibration file
the driver reads (drivers.ur_rtde `drive_gains_file`).

The operator's steps (docs/drivers/ur_rtde.md, "Drive gains"): run the same excitation twice,
once as the arm is and once with a payload of known mass, centre of mass and inertia bolted to
the flange (the robot's payload setting updated and confirmed on the pendant before the second
run); record link position and motor current (`actual_q`, `actual_current`) of each; then this
command. A joint the payload hardly loads is left without a gain, with the reason: the driver
then refuses the identification cycle instead of guessing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent.errors import EX_OK, ConfigError


def register(subparsers: Any) -> None:
    sub = subparsers.add_parser("calibrate", help="drive gains from a payload pair").add_subparsers(
        dest="calibrate_command", required=True
    )
    p = sub.add_parser(
        "drive-gains",
        help="each joint's current-to-torque gain from the same excitation without and with a "
        "known payload",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--robot", required=True, type=Path, help="robot description (YAML)")
    p.add_argument("--without", required=True, nargs="+", type=Path, metavar="CAPTURE")
    p.add_argument("--with", dest="with_payload", required=True, nargs="+", type=Path,
                   metavar="CAPTURE")  # fmt: skip
    p.add_argument("--payload-mass", required=True, type=float, metavar="KG")
    p.add_argument("--payload-com", required=True, metavar="X,Y,Z",
                   help="centre of mass in the last DH frame (UR: the flange), m")  # fmt: skip
    p.add_argument("--payload-inertia", default="0,0,0,0,0,0", metavar="XX,YY,ZZ,XY,XZ,YZ",
                   help="about its centre of mass, kg·m² (default: a point mass)")  # fmt: skip
    p.add_argument(
        "--payload-tolerance",
        type=float,
        default=0.01,
        help="fraction within which the payload's values are known (default 0.01)",
    )
    p.add_argument(
        "--load-friction-share",
        type=float,
        default=0.02,
        help="the gears' friction share growing with the transmitted torque, bounding the bias "
        "the payload's own torque puts on each gain (strain-wave gears ~0.02; 0: direct drive)",
    )
    p.add_argument("-o", "--output", required=True, type=Path, metavar="GAINS.yaml")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_drive_gains)


def _numbers(text: str, n: int, option: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != n:
        raise ConfigError(f"{option}: expected {n} comma-separated numbers, found {text!r}")
    return values


def _cmd_drive_gains(args: argparse.Namespace) -> int:
    from agent.cli.identify import capture_files, load_captures
    from agent.estimation.identification.drive_gains import Payload, drive_gains
    from agent.estimation.identification.drive_gains_file import write_drive_gains
    from agent.models.robot.description import InertiaTensor, load_robot

    robot = load_robot(args.robot)
    cx, cy, cz = _numbers(args.payload_com, 3, "--payload-com")
    xx, yy, zz, xy, xz, yz = _numbers(args.payload_inertia, 6, "--payload-inertia")
    payload = Payload(
        args.payload_mass, (cx, cy, cz), InertiaTensor(xx, yy, zz, xy, xz, yz),
        args.payload_tolerance,
    )  # fmt: skip
    without = load_captures(capture_files(args.without))
    with_payload = load_captures(capture_files(args.with_payload))
    result = drive_gains(
        robot, without, with_payload, payload, load_friction_share=args.load_friction_share
    )
    doc = result.to_dict()
    comment = (
        f"drive gains of {robot.name} from a payload pair ({args.payload_mass:g} kg) by "
        "`jha calibrate drive-gains`\n"
        f"without: {', '.join(map(str, args.without))}\nwith: "
        f"{', '.join(map(str, args.with_payload))}"
    )
    write_drive_gains(doc, args.output, comment)
    if args.json:
        print(json.dumps(doc, allow_nan=False))
        return EX_OK
    print(
        f"{robot.name}: payload pair of {result.samples} samples ({result.rows} rows after the "
        f"filters), the runs {result.position_mismatch_rms_rad:.2e} rad rms apart"
    )
    print(f"{'joint':16s} {'Kt N·m/A':>9s} {'95 % interval':>19s} {'payload N·m':>11s}")
    for j in result.joints:
        if j.gain_nm_a is None or j.interval_95 is None:
            print(f"{j.joint:16s} {'null':>9s}  {j.reason}")
            continue
        lo, hi = (v / j.gear_ratio for v in j.interval_95)
        print(
            f"{j.joint:16s} {j.torque_constant_nm_a:9.4f} {lo:9.4f} .. {hi:7.4f} "
            f"{j.payload_torque_rms_nm:11.3g}"
        )
    print(f"written: {args.output} (motor-shaft torque constants; the driver's drive_gains_file)")
    return EX_OK
