"""`jha import urdf|arrays`: bring a robot and its recordings from other tools into the files the
estimators read.

  urdf    a robot file (modified DH, agent.models.robot.urdf) from a URDF: the serial chain of
          revolute joints below --base, each link's inertial moved into its DH frame
  arrays  per-joint capture files (CSV with a metadata sidecar) from an .npz of (samples x
          joints) arrays: time, link position and joint torque, as identification toolboxes
          and host loggers write them, for `jha identify --model rigid`
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.errors import EX_OK, CaptureError, ConfigError


def register(subparsers: Any) -> None:
    sub = subparsers.add_parser(
        "import", help="a robot (URDF) or recordings (.npz arrays) from other tools"
    ).add_subparsers(dest="import_command", required=True)
    u = sub.add_parser("urdf", help="robot file (modified DH) from a URDF")
    u.add_argument("urdf", type=Path)
    u.add_argument("--base", required=True, help="the base link (gravity along its -z)")
    u.add_argument("--name", help="the robot's name (default: the URDF's)")
    u.add_argument("-o", "--output", type=Path, required=True, metavar="ROBOT.yaml")
    u.set_defaults(func=_cmd_urdf)
    a = sub.add_parser("arrays", help="per-joint capture files from an .npz of arrays")
    a.add_argument("npz", type=Path)
    a.add_argument("--time", default="times", help="array of time stamps, s (epoch or not)")
    a.add_argument("--link-pos", default="positions", help="array of link positions, rad")
    a.add_argument("--torque", default="torques", help="array of joint torques, N·m")
    a.add_argument(
        "--current",
        help="array of motor currents, A, written as current_a (a drive-gain calibration's "
        "input; the torque array is then optional)",
    )
    a.add_argument("--joints", required=True, help="the joints' names, comma-separated")
    a.add_argument("--machine", default="", help="the machine's name in the metadata")
    a.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    a.set_defaults(func=_cmd_arrays)


def _cmd_urdf(args: argparse.Namespace) -> int:
    from agent.models.robot.urdf import read_urdf
    from agent.models.robot.write import robot_yaml

    found = read_urdf(args.urdf, args.base, args.name)
    comment = (
        f"{found.description.name}: from {args.urdf.name} by `jha import urdf` (base link "
        f"{args.base}), modified DH derived from the joint axes at q = 0; inertials moved into "
        "the DH frames.\nNot in a URDF, left neutral: rotor inertia 0, gear ratio 1, "
        "accel_max 10x the speed limit."
    )
    for note in found.notes:
        comment += f"\n{note}"
    args.output.write_text(robot_yaml(found.description, comment))
    for note in found.notes:
        print(f"{args.urdf}: warning: {note}")
    print(f"{args.output}: {found.description.n_joints} joints from {args.urdf}")
    return EX_OK


CHANNELS = {"--link-pos": "link_pos_rad", "--torque": "motor_torque_nm", "--current": "current_a"}


def _cmd_arrays(args: argparse.Namespace) -> int:
    import numpy as np

    from agent.capture.files import write_csv
    from agent.capture.model import Capture, CaptureMeta

    names = [n.strip() for n in args.joints.split(",") if n.strip()]
    keys = {"--time": args.time, "--link-pos": args.link_pos, "--torque": args.torque}
    if args.current is not None:
        keys["--current"] = args.current
    try:
        with np.load(args.npz, allow_pickle=False) as data:
            if args.current is not None and args.torque not in data.files:
                del keys["--torque"]  # current alone: a calibration's run
            for option, key in keys.items():
                if key not in data.files:
                    found = ", ".join(data.files)
                    msg = f"no array {key!r} ({option}); the file holds: {found}"
                    raise CaptureError(str(args.npz), msg)
            arrays = {k: np.asarray(data[k], dtype=np.float64) for k in keys.values()}
    except (OSError, ValueError) as exc:
        raise CaptureError(str(args.npz), f"expected an .npz of arrays: {exc}") from None
    t = arrays[args.time]
    for key in list(keys.values())[1:]:
        shape = arrays[key].shape
        if arrays[key].ndim != 2 or shape != (t.size, len(names)):
            raise CaptureError(
                str(args.npz),
                f"{key}: expected {t.size} x {len(names)} (samples x joints), found {shape}",
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"--joints: each name once, found {args.joints!r}")
    epoch = t[0] > 1e8  # UNIX time stamps: kept as the start time, the capture counts from 0
    started = datetime.fromtimestamp(float(t[0]), UTC).isoformat() if epoch else ""
    args.output.mkdir(parents=True, exist_ok=True)
    for j, name in enumerate(names):
        capture = Capture(
            t - t[0],
            {
                channel: arrays[keys[option]][:, j]
                for option, channel in CHANNELS.items()
                if option in keys
            },
            CaptureMeta(
                machine=args.machine,
                joint=name,
                cycle="excitation",
                started_at=started,
                extra={"imported_from": args.npz.name},
            ),
            source=f"{args.npz}:{name}",
        )
        write_csv(capture, args.output / f"{name}.csv", require_motor=False)
    print(f"{args.output}: {len(names)} capture files of {t.size} samples from {args.npz}")
    return EX_OK
