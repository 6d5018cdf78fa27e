"""Tests of the controller drivers, one folder per driver, each against its protocol peer."""
