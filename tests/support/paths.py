"""Where the repository's files are, for tests at any depth under tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROBOTS = ROOT / "config" / "robots"
MACHINES = ROOT / "config" / "machines"
PEERS = ROOT / "tests" / "peers"
