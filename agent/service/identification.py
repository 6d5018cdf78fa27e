"""A controller runner's part of the identification cycle: when it is queued, its trajectory
design in the pool, and keeping an undesigned one out of a stop's plan.

The cycle kind itself (design, analysis, records, report) is agent.kinds.identification.kind.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from pathlib import Path

from agent.config.identification import IdentificationCycleSettings
from agent.config.model import ControllerSettings
from agent.config.schedule import Schedule, schedule_of
from agent.history.records import Outcome, Trigger
from agent.kinds.base import AnalysisContext, utcnow
from agent.kinds.identification.kind import ALL_JOINTS, KIND, IdentificationKind
from agent.logfmt import kv
from agent.service.queue import CycleQueue, PendingCycle
from agent.service.triggers import ScheduleState, schedule_due
from drivers.base import Capability

log = logging.getLogger(__name__)


def last_identification_age_s(state_dir: Path, ctrl: ControllerSettings) -> float | None:
    """Seconds since the controller's last successful identification in the history (None:
    none, or no history yet). Blocking: run it in a thread."""
    from agent.history.store import HistoryStore

    path = state_dir / "history.sqlite"
    if not path.exists():
        return None  # a read never creates the daemon's database
    with HistoryStore(path) as store:
        found = [
            rec.started_at
            for j in ctrl.joints
            if (rec := store.latest(ctrl.name, j.name, outcome=Outcome.OK, kind=KIND)) is not None
        ]
    if not found:
        return None
    last = max(dt.datetime.fromisoformat(t) for t in found)
    if last.tzinfo is None:
        last = last.replace(tzinfo=dt.UTC)
    return max(0.0, (utcnow() - last).total_seconds())


class IdentificationCadence:
    """identification.every_s (inside identification.window), counted from when the last one
    was queued; after a (re)start from the last successful one in the history (seed())."""

    def __init__(self, settings: IdentificationCycleSettings) -> None:
        self._schedule: Schedule | None = (
            None
            if settings.every_s is None
            else schedule_of(settings.every_s, None, settings.window)
        )
        self._state = ScheduleState()

    @property
    def active(self) -> bool:
        return self._schedule is not None

    def seed(self, age_s: float | None, now_s: float) -> None:
        """The last success was `age_s` ago (None: never): the next one is due every_s after."""
        if age_s is not None:
            self._state = ScheduleState(last_fired_s=now_s - age_s)

    def due(self, now_s: float, now_local: dt.datetime) -> bool:
        if self._schedule is None:
            return False
        fire, self._state = schedule_due(self._schedule, self._state, now_s, now_local)
        return fire


class RunnerIdentification:
    """What a controller's runner (agent.service.runner) does for the identification: its
    cadence, the design in the pool, the queue entry, and keeping an undesigned one out of a
    stop's plan."""

    def __init__(
        self,
        ctrl: ControllerSettings,
        kind: object,
        ctx: AnalysisContext,
        on_design_done: Callable[[], None],
    ) -> None:
        self.ctrl = ctrl
        self.kind = kind if isinstance(kind, IdentificationKind) else None
        self.ctx = ctx
        self.on_design_done = on_design_done
        ident = ctrl.identification
        self.cadence = None if ident is None else IdentificationCadence(ident)
        self.capabilities: Capability | None = None  # the driver's, once it is made

    def request(self, reason: Trigger, streaming_only: bool) -> PendingCycle:
        """The queue entry of an identification (its design starts in the pool now); ValueError
        when this controller cannot run one."""
        ctrl, kind = self.ctrl, self.kind
        if streaming_only:
            raise ValueError(f"controller {ctrl.name} runs no test cycles (streaming only)")
        if ctrl.identification is None:
            raise ValueError(f"controller {ctrl.name} has no identification: section")
        if self.capabilities is not None and Capability.EXCITATION not in self.capabilities:
            raise ValueError(
                f"controller {ctrl.name}: driver {ctrl.driver!r} cannot run an identification "
                f"cycle (no Capability.{Capability.EXCITATION.name})"
            )
        if kind is None:
            raise ValueError("this agent has no identification cycle kind")
        kind.retry_failed_design(self.ctx, ctrl)
        design = kind.design(self.ctx, ctrl)
        error = kind.design_error(self.ctx, ctrl)
        if error is not None:
            raise ValueError(f"controller {ctrl.name}: the excitation cannot be designed: {error}")
        if not design.done():  # a finished design must not re-open a stop already used
            design.add_done_callback(lambda _: self.on_design_done())
        return PendingCycle(
            ALL_JOINTS, KIND, time.monotonic(), reason, kind.needs_s(ctrl, None),
            order=len(ctrl.joints),
        )  # fmt: skip

    async def seed(self, capabilities: Capability, state_dir: Path) -> None:
        """After connecting: a driver without the capability turns the cadence off; otherwise
        it goes on from the history's last success (a restart does not repeat it)."""
        self.capabilities = capabilities
        if self.cadence is None:
            return
        if Capability.EXCITATION not in capabilities:
            log.warning(kv("identification_unsupported", controller=self.ctrl.name,
                           driver=self.ctrl.driver))  # fmt: skip
            self.cadence = None
            return
        try:
            age_s = await asyncio.to_thread(last_identification_age_s, state_dir, self.ctrl)
        except Exception as exc:  # an unreadable history only costs an early identification
            log.warning(kv("identification_history_unreadable", error=str(exc)))
            age_s = None
        self.cadence.seed(age_s, time.monotonic())

    def due(self) -> bool:
        return self.cadence is not None and self.cadence.due(time.monotonic(), dt.datetime.now())

    def plannable(self, queue: CycleQueue) -> tuple[CycleQueue, CycleQueue]:
        """(the queue to keep, the part of it a stop may plan): an identification waits out of
        the plan while its trajectory is designed; one that cannot be designed with this config
        is dropped (logged; a reload may fix it)."""
        if self.kind is None or not any(p.kind == KIND for p in queue.items):
            return queue, queue
        if self.kind.make_cycle(self.ctx, self.ctrl, None) is not None:
            return queue, queue
        without = queue.remove(ALL_JOINTS, KIND)
        error = self.kind.design_error(self.ctx, self.ctrl)
        if error is None:
            return queue, without
        log.error(kv("identification_dropped", controller=self.ctrl.name, error=error))
        return without, without
