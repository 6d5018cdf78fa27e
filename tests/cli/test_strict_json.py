"""`--json` output is strict JSON: never NaN or Infinity, which most parsers refuse. A value that
is not a finite number is null, with the reason at its path in `null_reasons`; an estimate that
cannot be made (a joint's stiffness when both encoders agree: 0/0) is null with a warning."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.cli.common import print_json, strict_json_text
from tests.support.paths import ROOT

ROBOT = ROOT / "config" / "robots" / "planar2.yaml"


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_values_become_null_with_their_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = {
        "a": 1.5,
        "joints": [{"k": float("nan"), "n": np.int64(3)}, {"k": np.float32("inf")}],
        "low": -float("inf"),
    }
    print_json(data)
    out = _strict(capsys.readouterr().out)
    assert out["a"] == 1.5 and out["joints"][0]["n"] == 3
    assert out["joints"][0]["k"] is None and out["joints"][1]["k"] is None and out["low"] is None
    assert out["null_reasons"] == {
        "joints[0].k": "not a number (0/0: nothing to estimate it from)",
        "joints[1].k": "+infinite (divided by zero)",
        "low": "-infinite (divided by zero)",
    }
    assert "null_reasons" not in _strict(strict_json_text({"a": 1.0}))


def test_identify_json_when_both_encoders_agree_has_no_nan(tmp_path: Path) -> None:
    def jha(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=300
        )

    sim = tmp_path / "id.npz"
    made = jha("simulate", "identification", "--robot", str(ROBOT), "-o", str(sim))
    assert made.returncode == 0, made.stderr
    channels = dict(np.load(sim))
    gear = 100.0  # planar2.yaml: both joints
    channels["channel__link_pos_rad"] = channels["channel__motor_pos_rad"] / gear
    agree = tmp_path / "agree.npz"
    np.savez(agree, **channels)
    done = jha("identify", str(agree), "--robot", str(ROBOT), "--model", "rigid", "--json")
    assert done.returncode == 0, done.stderr
    out = _strict(done.stdout)
    for joint in out["joints"]:
        assert joint["stiffness_nm_rad"] is None
        assert "k" not in joint["rel_std_pct"]
        assert joint["coulomb_nm"] is not None
    assert sum("stiffness not seen (the gear twist between the encoders" in w
               for w in out["warnings"]) == 2  # fmt: skip
    # The model check's second fit is on by default (its shifts are in the JSON and widen the
    # intervals); --no-model-check leaves the noise intervals alone.
    check = out["uncertainty"]["model_check"]
    assert check["alternative"] == "load-dependent friction and a joint spring"
    assert set(check["bias"]) == {p["name"] for p in out["parameters"]}
    bare = jha("identify", str(agree), "--robot", str(ROBOT), "--model", "rigid", "--json",
               "--no-model-check")  # fmt: skip
    assert bare.returncode == 0, bare.stderr
    plain = _strict(bare.stdout)
    assert plain["uncertainty"]["model_check"] is None
    for p, q in zip(out["parameters"], plain["parameters"], strict=True):
        assert p["value"] == q["value"]
        lo, hi = p["interval_95"]
        assert lo <= q["interval_95"][0] and q["interval_95"][1] <= hi
        assert hi - lo == pytest.approx(
            q["interval_95"][1] - q["interval_95"][0] + 2 * abs(check["bias"][p["name"]])
        )


def test_identify_feasible_prints_no_python_warning(tmp_path: Path) -> None:
    """Issue 30, point 5: `--feasible` leaked numpy overflow warnings (its local solver's
    exponentials) and stopped after 400 evaluations; as a semidefinite program it runs under
    `python -W error` (any warning an error) and reports the solver's status."""
    sim = tmp_path / "id.npz"
    made = subprocess.run(
        [sys.executable, "-m", "agent.cli", "simulate", "identification", "--robot", str(ROBOT),
         "-o", str(sim)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "agent.cli", "identify", str(sim), "--robot",
         str(ROBOT), "--model", "rigid", "--feasible"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    assert "(solver Clarabel: optimal," in done.stdout, done.stdout
