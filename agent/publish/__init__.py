"""Publishing joint health where maintenance already looks: MQTT, an OPC UA server."""
