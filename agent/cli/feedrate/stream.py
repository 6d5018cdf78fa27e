"""`jha feedrate stream IN.gcode`: filter a program on the fly and stream it to a serial CNC
controller.

  jha feedrate stream IN.gcode --config FILE --controller NAME
  jha feedrate stream IN.gcode --port PATH --machine FILE [--protocol grbl|dnc]
      [--xon-xoff] [--confirm-ready] [--pid-file FILE]

`--config` takes the CNC from the agent's config: a controller with `driver: grbl`
(drivers/grbl/settings.py: port, protocol, machine file or inline machine, filter, timeouts).
`--port --machine` names port and machine directly, for a bench without a config file.
A GRBL stream starts only on an Idle controller (asked with '?'); a DNC stream only with
--confirm-ready, the operator's word that the machine is ready (drivers/grbl/driver.py
DNC_CHECKLIST); DNC only to a controller said to have XON/XOFF flow control (`xon_xoff: true`,
`--xon-xoff`; GRBL has none: a drip feed would overrun its 128-byte receive buffer). A program
file (not a pipe) is checked whole before the first byte: every line the controller cannot take
(too long, a word its dialect lacks; for GRBL its own g-code list) is refused with its line
number, and an empty or comment-only program is refused. While it runs, SIGUSR1 holds it and
SIGUSR2 resumes it (`jha feedrate hold/resume`, agent.cli.feedrate.control); Ctrl-C, SIGTERM
and SIGHUP end it (exit 128 + signal, one line on stderr) with nothing left runnable in the
controller: feed hold, standstill, soft reset (agent.feedrate.streaming.stop; for DNC the
control's own codes, dnc_feed_hold and dnc_reset).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import IO, Any

from agent.cli.feedrate.filter import input_lines
from agent.errors import EX_DATAERR, EX_OK, AgentError, ConfigError

# The signals that end a stream, and how its messages name them.
END_SIGNALS: dict[int, str] = {
    signal.SIGINT: "SIGINT (Ctrl-C)",
    signal.SIGTERM: "SIGTERM",
    signal.SIGHUP: "SIGHUP (terminal or SSH session closed)",
}


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
    stm.add_argument(
        "--xon-xoff",
        action="store_true",
        default=None,
        help="without --config: the controller paces the line with XON/XOFF (needed for dnc; "
        "GRBL has none)",
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
        # After SIGHUP the terminal is gone: a failed write must not end the stream's stop.
        with contextlib.suppress(OSError):
            self.out.write("\r" + text.ljust(self.width))
            self.out.flush()

    def done(self) -> None:
        if self.enabled and self.width:
            with contextlib.suppress(OSError):
                self.out.write("\n")
                self.out.flush()


class Interrupted(AgentError):
    """A signal ended `jha feedrate stream` before it streamed anything."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class ProgramRefused(AgentError):
    """The program holds lines the controller cannot take: nothing was sent."""

    exit_code = EX_DATAERR


