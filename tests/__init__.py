"""The test suite: one folder per code package (tests/drivers/NAME for each driver), the protocol
peers (tests/peers), fault injection (tests/faults), fuzzing (tests/fuzz), and the helpers test
modules share (tests/support): no test module imports another."""
