"""The daemon's own process never imports scipy: the analyses (fits, trends) run in its process
pool, so the idle service stays small (agent/service/pool.py, agent/kinds/base.py).

`jha run --once` runs in a fresh interpreter (this one has imported scipy long ago), on one
simulated joint whose production stop starts at once; afterwards the interpreter lists the
scipy modules it holds. Nothing here waits on the clock: --once ends when its cycle is recorded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from agent.history.store import HistoryStore
from tests.support.paths import ROOT

# agent.cli.main.main as `jha run --once` calls it, then the scipy modules this process holds.
DAEMON = """\
import json, sys
from agent.cli.main import main
code = main(["run", "--config", sys.argv[1], "--once", "--wait-for-stop", "120"])
held = sorted(m for m in sys.modules if m == "scipy" or m.startswith("scipy."))
print("RESULT " + json.dumps({"code": code, "scipy": held}))
"""


def write_config(directory: Path) -> Path:
    """One simulated joint, unpaced (time_scale 0), no calibration, stopped from the start."""
    doc: dict[str, Any] = {
        "agent": {"state_dir": str(directory / "state"), "log_level": "warning"},
        "controllers": [
            {
                "name": "robot",
                "driver": "sim",
                "settings": {
                    "seed": 1,
                    "time_scale": 0.0,
                    "stops": [{"at_s": 0.0, "length_s": 3600.0}],
                },
                "joints": [
                    {
                        "name": "j1",
                        "index": 1,
                        "gear_ratio": 40,
                        "backlash_cycle": {
                            "motor_speed_rps": 200,
                            "load_turns": 2,
                            "sample_rate_hz": 500,
                            "settle_s": 0.1,
                        },
                        "calibration": {"source": "none"},
                    }
                ],
            }
        ],
    }
    path = directory / "agent.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_daemon_records_its_cycle_without_importing_scipy(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", DAEMON, str(config)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["code"] == 0, proc.stderr
    # The cycle ran and its analysis came back from the pool into the history.
    with HistoryStore(tmp_path / "state" / "history.sqlite") as store:
        cycles = store.cycles(10)
    assert [(c.controller, c.joint, c.outcome) for c in cycles] == [("robot", "j1", "ok")]
    assert result["scipy"] == []
