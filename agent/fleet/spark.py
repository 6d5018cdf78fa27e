"""A trend's newest points as the coordinates of an SVG polyline, computed once when a health
message is stored (a plan of thousands of joints then only copies a short string per joint).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WIDTH = 100
HEIGHT = 20
MAX_POINTS = 32  # the agents send at most this many (agent.publish.mqtt.payloads)


def spark_values(history: Any) -> list[float]:
    """The finite numeric values of a health message's history, oldest first."""
    if not isinstance(history, list):
        return []
    out = []
    for p in history[-MAX_POINTS:]:
        v = p.get("value") if isinstance(p, dict) else None
        if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) < 1e300:
            out.append(float(v))
    return out


def spark_points(values: Sequence[float]) -> str | None:
    """Integer 'x,y' pairs scaled into WIDTH x HEIGHT; None below two points."""
    if len(values) < 2:
        return None
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = (WIDTH - 2) / (len(values) - 1)
    return " ".join(
        f"{round(1 + i * step)},{round(HEIGHT - 1 - (v - low) / span * (HEIGHT - 2))}"
        for i, v in enumerate(values)
    )
