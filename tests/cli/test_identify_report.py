"""`jha identify --html`: the report shows measured vs predicted torque for every joint."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

ROBOT = ROOT / "config" / "robots" / "planar2.yaml"


def _jha(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_identify_writes_a_report_with_torque_evidence_per_joint(tmp_path: Path) -> None:
    capture, page = tmp_path / "id.npz", tmp_path / "id.html"
    made = _jha("simulate", "identification", "--robot", str(ROBOT), "-o", str(capture))
    assert made.returncode == 0, made.stderr
    done = _jha("identify", str(capture), "--robot", str(ROBOT), "--html", str(page))
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    for joint in ("joint_1", "joint_2"):
        assert f"{joint}: measured vs predicted motor torque" in html
    # one inline plot per joint with both series drawn as polylines, no external resources
    assert html.count("<svg") >= 2
    assert len(re.findall(r"<polyline", html)) >= 4
    assert "http://" not in html.replace("http://www.w3.org", "")
    # the indicators of the fit are on the page
    assert "Coulomb" in html or "coulomb" in html
