"""`jha feedrate stop`: leave a GRBL controller with nothing to run, whoever streamed to it.

GRBL has no host watchdog: when the streamer dies (kill -9, the OOM killer, a lost session),
what it had sent runs on, about a second of buffered motion, and the spindle stays on. This
command opens the port itself and does what a stream that ends early does
(agent.feedrate.streaming.stop): feed hold, wait for standstill, soft reset (which also stops
spindle and coolant). systemd/jha-stream@.service runs it as ExecStopPost=, after any end of
the streamer, SIGKILL included; with --unless-succeeded it does nothing after a stream that
ended well ($SERVICE_RESULT=success, set by systemd), so the last moves of a finished program
are never cut off.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from agent.errors import EX_OK, EX_UNAVAILABLE, AgentError, ConfigError


class ControllerNotStopped(AgentError):
    """The port could not be opened or the feed hold not written: stop it at the machine."""

    exit_code = EX_UNAVAILABLE


def register(group: Any) -> None:
    """Add `stop` to the `jha feedrate` command group."""
    cmd = group.add_parser(
        "stop",
        help="feed hold, standstill and soft reset of a GRBL controller (after a streamer died)",
    )
    cmd.add_argument("--config", type=Path, help="the agent's config file")
    cmd.add_argument("--controller", help="the CNC's controller name in --config")
    cmd.add_argument("--port", help="serial device or pty path (without --config)")
    cmd.add_argument("--baudrate", type=int, default=None, help="without --config")
    cmd.add_argument("--hold-timeout-s", type=float, default=5.0)
    cmd.add_argument(
        "--unless-succeeded",
        action="store_true",
        help="do nothing when systemd says the stream ended well ($SERVICE_RESULT=success)",
    )
    cmd.set_defaults(func=_cmd_stop)


def _port(args: argparse.Namespace) -> tuple[str, int]:
    if args.config is not None or args.controller is not None:
        if args.config is None or args.controller is None:
            raise ConfigError("feedrate stop: --config and --controller go together")
        if args.port is not None or args.baudrate is not None:
            raise ConfigError(
                "feedrate stop: --port and --baudrate cannot be combined with --config"
            )
        from agent.cli.feedrate.stream import configured_target

        driver, _ = configured_target(args.config, args.controller)
        return driver.settings.port, driver.settings.baudrate
    if args.port is None:
        raise ConfigError("feedrate stop: give --config FILE --controller NAME, or --port PATH")
    return args.port, args.baudrate or 115_200


def _cmd_stop(args: argparse.Namespace) -> int:
    from agent.feedrate.streaming.serial_channel import ChannelLost, open_serial
    from agent.feedrate.streaming.session import Session
    from agent.feedrate.streaming.stop import stop_grbl

    result = os.environ.get("SERVICE_RESULT")
    if args.unless_succeeded and result == "success":
        print("feedrate stop: the stream ended well (SERVICE_RESULT=success): nothing to stop")
        return EX_OK
    port, baudrate = _port(args)
    try:
        channel = open_serial(port, baudrate)
    except ChannelLost as exc:
        raise ControllerNotStopped(
            f"feedrate stop: {exc}: the controller may still run what it holds; stop it at "
            "the machine (feed hold, then reset)"
        ) from None
    try:
        session = Session(channel, None, None, port, 0.1)
        if not session.send_realtime(b"?"):  # a status query first: harmless, and it tells
            raise ControllerNotStopped(  # whether anything can be written at all
                f"feedrate stop: nothing can be written to {port}: stop the machine at the "
                "controller (feed hold, then reset)"
            )
        note = stop_grbl(session, args.hold_timeout_s, 0.05, 2.0, whatever_was_sent=True)
    finally:
        channel.close()
    why = "" if result is None else f" (the stream ended: {result})"
    print(f"feedrate stop {port}{why}: {note}")
    return EX_OK
