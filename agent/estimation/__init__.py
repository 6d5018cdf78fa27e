"""Pure estimators: Capture (+ model) -> frozen result dataclass. No I/O, no clocks, no drivers."""
