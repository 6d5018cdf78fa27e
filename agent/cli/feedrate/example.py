"""`jha feedrate simulate --example farouki2022` and `jha feedrate sweep`: the worked example of
Farouki & Swett 2022 (section 4.2, and section 6's turning point) and its figure 11, computed
by agent.feedrate.example and shown beside the numbers the paper prints."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from agent.errors import EX_OK

_PAPER_FORMAT = {
    "gamma_1_s": "{:.0f}",
    "lambda_1_s": "{:.6f}",
    "motor_gain_rad_m_s2": "{:.6e}",
    "p": "{:.6f}",
    "q": "{:.6f}",
    "phi_rad": "{:.6f}",
    "steady_backlash_s": "{:.6f}",
    "reversal_lag_s": "{:.6f}",
}
_PAPER_NAMES = {
    "gamma_1_s": ("gamma", "1/s"),
    "lambda_1_s": ("lambda", "1/s"),
    "motor_gain_rad_m_s2": ("C", "rad/(m s^2)"),
    "p": ("p", ""),
    "q": ("q", ""),
    "phi_rad": ("phi", "rad"),
    "steady_backlash_s": ("backlash interval", "s"),
    "reversal_lag_s": ("reversal lag", "s"),
}


def register(group: Any) -> None:
    """Add `simulate` and `sweep` to the `jha feedrate` command group."""
    sim = group.add_parser(
        "simulate", help="the worked example of Farouki & Swett 2022 (section 4.2)"
    )
    sim.add_argument("--example", choices=["farouki2022"], required=True)
    sim.add_argument(
        "--ratio",
        type=float,
        help="also run section 6's turning point with "
        "V(1/2)/V_c = R (n = 10, t* = 0.5 s) against the constant feed",
    )
    sim.add_argument(
        "--model",
        choices=["paper", "dead_zone"],
        default="paper",
        help="backlash model for --ratio (default: the paper's single gap)",
    )
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(func=_cmd_simulate)

    swp = group.add_parser("sweep", help="figure 11: radial error against V(1/2)/V_c")
    swp.add_argument("--points", type=int, default=26, help="ratios from -1 to 1.5")
    swp.add_argument("--model", choices=["paper", "dead_zone"], default="paper")
    swp.add_argument(
        "--half-window", type=float, default=0.5, metavar="SECONDS", help="t* (the paper's 0.5 s)"
    )
    swp.add_argument("--json", action="store_true")
    swp.add_argument("--plot", type=Path, metavar="FILE.svg")
    swp.set_defaults(func=_cmd_sweep)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from agent.feedrate.example import (
        PAPER_AMPLITUDE_M,
        PAPER_HALF_WINDOW_S,
        PAPER_REVERSAL_INTERVAL_S,
        farouki2022_example,
    )
    from agent.feedrate.figure11 import simulate_turning_point
    from agent.feedrate.profile import symmetric_feedrate

    ex = farouki2022_example()
    values = ex.to_dict()
    rounded = {k: float(fmt.format(values[k])) for k, fmt in _PAPER_FORMAT.items()}
    agree = {k: rounded[k] == float(fmt.format(ex.printed[k])) for k, fmt in _PAPER_FORMAT.items()}
    out: dict[str, Any] = {
        "example": "farouki2022",
        **{k: values[k] for k in _PAPER_FORMAT},
        "discriminant_s2": values["discriminant_s2"],
        "omega_rad_s": values["omega_rad_s"],
        "period_s": values["period_s"],
        "printed": {k: ex.printed[k] for k in _PAPER_FORMAT},
        "rounded_to_printed_digits": rounded,
        "agrees_with_paper": all(agree.values()),
        "params": values["params"],
    }
    if args.ratio is not None:
        vc = PAPER_AMPLITUDE_M * math.pi / PAPER_REVERSAL_INTERVAL_S
        runs = {}
        for name, ratio in (("constant", 1.0), ("modulated", args.ratio)):
            prof = symmetric_feedrate(vc, PAPER_HALF_WINDOW_S, ratio=ratio, allow_retrograde=True)
            run = simulate_turning_point(prof, radius_m=PAPER_AMPLITUDE_M, model=args.model)
            runs[name] = {
                "ratio": ratio,
                "max_radial_error": run.max_radial_error,
                "rms_radial_error": run.rms_radial_error,
                "x_backlash_s": run.x_backlash_s,
                "time_penalty_s": max(0.0, prof.time_penalty_s),
            }
        out["turning_point"] = {
            "model": args.model,
            "half_window_s": PAPER_HALF_WINDOW_S,
            "degree": 10,
            **runs,
        }
    if args.json:
        print(json.dumps(out, indent=2))
        return EX_OK
    print(
        "Farouki & Swett 2022, section 4.2 (b = 0.0005 s^2, c = 0.005 s, N = 25, eta = 0.35,"
        " r = 1 m/rad, tau = 1 s, dtheta_m = 0.125664 rad; X = 0.25 sin(pi t / 6) m)"
    )
    print(f"{'quantity':20s} {'computed':>14s} {'paper':>14s}")
    for k, fmt in _PAPER_FORMAT.items():
        name, unit = _PAPER_NAMES[k]
        label = f"{name} ({unit})" if unit else name
        mark = "" if agree[k] else "  DIFFERS"
        print(f"{label:20s} {fmt.format(values[k]):>14s} {fmt.format(ex.printed[k]):>14s}{mark}")
    if "turning_point" in out:
        tp = out["turning_point"]
        print(f"\nturning point (section 6, n = 10, t* = 0.5 s, model {args.model}):")
        for name in ("constant", "modulated"):
            r = tp[name]
            print(
                f"  V(1/2)/V_c = {r['ratio']:5.2f}: max |e| {r['max_radial_error']:.3e}, "
                f"RMS {r['rms_radial_error']:.3e}, +{r['time_penalty_s']:.3f} s"
            )
    return EX_OK


def _cmd_sweep(args: argparse.Namespace) -> int:
    from agent.feedrate.figure11 import figure11_sweep

    if args.points < 2:
        raise ValueError(f"--points: expected at least 2, got {args.points}")
    if not 0.0 < args.half_window <= 10.0:
        raise ValueError(f"--half-window: expected 0 < t* <= 10 s, got {args.half_window:g}")
    sweep = figure11_sweep(points=args.points, model=args.model, half_window_s=args.half_window)
    constant = min(sweep.rows, key=lambda r: abs(r.ratio - 1.0))
    shallow = sweep.minimum(0.0, 1.0)
    deepest = sweep.minimum(-1.0, 0.0)
    if args.plot:
        from agent.atomic import atomic_write_text
        from agent.report.svg import HLine, Series, line_plot

        ratios = [r.ratio for r in sweep.rows]
        atomic_write_text(
            args.plot,
            line_plot(
                [
                    Series(
                        "max |e|",
                        ratios,
                        [r.max_radial_error for r in sweep.rows],
                        color="#c0392b",
                        markers=True,
                    ),
                    Series(
                        "RMS e",
                        ratios,
                        [r.rms_radial_error for r in sweep.rows],
                        color="#1f5fa8",
                        markers=True,
                    ),
                ],
                title=(
                    "Farouki & Swett 2022 figure 11: radial error at a turning point "
                    f"({args.model} model)"
                ),
                x_label="V(1/2) / V_c",
                y_label="fractional radial error e = (r - rho0) / rho0",
                hlines=[HLine(constant.max_radial_error, "constant feed, max", dashed=True)],
            ),
        )
    if args.json:
        print(
            json.dumps(
                {
                    **sweep.to_dict(),
                    "shallow_minimum": shallow.to_dict(),
                    "deepest_minimum": deepest.to_dict(),
                },
                indent=2,
            )
        )
        return EX_OK
    print(
        f"figure 11 (n = {sweep.degree}, t* = {sweep.half_window_s:g} s, Theta* = pi/2, "
        f"model {sweep.model})"
    )
    print(f"{'V(1/2)/Vc':>9s} {'f':>8s} {'max |e|':>11s} {'RMS e':>11s} {'gap (s)':>8s}")
    for r in sweep.rows:
        gap = "-" if r.x_backlash_s is None else f"{r.x_backlash_s:.4f}"
        print(
            f"{r.ratio:9.3f} {r.middle_factor:8.3f} {r.max_radial_error:11.4e} "
            f"{r.rms_radial_error:11.4e} {gap:>8s}"
        )
    print(
        f"shallow minimum without retrograde motion: {shallow.ratio:g} "
        f"(max |e| {shallow.max_radial_error:.3e}); deepest with retrograde motion: "
        f"{deepest.ratio:g} (max |e| {deepest.max_radial_error:.3e}); constant feed "
        f"{constant.max_radial_error:.3e}"
    )
    if args.plot:
        print(f"plot: {args.plot}")
    return EX_OK
