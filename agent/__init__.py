"""Joint-health agent: test cycles, encoder captures, wear estimates and reports."""

__version__ = "0.1.0"
