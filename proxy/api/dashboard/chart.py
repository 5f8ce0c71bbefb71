"""The landing page's chart: hits, misses and clears (with purges) per minute over the last
hour, as SVG.

Pure geometry: the minutes go in, the coordinates the template draws come out. Hits and
misses are two lines over a shared y axis with four round-numbered gridlines; clears are marks along
the top, each labelled with its count, since a clear is an event, not a rate. The template
styles everything through classes (dashboard.css), so the page needs no inline style and the
Content-Security-Policy can forbid it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

WIDTH = 720
HEIGHT = 260
LEFT = 52  # room for the y labels
RIGHT = 12
TOP = 28  # room for the clear marks
BOTTOM = 30  # room for the x labels


class Minute(Protocol):
    """One minute of counts (proxy.observe.telemetry.MinuteCounts has this shape)."""

    @property
    def hits(self) -> int: ...

    @property
    def misses(self) -> int: ...

    @property
    def clears(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True, slots=True)
class ClearMark:
    x: float
    count: int


@dataclass(frozen=True, slots=True)
class Chart:
    minutes: int
    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float  # y of the x axis
    hits: str  # the polyline's points
    misses: str
    clears: tuple[ClearMark, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    total_hits: int
    total_misses: int
    total_clears: int

    @property
    def hit_ratio(self) -> float | None:
        looked_up = self.total_hits + self.total_misses
        return self.total_hits / looked_up if looked_up else None

    @property
    def description(self) -> str:
        return (
            f"Over the last {self.minutes} minutes: {self.total_hits} hits, "
            f"{self.total_misses} misses and {self.total_clears} clears and purges."
        )


def nice_step(value: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50... at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    magnitude = int(10 ** math.floor(math.log10(value)))
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    raise AssertionError("unreachable")  # pragma: no cover


def build_chart(minutes: Sequence[Minute]) -> Chart:
    """The chart of ``minutes``, oldest first, the last one being the current minute.

    Minute i is drawn at the end of its slot, so the current minute is at the right edge
    ("now") and the left edge is ``len(minutes)`` minutes ago.
    """
    count = len(minutes)
    bottom = HEIGHT - BOTTOM
    right = WIDTH - RIGHT
    # Four gridlines above zero, a whole round number apart.
    step = nice_step(max((max(m.hits, m.misses) for m in minutes), default=0) / 4)
    peak = 4 * step

    def x(slot: float) -> float:
        return LEFT + (right - LEFT) * slot / max(count, 1)

    def y(value: float) -> float:
        return bottom - (bottom - TOP) * value / peak

    def line(values: Sequence[int]) -> str:
        return " ".join(f"{x(i + 1):.1f},{y(v):.1f}" for i, v in enumerate(values))

    y_ticks = tuple(Tick(y(step * k), str(step * k)) for k in range(5))
    x_ticks = tuple(
        Tick(x(count * k / 4), "now" if k == 4 else f"-{count - count * k // 4} min")
        for k in range(5)
    )
    return Chart(
        minutes=count,
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        right=right,
        top=TOP,
        bottom=bottom,
        hits=line([m.hits for m in minutes]),
        misses=line([m.misses for m in minutes]),
        clears=tuple(ClearMark(x(i + 1), m.clears) for i, m in enumerate(minutes) if m.clears),
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        total_hits=sum(m.hits for m in minutes),
        total_misses=sum(m.misses for m in minutes),
        total_clears=sum(m.clears for m in minutes),
    )
