"""Tests of the serial encoder-board driver (drivers.serial) against a pty peer."""
