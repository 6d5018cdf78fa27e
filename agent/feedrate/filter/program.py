"""Running the feedrate filter over a whole program: lines in, output chunks or lines out.

`filter_lines` yields what `FeedrateFilter.feed` and `finish` return, chunk by chunk (a chunk may
hold several lines: a replaced block becomes many segments); `filtered_lines` and
`filtered_lines_with_origin` yield one output line at a time, for a controller stream, the
latter with the program line each comes from.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from agent.feedrate.filter.toolpath_filter import FeedrateFilter
from agent.feedrate.geometry.primitives import Vec3
from agent.feedrate.machine import MachineSettings


def filter_lines(
    lines: Iterable[str],
    machine: MachineSettings,
    *,
    source: str | None = None,
    start_mm: Vec3 = (0.0, 0.0, 0.0),
    filt: FeedrateFilter | None = None,
) -> Iterator[str]:
    """Output text of a streamed program, chunk by chunk (each chunk one or more lines)."""
    f = filt if filt is not None else FeedrateFilter(machine, source=source, start_mm=start_mm)
    for line in lines:
        yield from f.feed(line)
    yield from f.finish()


def filtered_lines(
    lines: Iterable[str],
    machine: MachineSettings,
    *,
    source: str | None = None,
    filt: FeedrateFilter | None = None,
) -> Iterator[str]:
    """Like filter_lines, one output line per item (for a controller stream)."""
    for line, _ in filtered_lines_with_origin(lines, machine, source=source, filt=filt):
        yield line


def filtered_lines_with_origin(
    lines: Iterable[str],
    machine: MachineSettings,
    *,
    source: str | None = None,
    filt: FeedrateFilter | None = None,
) -> Iterator[tuple[str, int]]:
    """(output line, the program line it comes from), one output line at a time."""
    f = filt if filt is not None else FeedrateFilter(machine, source=source)

    def split(chunks: list[str]) -> Iterator[tuple[str, int]]:
        for chunk, origin in zip(chunks, f.origins, strict=True):
            if chunk.count("\n") <= 1:
                yield chunk, origin
            else:
                for line in chunk.splitlines(keepends=True):
                    yield line, origin

    for line in lines:
        yield from split(f.feed(line))
    yield from split(f.finish())
