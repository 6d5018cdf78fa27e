"""Settings of the identification test cycle (`controllers[].identification:`), papers 002/004."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class IdentificationCycleSettings:
    robot: str = field(metadata={"doc": "robot description file (config/robots/*.yaml)"})
    duration_s: float = field(default=31.0, metadata={"gt": 0.0, "le": 600.0})
    sample_rate_hz: float = field(default=1000.0, metadata={"gt": 0.0, "le": 100_000.0})
