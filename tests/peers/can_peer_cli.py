"""Command line and event output shared by the CAN peers (socketcand, udp_multicast)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

from agent.config.load import load_config
from drivers.can.dbc import load_protocol
from drivers.can.settings import CanSettings

from .can_controller import FAULT_KINDS, MODE_CODES, Controller, Fault


def parse_fault(text: str) -> Fault:
    """'drop@1:200x3' -> Fault('drop', 1, 200, 3)."""
    try:
        kind, _, rest = text.partition("@")
        where, _, count = rest.partition("x")
        cycle, _, sample = where.partition(":")
        fault = Fault(kind, int(cycle), int(sample), int(count) if count else None)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected kind@cycle:sample[xcount], got {text!r}"
        ) from None
    if fault.kind not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(f"fault kind must be one of {FAULT_KINDS}, got {kind!r}")
    return fault


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="the agent's YAML (joints, DBC)")
    parser.add_argument("--controller", required=True)
    parser.add_argument("--backlash", action="append", default=[], metavar="JOINT=RAD")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=1.0, help="encoder noise, counts")
    parser.add_argument("--bitrate", type=int, default=1_000_000)
    parser.add_argument("--status-period", type=float, default=0.02)
    parser.add_argument("--watchdog", type=float, default=0.5)
    parser.add_argument("--mode", choices=sorted(MODE_CODES), default="stopped")
    parser.add_argument("--no-permission", action="store_true")
    parser.add_argument("--fault", type=parse_fault, action="append", default=[])


def controller_from_args(args: argparse.Namespace) -> Controller:
    config = load_config(args.config)
    ctrl = next(c for c in config.controllers if c.name == args.controller)
    settings = ctrl.settings
    if not isinstance(settings, CanSettings):
        raise SystemExit(f"controller {args.controller} is not a can controller")
    truth = {k: float(v) for k, _, v in (b.partition("=") for b in args.backlash)}
    return Controller(
        load_protocol(settings.dbc, settings.messages),
        ctrl.joints,
        backlash=truth,
        seed=args.seed,
        noise_counts=args.noise,
        bitrate=args.bitrate,
        status_period_s=args.status_period,
        watchdog_s=args.watchdog,
        faults=tuple(args.fault),
        mode=args.mode,
        permission=not args.no_permission,
        emit=emit_json,
    )


_emit_lock = threading.Lock()


def emit_json(event: dict[str, Any]) -> None:
    """Events on stdout, one JSON object a line: what the tests watch."""
    with _emit_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()
