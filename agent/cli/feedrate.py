"""`jha feedrate ...`: the feedrate-modulation filter and paper 001's numbers (issue 3 part 7).

  jha feedrate filter [IN.gcode|-] [-o OUT.gcode] --machine FILE
  jha feedrate stream IN.gcode --config FILE --controller NAME
  jha feedrate stream IN.gcode --port PATH --machine FILE [--protocol grbl|dnc]
      [--confirm-ready] [--pid-file FILE]
  jha feedrate hold|resume (--pid PID | --pid-file FILE)     (agent/cli/feedrate_control.py)
  jha feedrate simulate --example farouki2022 [--ratio R] [--json]
  jha feedrate sweep [--points N] [--json] [--plot FILE.svg]

`stream --config` takes the CNC from the agent's config: a controller with `driver: grbl`
(drivers/grbl/settings.py: port, protocol, machine file or inline machine, filter, timeouts).
`--port --machine` names port and machine directly, for a bench without a config file.
A GRBL stream starts only on an Idle controller (asked with '?'); a DNC stream only with
--confirm-ready, the operator's word that the machine is ready (drivers/grbl/driver.py DNC_CHECKLIST).
While it runs, SIGUSR1 holds it and SIGUSR2 resumes it (`jha feedrate hold/resume`); SIGTERM and
Ctrl-C end it with a feed hold.
Exit codes follow sysexits (65 bad G-code, 74 stream failure, 75 controller not ready: nothing
sent, 78 bad config or machine file).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from agent.errors import EX_OK

# The digits section 4.2 prints, for the comparison `simulate` shows.
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


def register(subparsers: Any) -> None:
    """Add the `feedrate` command group to the `jha` parser's subparsers."""
    group = subparsers.add_parser(
        "feedrate", help="feedrate modulation at axis reversals (paper 001)"
    ).add_subparsers(dest="feedrate_command", required=True)

    flt = group.add_parser("filter", help="modulate a G-code program (file or stdin)")
    flt.add_argument("input", nargs="?", default="-", help="G-code file, or - for stdin")
    flt.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    flt.add_argument("--machine", required=True, type=Path, help="machine description YAML")
    flt.add_argument("--stats", action="store_true", help="print the filter's counts as JSON")
    flt.set_defaults(func=_cmd_filter)

    stm = group.add_parser(
        "stream", help="filter a program on the fly and stream it to a controller on a serial port"
    )
    stm.add_argument("input", help="G-code file, or - for stdin")
    stm.add_argument("--config", type=Path, help="the agent's config file")
    stm.add_argument("--controller", help="the CNC's controller name in --config")
    stm.add_argument("--port", help="serial device or pty path (without --config)")
    stm.add_argument("--machine", type=Path, help="machine description YAML (without --config)")
    stm.add_argument(
        "--protocol", choices=["grbl", "dnc"], default=None, help="without --config (default grbl)"
    )
    stm.add_argument("--baudrate", type=int, default=None, help="without --config")
    stm.add_argument("--no-filter", action="store_true", help="stream the program unchanged")
    stm.add_argument("--quiet", action="store_true", help="no progress line")
    stm.add_argument(
        "--confirm-ready",
        action="store_true",
        help="DNC: you have checked at the machine that it is ready to run this "
        "program (no alarm, door closed, DNC mode, offsets, overrides); a GRBL "
        "controller is asked instead",
    )
    stm.add_argument(
        "--pid-file", type=Path, help="write this stream's pid here, for `jha feedrate hold/resume`"
    )
    stm.set_defaults(func=_cmd_stream)

    from agent.cli.feedrate_control import register_control

    register_control(group)

    sim = group.add_parser("simulate", help="paper 001's worked example (section 4.2)")
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


# ------------------------------------------------------------------------------- filter


def _input_lines(name: str) -> Iterator[str]:
    from agent.feedrate.gcode.parser import read_lines

    if name == "-":
        yield from read_lines(sys.stdin.buffer)
        return
    with open(name, "rb") as f:
        yield from read_lines(f)


