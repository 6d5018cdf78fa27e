"""Tests of agent.publish: MQTT (payloads, outbox, publisher) and the OPC UA server."""
