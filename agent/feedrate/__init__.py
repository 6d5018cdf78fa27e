"""Feedrate modulation at axis reversals (paper 001): geometry, profiles, streaming G-code filter."""
