"""The fuzz targets' inputs and properties, one module per input format, shared by the hypothesis
targets (tests/fuzz/test_fuzz_*.py) and the atheris targets (tests/fuzz/atheris/)."""
