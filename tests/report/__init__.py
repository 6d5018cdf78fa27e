"""Tests of agent.report: SVG plots, JSON and HTML reports, the terminal table."""
