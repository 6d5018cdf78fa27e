"""Controller drivers, found through the entry-point group `joint_health_agent.drivers`."""
