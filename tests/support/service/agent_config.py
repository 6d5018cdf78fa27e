"""The agent configs the in-process service tests write: simulated controllers with calibrated
test joints, in a YAML file next to the state directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

POINTS = [(0.0, 0.0), (1.07, 3.0e-4), (2.06, 7.0e-4), (2.86, 1.1e-3), (3.57, 1.5e-3)]
# Each cycle: 0.2 s settle + 2 load turns of 0.4 s = 1.0 s by the estimate.
CYCLE_S = 1.0


def joint(name: str, index: int) -> dict[str, Any]:
    return {
        "name": name,
        "index": index,
        "gear_ratio": 40,
        "backlash_cycle": {
            "motor_speed_rps": 100,
            "load_turns": 2,
            "sample_rate_hz": 500,
            "settle_s": 0.2,
        },
        "calibration": {
            "source": "points",
            "points": [{"amplitude_rad_s": a, "backlash_rad": d} for a, d in POINTS],
        },
    }


def controller(
    name: str, joints: int = 3, triggers: dict[str, Any] | None = None, **sim: Any
) -> dict[str, Any]:
    settings = {"seed": 1, "production_runs_s": 0.0, "stop_length_s": 3600.0, **sim}
    out: dict[str, Any] = {
        "name": name,
        "driver": "sim",
        "settings": settings,
        "joints": [joint(f"j{i}", i) for i in range(1, joints + 1)],
    }
    if triggers is not None:
        out["triggers"] = triggers
    return out


def write(path: Path, *controllers: dict[str, Any], **agent: Any) -> Path:
    doc = {
        "agent": {
            "state_dir": str(path.parent / "state"),
            "log_level": "info",
            "poll_s": 0.05,
            **agent,
        },
        "controllers": list(controllers),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
