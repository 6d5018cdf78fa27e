"""`jha fleet`: the plant-wide service. It subscribes to the agents' MQTT topics (a persistent
session at QoS 1), stores every report, health message and agent status in PostgreSQL
(idempotent by message id), and serves the maintenance plan: every joint of every machine, as a
web page and a JSON API.

    agents -> broker(s) -> ingest (agent.fleet.ingest) -> PostgreSQL (agent.fleet.store)
                                                        -> plan (agent.fleet.plan) -> web

The daemon side never imports this package (import-linter), and this package never imports
numpy or scipy: it parses the agents' JSON itself (agent.fleet.messages) instead of loading
agent.report.
"""
