"""The cycle kinds the daemon knows, by name: how to build, analyse and record each cycle.

A kind is added here, once; the daemon, the recovery of orphaned captures and the recording
look kinds up by `cycle.kind` and know none of them by name.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.kinds.backlash.kind import BacklashKind
from agent.kinds.base import KindHandler
from agent.kinds.identification.kind import IdentificationKind

KINDS: dict[str, Callable[[], KindHandler]] = {
    BacklashKind.name: BacklashKind,
    IdentificationKind.name: IdentificationKind,
}


def all_kinds() -> dict[str, KindHandler]:
    """One instance of every kind, by name."""
    return {name: make() for name, make in KINDS.items()}
