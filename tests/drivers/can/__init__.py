"""Tests of the CAN driver (drivers.can): frames, socketcand and UDP multicast peers."""
