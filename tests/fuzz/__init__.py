"""Fuzz targets of the parsers: one module per input format.

`make test` runs each target with FUZZ_CASES cases (1000 there, default 2000); `python -m tests.fuzz
--cases 100000` runs them longer. Every target records its executed cases and crashes in
tests.support.summary, printed at the end of the pytest run.
"""
