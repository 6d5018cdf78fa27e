"""`jha stiffness ...`: joint stiffness with its uncertainty (Prod. Eng. 2023) from the command
line.

  design    the most informative experiments: poses and TCP forces (or, with
            --method dual-encoder, standstill poses) and the posterior they should give
  simulate  measurements of a design on the simulated robot (a CSV for `estimate`)
  estimate  MAP stiffness, covariance, 1-alpha intervals and residuals from a CSV
  predict   TCP deviation under a force, with its uncertainty

design and simulate are in design.py, estimate and predict in estimate.py, the measurement CSV
files in measurements.py. Every sub-command returns an exit code, and errors are agent.errors
exceptions (agent.cli.main maps them to sysexits codes). Angles are radians unless --degrees
is given.
"""

from __future__ import annotations

from typing import Any

from agent.cli.stiffness import design, estimate


def register(subparsers: Any) -> None:
    """Add `stiffness design|simulate|estimate|predict` to an argparse subparsers object."""
    top = subparsers.add_parser(
        "stiffness", help="joint stiffness and its uncertainty (Prod. Eng. 2023)"
    )
    sub = top.add_subparsers(dest="stiffness_command", required=True)
    design.register(sub)
    estimate.register(sub)
