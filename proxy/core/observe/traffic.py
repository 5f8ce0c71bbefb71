"""Traffic counters: edge responses per domain by cache outcome, and the last hour by minute.

Theory of operation. Every edge response ends in one of five outcomes, read off the
Cache-Status the edge sends (RFC 9211):

========== =========================================== ================================
outcome    Cache-Status                                 meaning
========== =========================================== ================================
hit        ``hit``                                      served from the store
miss       ``fwd=uri-miss|vary-miss|request|miss``      a cacheable request the store could
                                                        not answer (collapsed ones too)
stale      ``fwd=stale``                                a stored entry was revalidated
bypass     ``fwd=method|bypass``                        not a cache lookup at all
error      any ``fwd=``, with the proxy's own 502/504   the origin failed
========== =========================================== ================================

``Traffic`` keeps, per domain, one count per outcome since start, and a ring of one-minute
buckets (hits, misses, clears) for the timeline. Recording an event is O(1): a dict update,
and at most one bucket reset when the minute has moved on. Memory is bounded by the number of
domains (the edge records only configured ones) times five, plus the ring.

Sans-I/O: no clock is read here. Every event carries ``now`` (wall-clock seconds, for the
timeline's minute boundaries), so tests drive it with a fake one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

HIT = "hit"
MISS = "miss"
STALE = "stale"
BYPASS = "bypass"
ERROR = "error"
OUTCOMES = (HIT, MISS, STALE, BYPASS, ERROR)

CLEARED = "cleared"  # the clear-cache outcome that counts as a clear in the timeline

BUCKET_SECONDS = 60
RING_MINUTES = 60

# RFC 9211 §2.2 fwd values → outcome. Unknown values count as misses: the cache looked and
# had nothing it could use.
_FWD_OUTCOMES: Mapping[str, str] = {
    "bypass": BYPASS,
    "method": BYPASS,
    "uri-miss": MISS,
    "vary-miss": MISS,
    "miss": MISS,
    "request": MISS,
    "stale": STALE,
}


def outcome_of_fwd(fwd: str) -> str:
    """The outcome of a response the edge forwarded with Cache-Status ``fwd=<fwd>``."""
    return _FWD_OUTCOMES.get(fwd, MISS)


@dataclass(frozen=True, slots=True)
class DomainCounts:
    """One domain's responses since start.

    ``misses`` counts every cacheable request the store could not answer alone, so it
    includes the revalidations (``stale``, also given on its own); ``hit_ratio`` is
    hits / (hits + misses). Bypassed requests and origin errors are in neither.
    """

    hits: int = 0
    misses: int = 0
    stale: int = 0
    bypassed: int = 0
    errors: int = 0
    clears: int = 0

    @property
    def hit_ratio(self) -> float | None:
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else None


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """One minute of the timeline, all domains together. ``misses`` includes ``stale``."""

    start: float  # wall-clock seconds at the start of the minute
    hits: int
    misses: int
    clears: int


class Traffic:
    """Per-domain outcome counts and a ring of per-minute buckets. Not thread-safe: it lives
    on the event loop, like everything that calls it."""

    __slots__ = (
        "_clears",
        "_counts",
        "_current",
        "_domain_clears",
        "_from",
        "_hits",
        "_minutes",
        "_misses",
        "_size",
        "_until",
    )

    def __init__(self, *, minutes: int = RING_MINUTES) -> None:
        if minutes < 1:
            raise ValueError("the ring needs at least one minute")
        self._size = minutes
        self._counts: dict[str, dict[str, int]] = {}
        self._domain_clears: dict[str, int] = {}
        # The ring: slot i holds minute number _minutes[i] (now // 60), or -1 when unused.
        self._minutes = [-1] * minutes
        self._hits = [0] * minutes
        self._misses = [0] * minutes
        self._clears = [0] * minutes
        # The current minute, cached: while now stays in [_from, _until) an event goes to
        # slot _current without computing its minute (the hit path; see decision 0005).
        self._from = self._until = 0.0
        self._current = 0

    def record(self, domain: str, outcome: str, now: float) -> None:
        """Count one edge response. Raises KeyError for an outcome not in OUTCOMES."""
        counts = self._counts.get(domain)
        if counts is None:
            if outcome not in OUTCOMES:
                raise KeyError(outcome)
            counts = self._counts[domain] = dict.fromkeys(OUTCOMES, 0)
        counts[outcome] += 1  # KeyError for an unknown outcome: the dict holds exactly OUTCOMES
        if outcome == HIT:
            slot = self._current if self._from <= now < self._until else self._move(now)
            self._hits[slot] += 1
        elif outcome in (MISS, STALE):
            slot = self._current if self._from <= now < self._until else self._move(now)
            self._misses[slot] += 1

    def record_clear(self, domain: str, now: float) -> None:
        """Count one completed clear of a (configured) domain."""
        self._domain_clears[domain] = self._domain_clears.get(domain, 0) + 1
        self._clears[self._move(now)] += 1

    def _move(self, now: float) -> int:
        """Make now's minute the current one; its slot, emptied if it held an older minute."""
        minute = int(now // BUCKET_SECONDS)
        slot = minute % self._size
        if self._minutes[slot] != minute:
            self._minutes[slot] = minute
            self._hits[slot] = self._misses[slot] = self._clears[slot] = 0
        self._from = float(minute * BUCKET_SECONDS)
        self._until = self._from + BUCKET_SECONDS
        self._current = slot
        return slot

    # -- reading -------------------------------------------------------------------------------

    def outcomes(self) -> Mapping[str, Mapping[str, int]]:
        """domain → outcome → count, for every domain seen. A read-only view."""
        return self._counts

    def domain_counts(self, domain: str) -> DomainCounts:
        counts = self._counts.get(domain)
        clears = self._domain_clears.get(domain, 0)
        if counts is None:
            return DomainCounts(clears=clears)
        return DomainCounts(
            hits=counts[HIT],
            misses=counts[MISS] + counts[STALE],
            stale=counts[STALE],
            bypassed=counts[BYPASS],
            errors=counts[ERROR],
            clears=clears,
        )

    def timeline(self, now: float, minutes: int = RING_MINUTES) -> list[MinuteCounts]:
        """The last ``minutes`` minutes up to and including the current one, oldest first.
        Minutes with no events (or older than the ring) are zeros."""
        if not 1 <= minutes <= self._size:
            raise ValueError(f"minutes must be between 1 and {self._size}")
        current = int(now // BUCKET_SECONDS)
        result = []
        for minute in range(current - minutes + 1, current + 1):
            slot = minute % self._size
            start = float(minute * BUCKET_SECONDS)
            if self._minutes[slot] == minute:
                result.append(
                    MinuteCounts(start, self._hits[slot], self._misses[slot], self._clears[slot])
                )
            else:
                result.append(MinuteCounts(start, 0, 0, 0))
        return result
