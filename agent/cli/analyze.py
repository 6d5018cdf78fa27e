"""`jha analyze backlash CAPTURE`: the backlash signature fit (Giovannitti et al. 2022) of one
capture file, with the delta = f(A) calibration when a CSV of pairs is given (`jha analyze
calibration` exports a configured joint's pairs: agent.cli.calibration)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from agent.cli.common import UsageError, print_json
from agent.errors import EX_OK, EstimationError


def register(subparsers: Any) -> None:
    """Add `analyze backlash` to the `jha` parser's sub-parsers."""
    ana = subparsers.add_parser("analyze", help="estimate from a capture file").add_subparsers(
        dest="analyze_command", required=True
    )
    bl = ana.add_parser("backlash", help="backlash signature fit (Giovannitti et al. 2022)")
    bl.add_argument("file", type=Path, help="capture .csv or .npz")
    bl.add_argument("--speed-rps", type=float, help="commanded motor speed, rev/s")
    bl.add_argument("--gear-ratio", type=float, help="motor turns per load turn")
    bl.add_argument("--encoder-bits", type=int, help="bit width of motor_counts")
    bl.add_argument("--resonance-hz", type=float, nargs=2, metavar=("LO", "HI"))
    bl.add_argument("--seed", type=int, default=1)
    bl.add_argument(
        "--max-gap-ticks",
        type=int,
        default=5,
        metavar="N",
        help="a log that is not uniformly sampled is put on its tick first (agent.capture."
        "resample); a gap of more than N missing ticks is refused (default 5)",
    )
    bl.add_argument("--calibration", type=Path, help="CSV of amplitude_rad_s,backlash_rad pairs")
    bl.add_argument("--json", action="store_true")
    bl.add_argument("--plot", type=Path, metavar="FILE.svg")
    bl.set_defaults(func=_cmd_analyze_backlash)
    from agent.cli.calibration import add_parser

    add_parser(ana)


def _cmd_analyze_backlash(args: argparse.Namespace) -> int:
    from agent.capture.files import load_capture
    from agent.capture.model import CaptureMeta
    from agent.capture.resample import uniform_capture
    from agent.estimation.backlash.calibration import fit_calibration
    from agent.estimation.backlash.fit import BacklashFitSettings, fit_backlash

    _check_flags(args)
    meta = CaptureMeta(
        commanded_speed_rad_s=None if args.speed_rps is None else 2 * math.pi * args.speed_rps,
        gear_ratio=args.gear_ratio,
        encoder_bits=args.encoder_bits,
    )
    capture, resampled = uniform_capture(
        load_capture(args.file, meta), max_gap_ticks=args.max_gap_ticks
    )
    if args.resonance_hz and capture.time_s.size > 1:
        rate_hz = (capture.time_s.size - 1) / float(capture.time_s[-1] - capture.time_s[0])
        if not args.resonance_hz[1] < rate_hz / 2:
            raise EstimationError(
                f"--resonance-hz: expected HI below the capture's Nyquist frequency "
                f"({rate_hz / 2:.4g} Hz: {args.file} is sampled at {rate_hz:.4g} Hz), found "
                f"{args.resonance_hz[1]:g}"
            )
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
        print_json(
            {**result.to_dict(), "resampling": None if resampled is None else resampled.to_dict()}
        )
    else:
        delta = (
            "n/a (no calibration)"
            if result.backlash_rad is None
            else (f"{result.backlash_rad * 1e3:.4f} mrad")
        )
        amp_band = result.amplitude_interval_rad_s
        if amp_band is not None:
            print(
                f"amplitude  {result.amplitude_rad_s:.5g} rad/s "
                f"(95 % interval {amp_band[0]:.4g}-{amp_band[1]:.4g})"
            )
        else:
            print(f"amplitude  {result.amplitude_rad_s:.5g} rad/s")
        band = result.backlash_interval_rad
        if band is not None:
            delta += f" (95 % interval {band[0] * 1e3:.4f}-{band[1] * 1e3:.4f})"
        print(f"backlash   {delta}")
        if result.ambiguous:
            print("ambiguous  yes: equally good optima with different amplitudes (see warnings)")
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
        if resampled is not None:
            print(f"sampling   {resampled.describe()}")
        for w in result.warnings:
            print(f"warning    {w}")
    return EX_OK


def _check_flags(args: argparse.Namespace) -> None:
    """The flags that stand for config settings, held to the config's own rules (exit 64)."""
    problems: list[str] = []

    def bounded(flag: str, value: float | None, low: float, high: float, what: str) -> None:
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            problems.append(f"{flag}: expected {what}, found {value:g}")

    speed = args.speed_rps
    if speed is not None and not 0.0 < speed <= 500.0:  # NaN fails too
        problems.append(
            f"--speed-rps: expected a motor speed > 0 and <= 500 rev/s, found {speed:g}"
        )
    bounded(
        "--gear-ratio", args.gear_ratio, 1.0, math.inf, "a reduction: >= 1 motor turn per load turn"
    )
    bounded("--encoder-bits", args.encoder_bits, 12, 32, "12 to 32 bits")
    bounded("--max-gap-ticks", args.max_gap_ticks, 0, 1000, "0 to 1000 ticks")
    if args.resonance_hz:
        low, high = args.resonance_hz
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
            problems.append(f"--resonance-hz: expected 0 < LO < HI, found {low:g} {high:g}")
    if problems:
        raise UsageError("; ".join(problems))


def _read_pairs(path: Path) -> list[tuple[float, float]]:
    """Calibration pairs: a CSV of amplitude_rad_s,backlash_rad rows (header optional)."""
    pairs: list[tuple[float, float]] = []
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
        if pairs and not (a > pairs[-1][0] and d > pairs[-1][1]):
            raise EstimationError(
                f"{path}:{n}: expected amplitude and backlash both above the row before "
                f"({pairs[-1][0]:g}, {pairs[-1][1]:g}): pairs must increase strictly, as "
                f"calibration.points must; found {a:g}, {d:g}"
            )
        pairs.append((a, d))
    return pairs
