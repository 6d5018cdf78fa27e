"""Typed errors, each mapped to a sysexits-style exit code by the CLI."""

from __future__ import annotations

from typing import Any

# sysexits.h: what the CLI returns for each kind of failure.
EX_OK = 0
EX_USAGE = 64
EX_DATAERR = 65
EX_NOINPUT = 66  # an input file, or the history a command reads, does not exist
EX_UNAVAILABLE = 69  # the daemon or the stream asked for cannot be reached
EX_SOFTWARE = 70
EX_CANTCREAT = 73  # a capture, record or report could not be saved
EX_IOERR = 74
EX_TEMPFAIL = 75  # try again later: another agent holds the state directory
EX_NOPERM = 77  # refused before motion (interlock, travel limit)
EX_CONFIG = 78


class AgentError(Exception):
    """Base of every error the agent raises on purpose."""

    exit_code = EX_SOFTWARE


class ConfigError(AgentError):
    """The configuration file is invalid; the message lists every mistake with file:line."""

    exit_code = EX_CONFIG


class CaptureError(AgentError):
    """A capture (file or stream) cannot be used: the message names the source and the problem."""

    exit_code = EX_DATAERR

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


class InputMissing(CaptureError):
    """An input file named on the command line (or in a config) does not exist."""

    exit_code = EX_NOINPUT


def unreadable(source: str, exc: OSError) -> CaptureError:
    """The error for an input that cannot be opened: InputMissing (exit 66) when it does not
    exist, else a CaptureError (65) with the system's reason."""
    if isinstance(exc, FileNotFoundError):
        return InputMissing(source, "no such file")
    return CaptureError(source, f"cannot read: {exc.strerror or exc}")


class EstimationError(AgentError):
    """An estimator was given data it cannot fit (too short, constant, wrong period...)."""

    exit_code = EX_DATAERR


class DriverError(AgentError):
    """The controller could not be reached or answered something unexpected."""

    exit_code = EX_IOERR


class InterlockError(AgentError):
    """A safety interlock does not hold: no motion was started (or motion was stopped)."""

    exit_code = EX_SOFTWARE


class TravelRefused(InterlockError):
    """The cycle's whole travel does not fit the joint's limits (or they are unknown): refused
    before motion. It will be refused again until the config or the cycle changes."""


class CycleAborted(AgentError):
    """A running test cycle was aborted and the motion stopped; the capture is not used.

    `standstill` is what the check after the stop found (agent.service.standstill.Standstill),
    when the guarded path made one."""

    exit_code = EX_SOFTWARE
    standstill: Any = None
