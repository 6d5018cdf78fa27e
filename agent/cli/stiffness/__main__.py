"""`python -m agent.cli.stiffness ...`: the `jha stiffness` command group on its own."""

from agent.cli.common import run_standalone
from agent.cli.stiffness import register

run_standalone(register)
