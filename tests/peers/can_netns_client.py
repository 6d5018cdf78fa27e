"""The agent's side of the udp_multicast test: one guarded cycle through the CAN driver.

Runs inside the test's network namespace (the driver must join the peer's multicast group
there), as `python -m tests.peers.can_netns_client --config ... --controller ... --joint ... --out
capture.npz`. Prints one JSON line: {"outcome": "ok" | "aborted" | "refused", "error": ...,
"stats": ..., "stop_commands_sent": N}; the capture, when there is one, goes to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from agent.capture.files import save_capture
from agent.config.load import load_config
from agent.errors import CycleAborted, InterlockError
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from drivers.can.driver import CanDriver


async def run(args: argparse.Namespace) -> dict[str, object]:
    config = load_config(args.config)
    ctrl = next(c for c in config.controllers if c.name == args.controller)
    joint = next(j for j in ctrl.joints if j.name == args.joint)
    driver = CanDriver(ctrl.name, ctrl.settings, ctrl.joints)
    await asyncio.wait_for(driver.connect(), 10.0)
    result: dict[str, object] = {"outcome": "ok", "error": None}
    try:
        cycle = backlash_cycle(ctrl, joint)
        capture = await asyncio.wait_for(
            run_guarded_cycle(driver, cycle, ctrl.interlocks, joint), 60.0
        )
        save_capture(capture, args.out)
        result["stats"] = driver.last_capture_stats
    except CycleAborted as exc:
        result.update(outcome="aborted", error=str(exc))
    except InterlockError as exc:
        result.update(outcome="refused", error=str(exc))
    finally:
        result["stop_commands_sent"] = driver.stop_commands_sent
        await driver.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--controller", required=True)
    parser.add_argument("--joint", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
