"""`jha simulate backlash|identification`: captures from the simulated controller, to try the
estimators without a machine.

  backlash        the constant-speed test of one joint with a given backlash (a capture for
                  `jha analyze backlash`)
  identification  the excitation capture of a simulated robot with elastic joints (the sim
                  driver's excitation cycle), for `jha identify`
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.cli.common import UsageError
from agent.errors import EX_OK, ConfigError


def register(subparsers: Any) -> None:
    """Add `simulate backlash` and `simulate identification` to the `jha` parser's
    sub-parsers."""
    sim = subparsers.add_parser("simulate", help="simulated captures").add_subparsers(
        dest="simulate_command", required=True
    )
    sb = sim.add_parser("backlash", help="constant-speed test of a joint with backlash")
    sb.add_argument("--backlash-rad", type=float, required=True)
    sb.add_argument("--speed-rps", type=float, default=100.0)
    sb.add_argument("--gear-ratio", type=float, default=40.0)
    sb.add_argument("--load-turns", type=float, default=12.0)
    sb.add_argument("--sample-rate", type=float, default=500.0)
    sb.add_argument("--seed", type=int, default=0)
    sb.add_argument("-o", "--output", type=Path, required=True)
    sb.set_defaults(func=_cmd_simulate_backlash)

    p = sim.add_parser(
        "identification",
        help="excitation capture of a simulated robot with elastic joints "
        "(Zollo, Lopez et al. 2014; Madsen et al. 2020)",
    )
    p.add_argument("--robot", required=True, type=Path, help="robot description (YAML)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="CAPTURE.npz")
    p.add_argument("--period-s", type=float, default=4.0, help="excitation period")
    p.add_argument("--harmonics", type=int, default=4)
    p.add_argument("--periods", type=int, default=2, help="periods captured")
    p.add_argument("--sample-rate", type=float, default=1000.0)
    p.add_argument("--maxiter", type=int, default=40, help="excitation design iterations")
    p.add_argument(
        "--friction-scale",
        action="append",
        default=[],
        metavar="JOINT=X",
        help="wear: that joint's friction times X (repeatable)",
    )
    p.add_argument(
        "--stiffness-scale", action="append", default=[], metavar="JOINT=X",
        help="wear: that joint's stiffness times X (repeatable)",
    )  # fmt: skip
    p.add_argument("--torque-noise-nm", type=float, default=0.0, help="drive torque noise std")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_simulate_identification)


def _cmd_simulate_backlash(args: argparse.Namespace) -> int:
    from agent.capture.files import save_capture
    from agent.config.model import BacklashCycleSettings, ControllerSettings, JointSettings
    from agent.kinds.backlash.kind import backlash_cycle
    from drivers.sim.backlash import simulate_backlash_capture

    joint = JointSettings(
        name="joint",
        index=1,
        gear_ratio=args.gear_ratio,
        backlash_cycle=BacklashCycleSettings(
            motor_speed_rps=args.speed_rps,
            load_turns=args.load_turns,
            sample_rate_hz=args.sample_rate,
        ),
    )
    ctrl = ControllerSettings(name="sim", driver="sim", joints=(joint,))
    capture = simulate_backlash_capture(
        joint, backlash_cycle(ctrl, joint), args.backlash_rad, noise_counts=1.0, seed=args.seed
    )
    save_capture(capture, args.output)
    print(f"{args.output}: {len(capture)} samples, backlash {args.backlash_rad:g} rad")
    return EX_OK


def _scales(items: Sequence[str], option: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        joint, _, value = item.partition("=")
        try:
            out[joint.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"{option}: expected JOINT=NUMBER, found {item!r}") from None
        if not (joint.strip() and out[joint.strip()] > 0):
            raise ConfigError(f"{option}: expected JOINT=NUMBER > 0, found {item!r}")
    return out


def _cmd_simulate_identification(args: argparse.Namespace) -> int:
    from agent.capture.multi import save_multi_capture
    from agent.config.identification import (
        ExcitationDesignSettings,
        IdentificationCycleSettings,
    )
    from agent.config.model import ControllerSettings
    from agent.kinds.identification.analysis import excitation_cycle
    from agent.models.robot.description import load_robot
    from drivers.sim.excitation import simulate_excitation
    from drivers.sim.settings import SimJointWear, SimRobotSettings

    friction = _scales(args.friction_scale, "--friction-scale")
    stiffness = _scales(args.stiffness_scale, "--stiffness-scale")
    # Before the excitation design and the simulation (tens of seconds), not after them.
    names = load_robot(args.robot).joint_names
    for option, scales in (("--friction-scale", friction), ("--stiffness-scale", stiffness)):
        unknown = sorted(set(scales) - set(names))
        if unknown:
            raise UsageError(
                f"{option}: no joint {', '.join(unknown)} in {args.robot}; its joints are "
                + ", ".join(names)
            )
    wear = {
        j: SimJointWear(friction_scale=friction.get(j, 1.0), stiffness_scale=stiffness.get(j, 1.0))
        for j in {*friction, *stiffness}
    }
    settings = IdentificationCycleSettings(
        robot=str(args.robot),
        sample_rate_hz=args.sample_rate,
        settle_s=0.0,
        trajectory=ExcitationDesignSettings(
            period_s=args.period_s,
            harmonics=args.harmonics,
            periods=args.periods,
            maxiter=args.maxiter,
            seed=args.seed,
        ),
    )
    from agent.cli.progress import Steps

    steps = Steps(3)
    steps.step(f"designing the excitation (up to {args.maxiter} optimiser iterations)")
    cycle = excitation_cycle(ControllerSettings(name="sim", driver="sim", identification=settings))
    truth = SimRobotSettings(robot=str(args.robot), wear=wear, torque_noise_nm=args.torque_noise_nm)
    steps.step(f"simulating {cycle.periods} x {cycle.period_s:g} s of {args.robot}")
    capture = simulate_excitation(cycle, truth, args.seed, "sim")
    steps.step(f"writing {args.output}")
    save_multi_capture(capture, args.output)
    steps.done()
    print(
        f"{args.output}: {len(capture)} samples of {len(capture.joints)} joints at "
        f"{capture.sample_rate_hz:g} Hz ({cycle.robot}, {cycle.periods} x {cycle.period_s:g} s)"
    )
    return EX_OK
