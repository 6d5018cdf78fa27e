"""Tests of the installed service: `make install`, the systemd unit, and the agent run under the
unit's restrictions rebuilt without systemd."""
