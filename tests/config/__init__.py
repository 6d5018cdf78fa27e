"""Tests of agent.config and agent.schema: the config file, its warnings, YAML with lines."""
