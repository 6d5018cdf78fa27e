"""Tests of agent.feedrate: G-code, geometry, the toolpath filter, profiles, streaming."""
