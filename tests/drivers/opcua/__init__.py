"""Tests of the OPC UA driver (drivers.opcua) against an asyncua server process."""
