"""`jha feedrate stream IN.gcode`: filter a program on the fly and stream it to a serial CNC
controller.

  jha feedrate stream IN.gcode --config FILE --controller NAME
  jha feedrate stream IN.gcode --port PATH --machine FILE [--protocol grbl|dnc]
      [--confirm-ready] [--pid-file FILE]

`--config` takes the CNC from the agent's config: a controller with `driver: grbl`
(drivers/grbl/settings.py: port, protocol, machine file or inline machine, filter, timeouts).
`--port --machine` names port and machine directly, for a bench without a config file.
A GRBL stream starts only on an Idle controller (asked with '?'); a DNC stream only with
--confirm-ready, the operator's word that the machine is ready (drivers/grbl/driver.py
DNC_CHECKLIST). While it runs, SIGUSR1 holds it and SIGUSR2 resumes it (`jha feedrate
hold/resume`, agent.cli.feedrate.control); SIGTERM and Ctrl-C end it with a feed hold.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from agent.cli.feedrate.filter import input_lines
from agent.errors import EX_OK, ConfigError


def register(group: Any) -> None:
    """Add `stream` to the `jha feedrate` command group."""
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
    from agent.feedrate.machine import MachineSettings
    from agent.schema.validate import build
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
        if node is None:  # load_config read this very tree: the inline machine is in it
            raise ConfigError(f"{path}: controllers[{index}].settings.machine: not found")
        machine = replace(
            build(MachineSettings, node, str(path), path=f"controllers[{index}].settings.machine"),
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

    from agent.cli.feedrate.control import hold_signals, pid_file
    from agent.feedrate.streaming.session import StreamControl, StreamError

    driver, machine = _stream_target(args)
    settings = driver.settings
    machine = _with_lookahead(machine, settings)
    unfiltered = args.no_filter or not settings.filter.enabled
    source = "<stdin>" if args.input == "-" else args.input
    if not unfiltered:  # the filter's imports (scipy) take seconds: only when it is used
        from agent.feedrate.filter.program import filtered_lines_with_origin
        from agent.feedrate.filter.toolpath_filter import FeedrateFilter

        filt = FeedrateFilter(machine, source=source)
    # Output line -> program line, for the lines a failure can concern (those in flight): a
    # bounded window, so a program of any length streams in constant memory.
    origins: deque[tuple[int, int]] = deque(maxlen=4096)

    def lines() -> Iterator[str]:
        if unfiltered:
            yield from input_lines(args.input)
            return
        for n, (line, origin) in enumerate(
            filtered_lines_with_origin(input_lines(args.input), machine, filt=filt), 1
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
