"""Fault injection: the daemon run as `jha run` in a subprocess, its drivers and its publisher
under kills, hangs, a full disk, clock jumps and a flapping broker (the shared helpers are in
tests/support/service/faults.py)."""
