"""Feedrate modulation at axis reversals (Farouki & Swett 2022): geometry, profiles, G-code
filter."""
