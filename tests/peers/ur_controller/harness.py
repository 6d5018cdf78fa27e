"""What the UR driver's tests share: the agent config they write and the emulator they start.

The config is a UR5e-like wrist joint (100:1, 40 motor rev/s, i.e. 2.5 rad/s at the joint, two load
turns); the emulator carries the same joint's physics (Giovannitti et al. 2022's model) with a known
backlash and seed, so a capture can be compared sample for sample with the simulated fake.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from agent.config.load import load_config
from agent.config.model import ControllerSettings, JointSettings
from drivers.ur_rtde.settings import UrRtdeSettings
from tests.peers.ur_controller import UrEmulator, free_host

T = TypeVar("T")
SEED = 7
BACKLASH_RAD = 1.2e-3
FAST = {"return_to_start": "false"}
# For the tests whose subject is not lost packages, the default of `setup`: the longest run the
# driver may bridge and a generous count per cycle, so packages a loaded machine loses (runs of
# 3-5 seen, idle too) do not end the cycle before the fault or the stop the test plays. Every
# bridged package is still counted in the capture.
BRIDGE_LOSSES = {"gap_fill_max_run": 5, "gap_fill_max_per_cycle": 100}
# The driver's words when it rightly refuses a capture the machine's load spoiled: a run of
# packages every receive path lost (longer than it bridges, or right where the motion starts), or
# the stream frozen for stale_after_s. Even idle, a 2-core host running the emulator, the worker's
# two paths and pytest lost 6 packages in a row once in five `make test` runs, and 1 package at a
# motion's start once. That refusal is test_driver.py's subject; a test whose subject comes later
# in the cycle runs it again on a fresh emulator (`ended_by_load`, at most LOAD_ATTEMPTS runs).
MISSED = "package(s) missed"
LOAD_ABORTS = (MISSED, "RTDE data stale: no new package", "RTDE packages stopped")
LOAD_ATTEMPTS = 3


def ended_by_load(message: str) -> bool:
    """Whether a cycle's abort message is the driver refusing data the machine's load spoiled."""
    return any(words in message for words in LOAD_ABORTS)


# The driver's own defaults, stated by the tests whose subject is the handling of lost packages.
_DEFAULTS = UrRtdeSettings(host="0.0.0.0")
DRIVER_LOSSES = {
    "gap_fill_max_run": _DEFAULTS.gap_fill_max_run,
    "gap_fill_max_per_cycle": _DEFAULTS.gap_fill_max_per_cycle,
}


def config_text(host: str, **settings: Any) -> str:
    """The agent config of one UR controller `ur5e` with the joint `wrist1` (index 4)."""
    base = {
        "host": host,
        "rt_priority": 20,
        "move_speed_rad_s": 3.0,
        "move_acceleration_rad_s2": 20.0,
        "reconnect_backoff_s": 0.2,
        **settings,
    }
    lines = "".join(f"      {k}: {v}\n" for k, v in base.items())
    return f"""\
controllers:
  - name: ur5e
    driver: ur_rtde
    settings:
{lines}    joints:
      - name: wrist1
        index: 4
        gear_ratio: 100
        encoder_bits: 19
        test_pose_rad: 0.0
        # The emulator's physics joint turns without end; a real UR5e wrist (+-2 pi) cannot
        # take this 2-turn cycle and refuses it (tests/service/test_travel_limits.py).
        position_min_rad: -30.0
        position_max_rad: 30.0
        backlash_cycle:
          motor_speed_rps: 40
          load_turns: 2
          sample_rate_hz: 500
          settle_s: 0.3
"""


def setup(tmp_path: Path, **settings: Any) -> tuple[str, Path, ControllerSettings, JointSettings]:
    """A free 127.0.0.N, the config written for it, its controller and joint.

    Lost packages are bridged (BRIDGE_LOSSES) unless `settings` say otherwise (DRIVER_LOSSES).
    """
    host = free_host()
    path = tmp_path / "ur.yaml"
    path.write_text(config_text(host, **{**BRIDGE_LOSSES, **settings}))
    ctrl = load_config(path).controllers[0]
    return host, path, ctrl, ctrl.joints[0]


def emulator_args(config: Path) -> list[str]:
    """The physics joint of `config`, and a real-time controller cycle like a real controller."""
    return [
        *("--config", str(config), "--controller", "ur5e", "--joint", "wrist1"),
        *("--backlash", str(BACKLASH_RAD), "--seed", str(SEED), "--rt-priority", "30"),
    ]


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def wait_until(emu: UrEmulator, pred: Any, timeout_s: float = 5.0) -> dict[str, Any]:
    """The emulator's state once `pred(state)` holds, or the last one after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = emu.state()
        if pred(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.02)
