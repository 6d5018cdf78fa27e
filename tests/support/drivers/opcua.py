"""The OPC UA peer controller (tests/peers/opcua) as the driver's tests and the fault tests
use it: a peer process with a known backlash and seed, a controller config pointed at it, a
guarded cycle through the driver, and the same cycle on the simulated fake."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import CycleLimits, run_guarded_cycle
from drivers.base import BacklashCycle
from drivers.opcua.driver import OpcUaDriver
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointSettings, SimSettings
from tests.peers.opcua.harness import PeerProcess

T = TypeVar("T")
SEED = 7
BACKLASH_RAD = 1.2e-3
SPEEDUP = "25"  # the peer publishes 25x faster than real time: a 4.8 s capture takes 0.2 s


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 40.0) -> T:
    """Every async test body runs under a timeout, so a hang fails instead of blocking."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


def start_peer(config: Path, tmp_path: Path, *extra: str, port: int = 0) -> PeerProcess:
    peer = PeerProcess(
        config,
        [
            "--backlash",
            f"axis4={BACKLASH_RAD}",
            "--seed",
            str(SEED),
            "--speedup",
            SPEEDUP,
            "--chunk-samples",
            "100",
            *extra,
        ],
        port=port,
        log=tmp_path / "peer.log",
    )
    peer.start()
    return peer


def controller(config: Path, endpoint: str, **changes: Any) -> ControllerSettings:
    ctrl = load_config(config).controllers[0]
    return dataclasses.replace(
        ctrl, settings=dataclasses.replace(ctrl.settings, endpoint=endpoint, **changes)
    )


def driver_for(ctrl: ControllerSettings) -> OpcUaDriver:
    return OpcUaDriver(ctrl.name, ctrl.settings, ctrl.joints)


async def guarded(driver: OpcUaDriver, ctrl: ControllerSettings) -> Any:
    joint = ctrl.joints[0]
    return await run_guarded_cycle(
        driver,
        backlash_cycle(ctrl, joint),
        ctrl.interlocks,
        joint,
        CycleLimits(status_timeout_s=2.5, overrun_margin_s=5.0),
    )


def sim_capture(ctrl: ControllerSettings, cycle: BacklashCycle) -> Any:
    sim = SimDriver(
        ctrl.name,
        SimSettings(seed=SEED, joints={"axis4": SimJointSettings(backlash_rad=BACKLASH_RAD)}),
        ctrl.joints,
    )

    async def go() -> Any:
        await sim.connect()
        return await sim.run_cycle(cycle)

    return run(go())
