"""`jha analyze calibration --config FILE --controller C --joint J [-o FILE.csv]`: the
delta = f(A) pairs a joint's backlash is read with, as the CSV `jha analyze backlash
--calibration` takes (amplitude_rad_s,backlash_rad, one pair a row).

`calibration.source: points` gives the config's points; `simulation` the daemon's cached sweep
(`<state_dir>/calibration/`), or, when the daemon has not run it yet, a fresh sweep of the joint's
model (tens of seconds; nothing is written to the state directory). `none` has no pairs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agent.atomic import atomic_write_text
from agent.cli.common import UsageError, controller_of
from agent.config.load import load_config
from agent.errors import EX_OK

HEADER = "amplitude_rad_s,backlash_rad"


def add_parser(analyze: Any) -> None:
    """Add `calibration` to `jha analyze`'s sub-parsers."""
    p = analyze.add_parser(
        "calibration", help="export a joint's calibration pairs for analyze backlash"
    )
    p.add_argument("--config", type=Path, required=True, metavar="FILE")
    p.add_argument("--controller", required=True, metavar="NAME")
    p.add_argument("--joint", required=True, metavar="NAME")
    p.add_argument("-o", "--output", type=Path, metavar="FILE.csv", help="default: stdout")
    p.set_defaults(func=_cmd_calibration)


def calibration_pairs(
    config_file: Path, controller: str, joint_name: str
) -> list[tuple[float, float]]:
    """The joint's (amplitude_rad_s, backlash_rad) pairs (see the module docstring)."""
    config = load_config(config_file)
    ctrl = controller_of(config, controller)
    joint = next((j for j in ctrl.joints if j.name == joint_name), None)
    if joint is None:
        names = ", ".join(j.name for j in ctrl.joints) or "none"
        raise UsageError(
            f"controller {controller} has no joint {joint_name!r} (its joints: {names})"
        )
    source = joint.calibration.source
    if source == "points":
        return [(p.amplitude_rad_s, p.backlash_rad) for p in joint.calibration.points]
    if source == "none":
        raise UsageError(
            f"{controller}/{joint_name} has no calibration (calibration.source: none): nothing "
            "to export"
        )
    from agent.kinds.backlash.calibration import cache_path, load_cached, simulated_calibration
    from agent.kinds.backlash.kind import backlash_cycle

    cycle = backlash_cycle(ctrl, joint)
    cached = load_cached(cache_path(joint, cycle, Path(config.agent.state_dir) / "calibration"))
    if cached is None:
        print(
            f"jha: no cached sweep for {controller}/{joint_name}: simulating "
            f"{len(joint.calibration.sweep_backlash_rad)} backlash levels of its model",
            file=sys.stderr,
        )
        cached = simulated_calibration(joint, cycle, None)
    return [(float(a), float(d)) for a, d in cached.points]


def pairs_csv(pairs: list[tuple[float, float]]) -> str:
    return HEADER + "\n" + "".join(f"{a!r},{d!r}\n" for a, d in pairs)


def _cmd_calibration(args: argparse.Namespace) -> int:
    text = pairs_csv(calibration_pairs(args.config, args.controller, args.joint))
    if args.output is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(args.output, text)
        print(f"{args.output}: {text.count(chr(10)) - 1} pairs", file=sys.stderr)
    return EX_OK