def _cmd_filter(args: argparse.Namespace) -> int:
    from agent.feedrate.filter.toolpath_filter import FeedrateFilter, filter_lines
    from agent.feedrate.gcode.parser import encode_line
    from agent.feedrate.machine import load_machine

    machine = load_machine(args.machine)
    source = "<stdin>" if args.input == "-" else args.input
    filt = FeedrateFilter(machine, source=source)
    chunks = filter_lines(_input_lines(args.input), machine, filt=filt)
    if args.output == "-":
        out = sys.stdout.buffer
        for chunk in chunks:
            out.write(encode_line(chunk))
        out.flush()
    else:
        from agent.atomic import atomic_writer

        with atomic_writer(args.output, "wb") as f:
            for chunk in chunks:
                f.write(encode_line(chunk))
    stats = filt.stats
    if args.stats:
        print(json.dumps(stats.to_dict(), indent=2), file=sys.stderr)
    else:
        print(
            f"{source}: {stats.lines_in} lines in, {stats.lines_out} out; "
            f"{stats.modulated} of {stats.turning_points} reversals modulated, "
            f"+{stats.added_time_s:.3f} s",
            file=sys.stderr,
        )
    return EX_OK


# ------------------------------------------------------------------------------- stream


class _Progress:
    """One status line on stderr, rewritten in place: lines, time, reversals modulated."""

    def __init__(self, out: IO[str], enabled: bool) -> None:
        self.out, self.enabled, self.width = out, enabled, 0

    def __call__(self, p: Any) -> None:
        if not self.enabled:
            return
        rev = "" if p.reversals_modulated is None else f"  reversals {p.reversals_modulated}"
        state = f"  {p.status.state}" if p.status is not None else ""
        pause = "  XOFF" if p.paused else ""
        held = "  HELD (jha feedrate resume)" if p.held else ""
        text = (
            f"lines {p.lines_acked}/{p.lines_sent}  time {p.elapsed_s:7.1f} s{rev}"
            f"{state}{pause}{held}"
        )
        self.width = max(self.width, len(text))
        self.out.write("\r" + text.ljust(self.width))
        self.out.flush()

    def done(self) -> None:
        if self.enabled and self.width:
            self.out.write("\n")
            self.out.flush()


def _stream_target(args: argparse.Namespace) -> tuple[Any, Any]:
    """(GrblDriver, MachineSettings) from --config/--controller or from --port/--machine."""
    from agent.errors import ConfigError
    from drivers.grbl.driver import GrblDriver
    from drivers.grbl.settings import GrblSettings, StreamFilterSettings

    direct = [
        f"--{n}"
        for n in ("port", "machine", "protocol", "baudrate")
        if getattr(args, n) is not None
    ]
    if args.config is not None or args.controller is not None:
        if args.config is None or args.controller is None:
            raise ConfigError("feedrate stream: --config and --controller go together")
        if direct:
            raise ConfigError(
                f"feedrate stream: {', '.join(direct)} cannot be combined with "
                "--config (the controller's settings say it)"
            )
        return _configured_target(args.config, args.controller)
    if args.port is None or args.machine is None:
        raise ConfigError(
            "feedrate stream: give --config FILE --controller NAME, or --port PATH --machine FILE"
        )
    settings = GrblSettings(
        port=args.port,
        machine=str(args.machine),
        protocol=args.protocol or "grbl",
        baudrate=args.baudrate or 115_200,
        filter=StreamFilterSettings(enabled=not args.no_filter),
    )
    return GrblDriver("cli", settings), settings.machine_settings()


def _configured_target(path: Path, name: str) -> tuple[Any, Any]:
    from dataclasses import replace

    from agent.config.load import load_config
    from agent.errors import ConfigError
    from agent.feedrate.machine import MachineSettings
    from agent.schema import validate as schema
    from agent.schema.yaml_lines import load_yaml
    from drivers.base import Capability, load_driver_class
    from drivers.grbl.settings import GrblSettings

    config = load_config(path)
    index = next((i for i, c in enumerate(config.controllers) if c.name == name), None)
    if index is None:
        names = ", ".join(c.name for c in config.controllers)
        raise ConfigError(f"{path}: no controller named {name!r} (controllers: {names})")
    entry = config.controllers[index]
    cls = load_driver_class(entry.driver)
    if not Capability.TOOLPATH_STREAMING & cls.capabilities or not isinstance(
        entry.settings, GrblSettings
    ):
        raise ConfigError(
            f"{path}: controller {name!r} has driver {entry.driver}; G-code is "
            "streamed to a serial CNC controller with driver: grbl"
        )
    settings: GrblSettings = entry.settings
    if isinstance(settings.machine, str):
        machine = settings.machine_settings(path.parent)
    else:  # built from the config's own tree, so a mistake names this file and line
        where: list[str | int] = ["controllers", index, "settings", "machine"]
        node = load_yaml(path).find(where)
        assert node is not None
        machine = replace(
            schema.build(
                MachineSettings, node, str(path), path=f"controllers[{index}].settings.machine"
            ),
            source=f"{path}:{node.line}",
        )
    driver = cls(entry.name, settings, entry.joints)
    return driver, machine


