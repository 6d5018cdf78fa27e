"""The physics of a peer controller written in another language (tests/peers/opcua_node), served
over stdin/stdout as JSON lines, so both OPC UA peers publish the simulated fake's samples.

    python -m tests.peers.opcua.samples_cli --config CONFIG.yaml [--controller NAME]

The first line written is `{"joints": [{"index", "name", "test_pose_rad"}, ...]}`. Then each
request line `{"joint_index", "speed", "settle", "duration", "rate", "backlash", "noise_counts",
"seed"}` is answered by one line `{"time_s", "motor_counts", "link_counts", "current_a"}` (or
`{"error": "..."}`). Exits when stdin closes: the peer that started it has ended.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agent.config.load import load_config
from agent.config.model import JointSettings
from tests.peers.opcua.physics import cycle_samples, peer_cycle


def answer(joints: dict[int, JointSettings], request: dict[str, Any]) -> dict[str, Any]:
    joint = joints.get(int(request["joint_index"]))
    if joint is None:
        return {"error": f"no joint with index {request['joint_index']}"}
    cycle = peer_cycle(
        joint,
        float(request["speed"]),
        float(request["settle"]),
        float(request["duration"]),
        float(request["rate"]),
    )
    samples = cycle_samples(
        joint,
        cycle,
        float(request["backlash"]),
        noise_counts=float(request["noise_counts"]),
        seed=int(request["seed"]),
    )
    return {
        "time_s": samples.time_s.tolist(),
        "motor_counts": samples.motor_counts.tolist(),
        "link_counts": samples.link_counts.tolist(),
        "current_a": samples.current_a.tolist(),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--controller")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    ctrl = next((c for c in cfg.controllers if args.controller in (None, c.name)), None)
    if ctrl is None:
        raise SystemExit(f"no controller {args.controller!r} in {args.config}")
    joints = {j.index: j for j in ctrl.joints}
    listing = [
        {"index": j.index, "name": j.name, "test_pose_rad": j.test_pose_rad}
        for j in joints.values()
    ]
    print(json.dumps({"joints": listing}), flush=True)
    for line in sys.stdin:
        try:
            reply = answer(joints, json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
