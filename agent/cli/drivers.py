"""`jha drivers`: the installed driver plugins and the capabilities each declares."""

from __future__ import annotations

import argparse
from typing import Any

from agent.errors import EX_OK


def register(subparsers: Any) -> None:
    """Add `drivers` to the `jha` parser's sub-parsers."""
    drv = subparsers.add_parser("drivers", help="installed drivers and what they can do")
    drv.set_defaults(func=_cmd_drivers)


def _cmd_drivers(args: argparse.Namespace) -> int:
    from drivers.base import (
        Capability,
        available_drivers,
        install_hint,
        load_driver_class,
        missing_modules,
    )

    rows = [("DRIVER", "ENTRY POINT", "CAPABILITIES")]
    for name, ep in sorted(available_drivers().items()):
        try:
            cls = load_driver_class(name)
            caps = cls.capabilities
            missing = missing_modules(cls)
            text = (
                install_hint(name, missing[0])
                if missing
                else (
                    ", ".join(
                        (c.name or "").lower()
                        for c in Capability
                        if c is not Capability.NONE and c in caps
                    )
                    or "none"
                )
            )
        except Exception as exc:  # a broken plugin is listed, not fatal
            text = f"cannot load: {exc}"
        rows.append((name, ep.value, text))
    widths = [max(len(r[k]) for r in rows) for k in range(2)]
    for name, entry, text in rows:
        print(f"{name:{widths[0]}}  {entry:{widths[1]}}  {text}")
    return EX_OK
