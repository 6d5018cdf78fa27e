"""Tests of the `jha` command line (agent.cli), run in-process."""
