"""Evidence plots a report shows beside an indicator: what the estimate was made from.

Estimators (or the jobs that run them) produce these; the report renders them as inline SVG.
Arrays are kept short by the producer (decimated to at most a few thousand points).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class EvidenceSeries:
    label: str
    x: npt.NDArray[np.float64]
    y: npt.NDArray[np.float64]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "x": self.x.tolist(), "y": self.y.tolist()}


@dataclass(frozen=True)
class EvidencePlot:
    """One plot, e.g. 'axis2: measured vs predicted motor torque'."""

    title: str
    x_label: str
    y_label: str
    series: tuple[EvidenceSeries, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "x_label": self.x_label,
            "y_label": self.y_label,
            "series": [s.to_dict() for s in self.series],
        }
