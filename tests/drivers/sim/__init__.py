"""Tests of the simulated controller (drivers.sim)."""
