"""Tests of the G-code streaming driver (drivers.grbl) against the GRBL-protocol peer."""
