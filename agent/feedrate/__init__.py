"""Feedrate modulation at axis reversals (paper 001): geometry, profiles, G-code filter."""
