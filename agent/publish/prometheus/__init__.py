"""An opt-in Prometheus scrape endpoint for the joint health (agent.publish.prometheus.exporter)."""
