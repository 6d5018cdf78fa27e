"""The agent's side of the UR kill tests: one guarded cycle through UrRtdeDriver in a process of
its own, which the test SIGKILLs mid-capture (docs/safety.md, G6).

    python -m tests.peers.ur_controller.agent_client --config FILE --controller N --joint J

Prints JSON lines: {"event": "connected", "pid", "worker_pid"} once the driver's worker is up,
then, if it lives that long, {"event": "outcome", "outcome": "ok" | "aborted" | "refused",
"error"}. The worker is a child of this process in the same process group, so killing the
group kills the agent and its worker at once, as systemd's final SIGKILL or an OOM kill of the
whole unit does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from agent.config import load_config
from agent.cycles import backlash_cycle, run_guarded_cycle
from agent.errors import CycleAborted, DriverError, InterlockError
from drivers.ur_rtde import UrRtdeDriver


def emit(event: dict[str, object]) -> None:
    print(json.dumps(event), flush=True)


async def run(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    ctrl = next(c for c in config.controllers if c.name == args.controller)
    joint = next(j for j in ctrl.joints if j.name == args.joint)
    driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
    await asyncio.wait_for(driver.connect(), 20.0)
    emit({"event": "connected", "pid": os.getpid(), "worker_pid": driver.worker_pid})
    outcome: dict[str, object] = {"event": "outcome", "outcome": "ok", "error": None}
    try:
        cycle = backlash_cycle(ctrl, joint)
        await asyncio.wait_for(run_guarded_cycle(driver, cycle, ctrl.interlocks, joint), 60.0)
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
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
