"""Tests of agent.estimation: backlash, identification and stiffness estimators."""
