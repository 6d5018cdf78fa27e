"""The agent's side of a kill test: one guarded cycle through any driver, in its own process.

    python -m tests.peers.driver_client --config CFG.yaml --controller NAME --joint JOINT

The driver comes from the controller's `driver:` (the entry point the daemon uses). Prints
`CONNECTED` once the driver is connected, then one JSON line with the outcome: {"outcome": "ok"
| "aborted" | "refused", "error": ..., "samples": N}. A test kills this process with SIGKILL
mid-capture and checks that the controller peer stops the motion by itself (its watchdog), as
nothing is left to send a stop.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from agent.config.load import load_config
from agent.errors import CycleAborted, InterlockError
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from drivers.base import load_driver_class


async def run(args: argparse.Namespace) -> dict[str, object]:
    config = load_config(args.config)
    ctrl = next(c for c in config.controllers if c.name == args.controller)
    joint = next(j for j in ctrl.joints if j.name == args.joint)
    driver = load_driver_class(ctrl.driver)(ctrl.name, ctrl.settings, ctrl.joints)
    await asyncio.wait_for(driver.connect(), 10.0)
    print("CONNECTED", flush=True)
    result: dict[str, object] = {"outcome": "ok", "error": None}
    try:
        capture = await asyncio.wait_for(
            run_guarded_cycle(driver, backlash_cycle(ctrl, joint), ctrl.interlocks, joint), 60.0
        )
        result["samples"] = len(capture)
    except CycleAborted as exc:
        result.update(outcome="aborted", error=str(exc))
    except InterlockError as exc:
        result.update(outcome="refused", error=str(exc))
    finally:
        await driver.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--controller", required=True)
    parser.add_argument("--joint", required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
