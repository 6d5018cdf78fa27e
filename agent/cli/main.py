"""`jha ...`: the command line. Exit codes follow sysexits (65 bad data, 78 bad config)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from agent import __version__
from agent.errors import EX_CONFIG, EX_DATAERR, EX_OK, AgentError, EstimationError

log = logging.getLogger("jha")


def _setup_logging(level: str) -> None:
    from agent.logfmt import setup_logging

    setup_logging(level)


def _cmd_config_check(args: argparse.Namespace) -> int:
    from agent.config.load import config_issues, load_config
    from agent.config.warnings import interlock_warnings

    issues = config_issues(args.file)
    if issues:
        for issue in issues:
            print(issue, file=sys.stderr)
        print(f"{args.file}: {len(issues)} error(s)", file=sys.stderr)
        return EX_CONFIG
    # Valid, so still exit 0; but every interlock rule that is off is said, on stderr.
    warnings = interlock_warnings(load_config(args.file), args.file)
    for warning in warnings:
        print(warning, file=sys.stderr)
    if warnings:
        print(f"{args.file}: {len(warnings)} warning(s)", file=sys.stderr)
    print(f"{args.file}: OK")
    return EX_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from agent.config.load import load_config
    from agent.service.daemon import Agent
    from agent.service.sd_notify import Notifier

    config = load_config(args.config)
    _setup_logging(args.log_level or config.agent.log_level)
    notifier = Notifier()
    agent = Agent(
        config,
        once=args.once,
        wait_for_stop_s=args.wait_for_stop,
        out=sys.stdout,
        dry_run=args.dry_run,
        notifier=notifier,
        handle_signals=True,
    )
    try:
        return asyncio.run(agent.run())
    except KeyboardInterrupt:
        return EX_OK
    finally:
        notifier.close()


def _cmd_analyze_backlash(args: argparse.Namespace) -> int:
    from agent.capture.files import load_capture
    from agent.capture.model import CaptureMeta
    from agent.estimation.backlash.calibration import fit_calibration
    from agent.estimation.backlash.fit import BacklashFitSettings, fit_backlash

    meta = CaptureMeta(
        commanded_speed_rad_s=None if args.speed_rps is None else 2 * math.pi * args.speed_rps,
        gear_ratio=args.gear_ratio,
        encoder_bits=args.encoder_bits,
    )
    capture = load_capture(args.file, meta)
    settings = BacklashFitSettings(
        resonance_hz=tuple(args.resonance_hz) if args.resonance_hz else (10.0, 200.0),
        seed=args.seed,
    )
    calibration = None
    if args.calibration:
        try:
            calibration = fit_calibration(
                _read_pairs(args.calibration), source=str(args.calibration)
            )
        except EstimationError as exc:
            message = str(exc)
            if not message.startswith(str(args.calibration)):  # name the file at fault
                message = f"{args.calibration}: {message}"
            raise EstimationError(message) from None
    result = fit_backlash(capture, settings, calibration)
    if args.plot:
        from agent.atomic import atomic_write_text
        from agent.report.svg import Series, line_plot

        atomic_write_text(
            args.plot,
            line_plot(
                [
                    Series("residual r(t)", result.time_s, result.residual_rad_s),
                    Series("fitted h(t)", result.time_s, result.fitted_rad_s),
                ],
                title=f"{args.file}: backlash signature",
                x_label="time (s)",
                y_label="motor speed residual (rad/s)",
            ),
        )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        delta = (
            "n/a (no calibration)"
            if result.backlash_rad is None
            else (f"{result.backlash_rad * 1e3:.4f} mrad")
        )
        print(f"amplitude  {result.amplitude_rad_s:.5g} rad/s")
        print(f"backlash   {delta}")
        print(
            f"rmse       {result.rmse_rad_s:.4g} rad/s "
            f"({100 * result.explained_fraction:.1f} % of the residual explained)"
        )
        print(
            f"resonance  {result.params['resonance_hz']:.2f} Hz, "
            f"decay {result.params['tau_per_s']:.2f} 1/s"
        )
        print(
            f"fit        {result.evaluations} evaluations, {result.restarts} restarts, "
            f"{result.fit_seconds:.2f} s, {result.stop_reason}"
        )
        for w in result.warnings:
            print(f"warning    {w}")
    return EX_OK


def _read_pairs(path: Path) -> list[tuple[float, float]]:
    """Calibration pairs: a CSV of amplitude_rad_s,backlash_rad rows (header optional)."""
    pairs = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#") or text.startswith("amplitude"):
            continue
        try:
            a, d = (float(x) for x in text.split(","))
        except ValueError:
            raise EstimationError(
                f"{path}:{n}: expected 'amplitude_rad_s,backlash_rad', found {text!r}"
            ) from None
        pairs.append((a, d))
    return pairs


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


def _cmd_drivers(args: argparse.Namespace) -> int:
    from drivers.base import Capability, available_drivers, load_driver_class

    for name, ep in sorted(available_drivers().items()):
        try:
            caps = load_driver_class(name).capabilities
            text = (
                ", ".join(
                    (c.name or "").lower()
                    for c in Capability
                    if c is not Capability.NONE and c in caps
                )
                or "none"
            )
        except Exception as exc:  # a broken plugin is listed, not fatal
            text = f"cannot load: {exc}"
        print(f"{name:10s} {ep.value:32s} {text}")
    return EX_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jha", description="Joint-health agent")
    p.add_argument("--version", action="version", version=f"jha {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the agent (daemon)")
    run.add_argument("--config", required=True, type=Path)
    run.add_argument("--once", action="store_true", help="one production stop, then exit")
    run.add_argument(
        "--wait-for-stop",
        type=float,
        default=60.0,
        metavar="S",
        help="with --once: how long to wait for a production stop (default 60)",
    )
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="everything but motion: status read, interlocks checked, cycles logged as dry_run",
    )
    run.set_defaults(func=_cmd_run)

    cfg = sub.add_parser("config", help="configuration tools").add_subparsers(
        dest="config_command", required=True
    )
    check = cfg.add_parser("check", help="validate a config file; starts nothing")
    check.add_argument("file", type=Path)
    check.set_defaults(func=_cmd_config_check)

    ana = sub.add_parser("analyze", help="estimate from a capture file").add_subparsers(
        dest="analyze_command", required=True
    )
    bl = ana.add_parser("backlash", help="backlash signature fit (paper 000)")
    bl.add_argument("file", type=Path, help="capture .csv or .npz")
    bl.add_argument("--speed-rps", type=float, help="commanded motor speed, rev/s")
    bl.add_argument("--gear-ratio", type=float, help="motor turns per load turn")
    bl.add_argument("--encoder-bits", type=int, help="bit width of motor_counts")
    bl.add_argument("--resonance-hz", type=float, nargs=2, metavar=("LO", "HI"))
    bl.add_argument("--seed", type=int, default=1)
    bl.add_argument("--calibration", type=Path, help="CSV of amplitude_rad_s,backlash_rad pairs")
    bl.add_argument("--json", action="store_true")
    bl.add_argument("--plot", type=Path, metavar="FILE.svg")
    bl.set_defaults(func=_cmd_analyze_backlash)

    sim = sub.add_parser("simulate", help="simulated captures").add_subparsers(
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

    drv = sub.add_parser("drivers", help="installed drivers and what they can do")
    drv.set_defaults(func=_cmd_drivers)

    # Command groups of the other estimators live beside their code.
    from agent.cli import feedrate as cli_feedrate
    from agent.cli import identify as cli_identify
    from agent.cli import report as cli_report
    from agent.cli import service as cli_service
    from agent.cli import stiffness as cli_stiffness

    cli_feedrate.register(sub)
    cli_stiffness.register(sub)
    cli_identify.register(sub)
    cli_report.register(sub)
    cli_service.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except AgentError as exc:
        print(f"jha: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ValueError, OSError) as exc:
        print(f"jha: {exc}", file=sys.stderr)
        return EX_DATAERR


if __name__ == "__main__":
    sys.exit(main())
