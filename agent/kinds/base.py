"""What every cycle kind implements, and the job that carries one cycle from trigger to record.

A kind builds its cycle from the config, analyses the capture in the process pool and records
the outcome; the daemon dispatches by `cycle.kind` through agent.kinds.registry. The daemon's
own process stays light (the idle service must fit in 120 MB): the estimators, scipy and the
report renderer are imported only by the functions that run in the pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agent.config.model import ControllerSettings, JointSettings
from agent.errors import EstimationError
from agent.history.records import Outcome, Trigger
from drivers.base import Cycle

if TYPE_CHECKING:
    from agent.history.store import HistoryStore
    from agent.report.model import JointReport


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%S_%fZ")


class AnalysisRefused(EstimationError):
    """The capture was measured but cannot be trusted (the identification's saturation, poor
    excitation, missing channel): recorded as a refusal with its reason, never as data.
    Defined here, not in the estimator, so that the daemon can receive it from the pool without
    importing the estimators."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[AnalysisRefused], tuple[str, str]]:
        # process pools pickle exceptions through their constructor arguments
        return (type(self), (self.reason, str(self)))


@dataclass
class JointJob:
    """One cycle, from the trigger to the record: of one joint, or (joint None) of the whole
    robot, as the identification cycle is."""

    controller: ControllerSettings
    joint: JointSettings | None
    cycle: Cycle
    started_at: dt.datetime
    capture_path: Path | None = None
    error: str | None = None
    outcome: Outcome = Outcome.OK
    result: object = None  # the kind's own result (BacklashResult, IdentificationAnalysis)
    trigger: Trigger | None = None
    cycle_id: int | None = None  # its row in the history, once recorded
    # Its motion's record until something else speaks for it (agent.service.motion_intents).
    intent_path: Path | None = None
    # Not sent to the pool with the job (a future does not pickle): see for_pool().
    analysis: asyncio.Future[Any] | None = field(default=None, compare=False)

    @property
    def joint_name(self) -> str:
        """The joint's name; the cycle's ("all") for a whole-robot cycle."""
        return self.cycle.joint if self.joint is None else self.joint.name

    def for_pool(self) -> JointJob:
        return replace(self, analysis=None)


@dataclass
class AnalysisContext:
    """What a kind's analysis may use: the daemon's pool (made on first use) and state dir."""

    state_dir: Path
    pool: Callable[[], concurrent.futures.Executor]
    cache: dict[str, Any] = field(default_factory=dict)


class KindHandler(Protocol):
    """How the daemon runs one kind of cycle (drivers.base.CycleKind names the kinds)."""

    @property
    def name(self) -> str: ...

    def make_cycle(
        self, ctx: AnalysisContext, ctrl: ControllerSettings, joint: JointSettings | None
    ) -> Cycle | None:
        """The cycle to run; None while it cannot be made yet (a trajectory being designed in
        the pool). On the event loop: must not block."""

    def needs_s(self, ctrl: ControllerSettings, joint: JointSettings | None) -> float:
        """How long the cycle keeps the machine (settle + duration), known before the cycle is
        made: what a stop must hold (the margin comes on top)."""

    def save(self, capture: object, path: Path) -> None:
        """Write the capture atomically (blocking: the daemon calls it in a thread)."""

    async def analyse(self, ctx: AnalysisContext, job: JointJob, capture: object) -> Any:
        """The job's result, computed in the pool; AnalysisRefused for a capture the estimator
        cannot trust."""

    def record(self, store: HistoryStore, job: JointJob) -> list[int]:
        """Write the job's outcome (and estimates and verdict) to the history; in the pool.
        Returns the ids of the rows written (none for a dry run)."""

    def joint_reports(self, store: HistoryStore, job: JointJob) -> list[JointReport]:
        """The job's part of the report, one entry per joint; in the pool."""


def estimate_s(cycle: Cycle) -> float:
    """How long the cycle keeps the machine: what a stop must hold (the margin comes on top)."""
    return cycle.settle_s + cycle.duration_s
