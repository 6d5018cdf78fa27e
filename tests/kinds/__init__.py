"""Tests of agent.kinds: the backlash and identification cycles end to end on simulated data."""
