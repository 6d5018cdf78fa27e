"""Tests of agent.service: the daemon, its triggers, interlocks, control socket, systemd."""
