"""The Overview's clears and purges, counted from the audit log.

The chart's hits and misses come from the processes' counters (telemetry), which start
again from zero with the process. Clears and purges need not: every one that changed the
cache wrote an audit record (outcome ``cleared`` or ``purged``) into the state database,
which survives restarts. So the "last hour" of clears and purges is read from there, and it
counts purges too (the counters count only clears).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from proxy.core.observe.traffic import MinuteCounts
from proxy.state.async_state import AsyncState

COUNTED = ("cleared", "purged")  # the outcomes that changed the cache (not dry runs, refusals)
PAGE = 500  # audit records read at a time, newest first
MAX_READ = 20_000  # records read at most for one page view: a bound on its cost


async def changed_at(state: AsyncState, since: float) -> list[float]:
    """When each clear and purge at or after ``since`` was recorded (at most MAX_READ of
    each outcome, the newest)."""
    found: list[float] = []
    for outcome in COUNTED:
        for offset in range(0, MAX_READ, PAGE):
            records = await state.list_audit(PAGE, offset, outcome=outcome)
            found += [record.at for record in records if record.at >= since]
            if len(records) < PAGE or records[-1].at < since:
                break
    return found


def with_changes(minutes: Sequence[MinuteCounts], times: Sequence[float]) -> list[MinuteCounts]:
    """``minutes`` with their ``clears`` replaced by how many of ``times`` fall in each."""
    if not minutes:
        return []
    width = minutes[1].start - minutes[0].start if len(minutes) > 1 else 60.0
    first, end = minutes[0].start, minutes[-1].start + width
    counts = [0] * len(minutes)
    for at in times:
        if first <= at < end:
            counts[int((at - first) // width)] += 1
    return [replace(minute, clears=count) for minute, count in zip(minutes, counts, strict=True)]
