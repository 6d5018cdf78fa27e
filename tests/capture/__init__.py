"""Tests of agent.capture: the Capture data type, its files, the encoder arithmetic."""
