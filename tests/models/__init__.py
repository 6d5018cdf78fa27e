"""Tests of agent.models: axis, joint and robot models."""
