"""Tests of the UR RTDE driver (drivers.ur_rtde) against the UR controller emulator."""