def _stream_target(args: argparse.Namespace) -> tuple[Any, Any]:
    """(GrblDriver, MachineSettings) from --config/--controller or from --port/--machine."""
    from drivers.grbl.driver import GrblDriver
    from drivers.grbl.settings import DNC_NEEDS_XON_XOFF, GrblSettings, StreamFilterSettings

    direct = [
        f"--{n}"
        for n in ("port", "machine", "protocol", "xon_xoff", "baudrate")
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
        return configured_target(args.config, args.controller)
    if args.port is None or args.machine is None:
        raise ConfigError(
            "feedrate stream: give --config FILE --controller NAME, or --port PATH --machine FILE"
        )
    settings = GrblSettings(
        port=args.port,
        machine=str(args.machine),
        protocol=args.protocol or "grbl",
        xon_xoff=bool(args.xon_xoff),
        baudrate=args.baudrate or 115_200,
        filter=StreamFilterSettings(enabled=not args.no_filter),
    )
    if settings.protocol == "dnc" and not settings.xon_xoff:
        raise ConfigError(
            "--protocol dnc: " + DNC_NEEDS_XON_XOFF.replace("xon_xoff: true", "--xon-xoff", 1)
        )
    return GrblDriver("cli", settings), settings.machine_settings()


def configured_target(path: Path, name: str) -> tuple[Any, Any]:
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


def _refuse_bad_lines(path: str, dialect: Any, max_chars: int | None) -> None:
    """Check a program file whole before the first byte: every line the controller cannot
    take is named with its line number; an empty or comment-only program is refused."""
    from dataclasses import replace

    from agent.feedrate.gcode.dialect import validate_program_line
    from agent.feedrate.gcode.lex import GcodeError
    from agent.feedrate.streaming.grbl_protocol import line_problem, prepare_line

    limit = dialect.max_line_chars if max_chars is None else max_chars
    target = replace(dialect, max_line_chars=limit)
    problems: list[str] = []
    sendable = 0
    for line_no, text in enumerate(input_lines(path), 1):
        if not prepare_line(text):
            continue
        sendable += 1
        problem = line_problem(prepare_line(text), None)
        if problem is not None:
            problems.append(f"{path}:{line_no}: {problem} (in {text.strip()[:60]!r})")
            continue
        try:
            validate_program_line(text, target, line_no, compact=True)
        except GcodeError as exc:
            problems.append(f"{path}:{line_no}: {str(exc).removeprefix(f'line {line_no}: ')}")
    if sendable == 0:
        raise ProgramRefused(
            f"{path}: no G-code line to send (empty, or only comments and blank lines); "
            "nothing was sent and the controller was not touched"
        )
    if problems:
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise ProgramRefused(
            f"{path}: refused before streaming, nothing was sent: {len(problems)} line(s) "
            f"the controller cannot take ({target.name}){more}:\n  " + "\n  ".join(problems[:10])
        )


def _refuse_what_the_filter_refuses(path: str, machine: Any) -> None:
    """The whole program through a filter of its own, its output only checked: a line the
    filter refuses (G28.1, G30.1, G38.x, G53 where the path is unknown...) or an output line
    the controller cannot take is refused before the first byte, never mid-stream with the
    part half cut. The filter runs twice (it streams: memory stays constant)."""
    from agent.feedrate.filter.program import filtered_lines_with_origin
    from agent.feedrate.filter.toolpath_filter import FeedrateFilter
    from agent.feedrate.streaming.grbl_protocol import line_problem, prepare_line

    limit = machine.emitter_dialect.max_line_chars
    dry = FeedrateFilter(machine, source=path)
    try:
        for line, origin in filtered_lines_with_origin(input_lines(path), machine, filt=dry):
            problem = line_problem(prepare_line(line), limit)
            if problem is not None:
                raise ProgramRefused(
                    f"{path}:{origin}: refused before streaming, nothing was sent: the filter "
                    f"makes {line.strip()[:60]!r} of it: {problem}"
                )
    except (AgentError, ValueError) as exc:
        if isinstance(exc, ProgramRefused):
            raise
        raise ProgramRefused(
            f"refused before streaming, nothing was sent: the filter refuses the program: {exc}"
        ) from None


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


@contextlib.contextmanager
def _ending_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP end the stream through the streamer (StreamInterrupt), which
    stops the machine; a second signal during that stop is ignored, so the stop completes.
    The previous handlers come back after the block (the CLI also runs inside test
    processes)."""
    from agent.feedrate.streaming.session import StreamInterrupt

    fired: list[int] = []

    def end(signum: int, frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        raise StreamInterrupt(signum, END_SIGNALS.get(signum, f"signal {signum}"))

    previous = {sig: signal.signal(sig, end) for sig in END_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _cmd_stream(args: argparse.Namespace) -> int:
    from agent.feedrate.streaming.session import StreamInterrupt

    try:
        with _ending_signals():
            return _stream(args)
    except (StreamInterrupt, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, StreamInterrupt) else signal.SIGINT
        raise Interrupted(
            f"feedrate stream: ended by {END_SIGNALS.get(signum, signum)} before the first "
            "line was sent; the controller was not touched",
            signum,
        ) from None


def _stream(args: argparse.Namespace) -> int:
    from collections import deque

    from agent.cli.feedrate.control import hold_signals, pid_file
    from agent.feedrate.gcode.dialect import DIALECTS
    from agent.feedrate.streaming.session import StreamControl, StreamError

    driver, machine = _stream_target(args)
    settings = driver.settings
    machine = _with_lookahead(machine, settings)
    unfiltered = args.no_filter or not settings.filter.enabled
    source = "<stdin>" if args.input == "-" else args.input
    if args.input != "-" and Path(args.input).is_file():  # a pipe is checked as it streams
        # The controller is the judge of a line: GRBL by its own g-code list, whatever the
        # machine file's dialect says about number formats.
        target = DIALECTS["grbl"] if settings.protocol == "grbl" else machine.emitter_dialect
        limit = settings.max_line_chars
        if settings.protocol == "grbl":
            limit = min(limit or 79, settings.rx_buffer_bytes - 1)
        _refuse_bad_lines(args.input, target, limit)
    if not unfiltered:  # the filter's imports (scipy) take seconds: only when it is used
        from agent.feedrate.filter.program import filtered_lines_with_origin
        from agent.feedrate.filter.toolpath_filter import FeedrateFilter

        if args.input != "-" and Path(args.input).is_file():
            _refuse_what_the_filter_refuses(args.input, machine)
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
        if unfiltered or exc.line_no is None or exc.kind == "input":
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
            exit_code=exc.exit_code,
        ) from exc
    finally:
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
