"""Tests of agent.health: verdicts, trends, regimes and identification indicators."""
