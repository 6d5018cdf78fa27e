"""Coverage-guided atheris targets; tests/fuzz/test_atheris.py runs each in a process of its own
(`python -m tests.fuzz.atheris.run TARGET`)."""
