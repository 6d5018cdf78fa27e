"""`jha cycle now` and `jha status`: ask the running daemon, over its control socket."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from agent.cli.common import DEFAULT_CONFIG, print_json
from agent.errors import EX_OK, EX_UNAVAILABLE
from agent.service.control_socket import ControlCommand, ControlError, request, socket_path

# Where the packaged unit keeps its socket (systemd/joint-health-agent.service).
DEFAULT_RUNTIME_SOCKET = Path("/run/joint-health-agent/control.sock")


def _socket(args: argparse.Namespace) -> Path:
    if args.socket is not None:
        return Path(args.socket)
    if os.environ.get("RUNTIME_DIRECTORY"):
        return socket_path(".", None)
    config_file = args.config
    if config_file is None and DEFAULT_CONFIG.exists():
        config_file = DEFAULT_CONFIG
    if config_file is not None:
        from agent.config.load import load_config

        config = load_config(config_file)
        if DEFAULT_RUNTIME_SOCKET.exists() and config_file == DEFAULT_CONFIG:
            return DEFAULT_RUNTIME_SOCKET
        return socket_path(config.agent.state_dir, config.agent.control_socket)
    return DEFAULT_RUNTIME_SOCKET


def _ask(args: argparse.Namespace, payload: dict[str, Any]) -> dict[str, Any] | int:
    try:
        return request(_socket(args), payload)
    except ControlError as exc:
        print(f"jha: {exc}", file=sys.stderr, flush=True)
        return EX_UNAVAILABLE


def _cmd_cycle_now(args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {"cmd": ControlCommand.CYCLE_NOW, "controller": args.controller}
    if args.identification:
        payload["identification"] = True  # only when asked: an older daemon knows no such key
    else:
        payload["joint"] = args.joint
    reply = _ask(args, payload)
    if isinstance(reply, int):
        return reply
    if args.json:
        print_json(reply)
    if not reply.get("ok"):
        if not args.json:
            print(f"jha: {reply.get('error', 'refused')}", file=sys.stderr)
        return EX_UNAVAILABLE
    if not args.json:
        joints = ", ".join(reply.get("queued", []))
        kind = " (identification, every joint)" if args.identification else ""
        print(f"{args.controller}: {joints}{kind}: {reply.get('message', 'queued')}")
    return EX_OK


def _cmd_status(args: argparse.Namespace) -> int:
    reply = _ask(args, {"cmd": ControlCommand.STATUS})
    if isinstance(reply, int):
        return reply
    if args.json or not reply.get("ok"):
        print_json(reply)
        return EX_OK if reply.get("ok") else EX_UNAVAILABLE
    print(f"agent: {reply.get('state')}{' (dry run)' if reply.get('dry_run') else ''}")
    for name, c in reply.get("controllers", {}).items():
        print(f"  {name}: {c.get('state')} (mode {c.get('mode')})")
        for p in c.get("pending", []):
            print(f"    queued {p['joint']} {p['kind']} ({p['reason']}, ~{p['estimate_s']:.1f} s)")
    return EX_OK


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="the daemon's config (to find its socket)")
    p.add_argument("--socket", type=Path, help="the control socket (overrides --config)")
    p.add_argument("--json", action="store_true")


def register(sub: Any) -> None:
    """Add `cycle now` and `status` to the `jha` parser's sub-parsers."""
    cycle = sub.add_parser("cycle", help="ask the running agent for cycles").add_subparsers(
        dest="cycle_command", required=True
    )
    now = cycle.add_parser(
        "now", help="queue a cycle now (it still waits for a production stop and the interlocks)"
    )
    now.add_argument("--controller", required=True)
    which = now.add_mutually_exclusive_group()
    which.add_argument("--joint", help="one joint (default: every joint of the controller)")
    which.add_argument(
        "--identification",
        action="store_true",
        help="the whole-robot identification cycle (the controller's identification: section) "
        "instead of backlash cycles",
    )
    _common(now)
    now.set_defaults(func=_cmd_cycle_now)

    status = sub.add_parser("status", help="what the running agent is doing, and its queue")
    _common(status)
    status.set_defaults(func=_cmd_status)
