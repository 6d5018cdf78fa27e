"""Tests of agent.history: the SQLite history, its migrations, indicator records."""
