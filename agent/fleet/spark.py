"""A trend's newest points as the coordinates of an SVG polyline, computed once when a health
message is stored (a plan of thousands of joints then only copies a short string per joint).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from agent.wire import HEALTH_HISTORY_POINTS

WIDTH = 100
HEIGHT = 20
MAX_POINTS = HEALTH_HISTORY_POINTS  # the agents send at most this many


def spark_values(history: Any) -> list[float]:
    """The finite numeric values of a health message's history, oldest first."""
    if not isinstance(history, list):
        return []
    values: list[Any] = [p.get("value") for p in history[-MAX_POINTS:] if type(p) is dict]
    # type(), not isinstance: a bool is an int to isinstance, and this runs per stored point.
    return [float(v) for v in values if type(v) in _NUMBERS and -1e300 < v < 1e300]


_NUMBERS = (float, int)


@functools.cache
def _x_prefixes(n: int) -> tuple[str, ...]:
    """'x,' of each of n evenly spaced points (the same for every trend of n points)."""
    step = (WIDTH - 2) / (n - 1)
    return tuple(f"{round(1 + i * step)}," for i in range(n))


def spark_points(values: Sequence[float]) -> str | None:
    """Integer 'x,y' pairs scaled into WIDTH x HEIGHT; None below two points."""
    if len(values) < 2:
        return None
    low, high = min(values), max(values)
    scale = (HEIGHT - 2) / ((high - low) or 1.0)
    top = HEIGHT - 1
    ys = [str(round(top - (v - low) * scale)) for v in values]
    return " ".join(map(str.__add__, _x_prefixes(len(values)), ys))
