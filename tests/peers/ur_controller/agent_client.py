"""The agent's side of the UR kill and hang tests: one guarded cycle through UrRtdeDriver in a
process of its own, which the test SIGKILLs mid-capture (docs/safety.md, G6) or whose event loop
it hangs (G7).

    python -m tests.peers.ur_controller.agent_client --config FILE --controller N --joint J \
        [--hang-s S[,S...]] [--excitation]

Prints JSON lines: {"event": "connected", "pid", "worker_pid"} once the driver's worker is up,
then, if it lives that long, {"event": "outcome", "outcome": "ok" | "aborted" | "refused",
"error", "samples"} (samples: the length of the capture the cycle returned, 0 without one).
With --excitation the cycle is the controller's identification excitation
(tests/peers/ur_controller/excitation.py) instead of the joint's backlash cycle.

The worker is a child of this process in the same process group, so killing the group kills
the agent and its worker at once, as systemd's final SIGKILL or an OOM kill of the whole unit
does.

With --hang-s, each SIGUSR1 makes the event loop run a callback that blocks it for the next of
the listed seconds (a time.sleep, the bug under test: a blocking call on the loop); it prints
{"event": "hang_start", "t"} and {"event": "hang_end", "t"} with time.monotonic() (one clock for
every process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time

from agent.config.load import load_config
from agent.config.model import JointSettings
from agent.errors import CycleAborted, DriverError, InterlockError
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from drivers.base import Cycle
from drivers.ur_rtde.driver import UrRtdeDriver
from tests.peers.ur_controller.excitation import excitation_cycle


def emit(event: dict[str, object]) -> None:
    print(json.dumps(event), flush=True)


def hang(durations_s: list[float]) -> None:
    """Block the event loop: nothing on it runs, neither the interlock watcher nor the beats."""
    if not durations_s:
        return
    emit({"event": "hang_start", "t": time.monotonic()})
    time.sleep(durations_s.pop(0))
    emit({"event": "hang_end", "t": time.monotonic()})


async def run(args: argparse.Namespace) -> None:
    if args.hang_s:
        durations_s = [float(x) for x in args.hang_s.split(",")]
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, hang, durations_s)
    config = load_config(args.config)
    ctrl = next(c for c in config.controllers if c.name == args.controller)
    driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
    await asyncio.wait_for(driver.connect(), 20.0)
    emit({"event": "connected", "pid": os.getpid(), "worker_pid": driver.worker_pid})
    outcome: dict[str, object] = {"event": "outcome", "outcome": "ok", "error": None, "samples": 0}
    try:
        cycle: Cycle
        joint: JointSettings | None = None
        if args.excitation:
            cycle = excitation_cycle(ctrl)
        else:
            joint = next(j for j in ctrl.joints if j.name == args.joint)
            cycle = backlash_cycle(ctrl, joint)
        got = await asyncio.wait_for(run_guarded_cycle(driver, cycle, ctrl.interlocks, joint), 60.0)
        outcome["samples"] = len(got)
    except (CycleAborted, DriverError) as exc:
        outcome.update(outcome="aborted", error=str(exc))
    except InterlockError as exc:
        outcome.update(outcome="refused", error=str(exc))
    finally:
        await driver.close()
    emit(outcome)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--controller", required=True)
    parser.add_argument("--joint", required=True)
    parser.add_argument("--excitation", action="store_true", help="the identification cycle")
    parser.add_argument("--hang-s", default="", help="S[,S...]: each SIGUSR1 blocks the loop S s")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