def _with_lookahead(machine: Any, settings: Any) -> Any:
    from dataclasses import replace

    f = settings.filter
    if f.lookahead_lines is None and f.lookahead_s is None:
        return machine
    look = replace(
        machine.lookahead,
        **({"lines": f.lookahead_lines} if f.lookahead_lines is not None else {}),
        **({"seconds": f.lookahead_s} if f.lookahead_s is not None else {}),
    )
    return replace(machine, lookahead=look)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _cmd_stream(args: argparse.Namespace) -> int:
    from collections import deque

    from agent.cli.feedrate_control import hold_signals, pid_file
    from agent.feedrate.streaming.grbl import StreamControl, StreamError

    driver, machine = _stream_target(args)
    settings = driver.settings
    machine = _with_lookahead(machine, settings)
    unfiltered = args.no_filter or not settings.filter.enabled
    source = "<stdin>" if args.input == "-" else args.input
    if not unfiltered:  # the filter's imports (scipy) take seconds: only when it is used
        from agent.feedrate.filter.toolpath_filter import FeedrateFilter, filtered_lines_with_origin

        filt = FeedrateFilter(machine, source=source)
    # Output line -> program line, for the lines a failure can concern (those in flight): a
    # bounded window, so a program of any length streams in constant memory.
    origins: deque[tuple[int, int]] = deque(maxlen=4096)

    def lines() -> Iterator[str]:
        if unfiltered:
            yield from _input_lines(args.input)
            return
        for n, (line, origin) in enumerate(
            filtered_lines_with_origin(_input_lines(args.input), machine, filt=filt), 1
        ):
            origins.append((n, origin))
            yield line

    progress = _Progress(sys.stderr, not args.quiet)
    started = time.monotonic()
    control = StreamControl()
    # SIGTERM (systemd, kill) ends the stream like Ctrl-C does: through the streamer, which
    # sends a feed hold so the controller does not run out its buffer unattended.
    previous_term = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        # The pid file goes before the handlers do: a late `jha feedrate hold` then finds no
        # stream, rather than a process whose SIGUSR1 would end it.
        with hold_signals(control.hold, control.resume), pid_file(args.pid_file):
            result = driver.stream(
                lines(),
                max_line_chars=machine.emitter_dialect.max_line_chars,
                progress=progress,
                reversals_modulated=None if unfiltered else (lambda: filt.reversals_modulated),
                source=source if unfiltered else None,
                control=control,
                confirmed_ready=args.confirm_ready,
            )
    except StreamError as exc:
        if unfiltered or exc.line_no is None:
            raise
        program_line = dict(origins).get(exc.line_no)
        if program_line is None:
            raise
        raise StreamError(
            program_line,
            exc.text,
            f"{exc.reason} (line {exc.line_no} of the filtered stream)",
            kind=exc.kind,
            code=exc.code,
            sent=exc.sent,
            acked=exc.acked,
            source=source,
        ) from exc
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        progress.done()
    program, modulated = "", 0
    if not unfiltered:
        program, modulated = f" ({filt.stats.lines_in} program lines)", filt.stats.modulated
    print(
        f"{source}: {result.lines_acked} lines acknowledged of {result.lines_sent} sent"
        f"{program}, {time.monotonic() - started:.1f} s, {modulated} reversals "
        "modulated",
        file=sys.stderr,
    )
    if result.held_at_end:
        print(
            f"{source}: every line was sent, but the machine is still held: resume it at the "
            "controller (cycle start)",
            file=sys.stderr,
        )
    return EX_OK


# ------------------------------------------------------------------------------- paper


def _cmd_simulate(args: argparse.Namespace) -> int:
    from agent.feedrate.example import (
        PAPER_AMPLITUDE_M,
        PAPER_HALF_WINDOW_S,
        PAPER_REVERSAL_INTERVAL_S,
        farouki2022_example,
        simulate_turning_point,
    )
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
        "paper 001, section 4.2 (b = 0.0005 s^2, c = 0.005 s, N = 25, eta = 0.35, r = 1 m/rad,"
        " tau = 1 s, dtheta_m = 0.125664 rad; X = 0.25 sin(pi t / 6) m)"
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
    from agent.feedrate.example import figure11_sweep

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
                title=f"paper 001 figure 11: radial error at a turning point ({args.model} model)",
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
