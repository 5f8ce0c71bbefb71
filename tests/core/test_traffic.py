"""Traffic counters: outcomes per domain, and the last hour minute by minute, with a fake now.

The outcomes follow the Cache-Status the edge sends (RFC 9211 §2.1 hit, §2.2 fwd).
"""

from __future__ import annotations

import pytest

from proxy.core.observe.traffic import (
    BYPASS,
    ERROR,
    HIT,
    MISS,
    OUTCOMES,
    STALE,
    DomainCounts,
    MinuteCounts,
    Traffic,
    outcome_of_fwd,
)

T0 = 1_700_000_040.0  # the start of a minute (1_700_000_040 = 28_333_334 * 60)
A = "example.com"
B = "other.test"


@pytest.mark.parametrize(
    ("fwd", "outcome"),
    [
        ("uri-miss", MISS),
        ("vary-miss", MISS),
        ("miss", MISS),
        ("request", MISS),
        ("stale", STALE),
        ("method", BYPASS),
        ("bypass", BYPASS),
        ("partial", MISS),  # RFC 9211 §2.2 value the edge never sends: the cache looked
    ],
)
def test_fwd_values_map_to_outcomes(fwd: str, outcome: str) -> None:
    """RFC 9211 §2.2: the fwd parameter says why the cache went forward."""
    assert outcome_of_fwd(fwd) == outcome


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([], DomainCounts()),
        ([HIT, HIT, MISS], DomainCounts(hits=2, misses=1)),
        # A revalidation is a miss for the ratio, and is also counted on its own.
        ([STALE, HIT], DomainCounts(hits=1, misses=1, stale=1)),
        ([BYPASS, ERROR, ERROR], DomainCounts(bypassed=1, errors=2)),
        (list(OUTCOMES), DomainCounts(hits=1, misses=2, stale=1, bypassed=1, errors=1)),
    ],
)
def test_counts_by_outcome(events: list[str], expected: DomainCounts) -> None:
    traffic = Traffic()
    for outcome in events:
        traffic.record(A, outcome, T0)
    assert traffic.domain_counts(A) == expected
    assert traffic.domain_counts(B) == DomainCounts()


def test_domains_are_counted_apart() -> None:
    traffic = Traffic()
    traffic.record(A, HIT, T0)
    traffic.record(B, MISS, T0)
    traffic.record(B, MISS, T0)
    assert traffic.domain_counts(A) == DomainCounts(hits=1)
    assert traffic.domain_counts(B) == DomainCounts(misses=2)
    assert traffic.outcomes() == {
        A: {HIT: 1, MISS: 0, STALE: 0, BYPASS: 0, ERROR: 0},
        B: {HIT: 0, MISS: 2, STALE: 0, BYPASS: 0, ERROR: 0},
    }


@pytest.mark.parametrize(
    ("counts", "ratio"),
    [
        (DomainCounts(), None),
        (DomainCounts(bypassed=5, errors=3), None),  # nothing was looked up
        (DomainCounts(hits=3), 1.0),
        (DomainCounts(misses=4), 0.0),
        (DomainCounts(hits=3, misses=1), 0.75),
        (DomainCounts(hits=1, misses=3, stale=2, bypassed=10), 0.25),
    ],
)
def test_hit_ratio(counts: DomainCounts, ratio: float | None) -> None:
    assert counts.hit_ratio == ratio


@pytest.mark.parametrize("outcome", ["HIT", "collapsed", "", "cleared"])
def test_an_unknown_outcome_is_refused_and_not_counted(outcome: str) -> None:
    traffic = Traffic()
    with pytest.raises(KeyError):
        traffic.record(A, outcome, T0)  # the domain's first event
    traffic.record(A, HIT, T0)
    with pytest.raises(KeyError):
        traffic.record(A, outcome, T0)  # and a later one
    assert traffic.domain_counts(A) == DomainCounts(hits=1)
    assert traffic.outcomes()[A].keys() == set(OUTCOMES)


def minutes(traffic: Traffic, now: float, n: int) -> list[tuple[float, int, int, int]]:
    return [(m.start - T0, m.hits, m.misses, m.clears) for m in traffic.timeline(now, n)]


@pytest.mark.parametrize(
    ("events", "now", "n", "expected"),
    [
        # (offset from T0 in seconds, outcome or "clear") ... → (start - T0, hits, misses, clears)
        ([], T0, 3, [(-120, 0, 0, 0), (-60, 0, 0, 0), (0, 0, 0, 0)]),
        (
            [(0, HIT), (59.999, HIT), (60, MISS), (61, STALE), (125, "clear")],
            T0 + 130,
            4,
            [(-60, 0, 0, 0), (0, 2, 0, 0), (60, 0, 2, 0), (120, 0, 0, 1)],
        ),
        # Bypassed requests and errors are not part of the chart.
        ([(1, BYPASS), (2, ERROR), (3, HIT)], T0 + 5, 1, [(0, 1, 0, 0)]),
        # Events from two domains land in the same minute.
        ([(1, HIT), (2, "B-hit")], T0 + 5, 1, [(0, 2, 0, 0)]),
        # The current minute is the last item, even when it has had no event yet.
        ([(0, HIT)], T0 + 3600 - 1, 2, [(3480, 0, 0, 0), (3540, 0, 0, 0)]),
        ([(0, HIT)], T0 + 3600 - 1, 60, [(0, 1, 0, 0)] + [(60 * i, 0, 0, 0) for i in range(1, 60)]),
        # An hour later the slot is reused and the old minute is gone.
        ([(0, HIT), (3600, MISS)], T0 + 3600, 2, [(3540, 0, 0, 0), (3600, 0, 1, 0)]),
        (
            [(0, HIT)],
            T0 + 3600,
            60,
            [(60 * i, 0, 0, 0) for i in range(1, 61)],
        ),
    ],
)
def test_timeline(
    events: list[tuple[float, str]],
    now: float,
    n: int,
    expected: list[tuple[float, int, int, int]],
) -> None:
    traffic = Traffic()
    for offset, event in events:
        if event == "clear":
            traffic.record_clear(A, T0 + offset)
        elif event == "B-hit":
            traffic.record(B, HIT, T0 + offset)
        else:
            traffic.record(A, event, T0 + offset)
    got = minutes(traffic, now, n)
    assert len(got) == n
    assert got == expected


def test_the_ring_keeps_only_the_last_hour_however_long_it_runs() -> None:
    traffic = Traffic()
    # One hit a minute for a day, plus a miss in the last ten minutes.
    for minute in range(24 * 60):
        traffic.record(A, HIT, T0 + minute * 60 + 30)
    for minute in range(24 * 60 - 10, 24 * 60):
        traffic.record(A, MISS, T0 + minute * 60 + 45)
    now = T0 + (24 * 60 - 1) * 60 + 50
    timeline = traffic.timeline(now)
    assert len(timeline) == 60
    assert [m.hits for m in timeline] == [1] * 60
    assert [m.misses for m in timeline] == [0] * 50 + [1] * 10
    assert timeline[0].start == T0 + (24 * 60 - 60) * 60
    assert timeline[-1] == MinuteCounts(start=T0 + (24 * 60 - 1) * 60, hits=1, misses=1, clears=0)
    assert traffic.domain_counts(A) == DomainCounts(hits=24 * 60, misses=10)


def test_a_gap_longer_than_the_ring_leaves_no_ghosts() -> None:
    traffic = Traffic()
    traffic.record(A, HIT, T0)
    traffic.record(A, HIT, T0 + 90 * 60)  # 90 minutes later: slot 30 of the ring
    timeline = traffic.timeline(T0 + 90 * 60)
    assert sum(m.hits for m in timeline) == 1
    assert timeline[-1].hits == 1


def test_clears_count_per_domain_and_in_the_timeline() -> None:
    traffic = Traffic()
    traffic.record_clear(A, T0)
    traffic.record_clear(A, T0 + 61)
    traffic.record_clear(B, T0 + 62)
    assert traffic.domain_counts(A).clears == 2
    assert traffic.domain_counts(B) == DomainCounts(clears=1)
    assert [m.clears for m in traffic.timeline(T0 + 62, 2)] == [1, 2]


@pytest.mark.parametrize("n", [0, -1, 61])
def test_timeline_length_is_within_the_ring(n: int) -> None:
    with pytest.raises(ValueError, match="minutes"):
        Traffic().timeline(T0, n)


def test_a_smaller_ring() -> None:
    traffic = Traffic(minutes=5)
    traffic.record(A, HIT, T0)
    assert [m.hits for m in traffic.timeline(T0 + 4 * 60, 5)] == [1, 0, 0, 0, 0]
    assert [m.hits for m in traffic.timeline(T0 + 5 * 60, 5)] == [0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="minute"):
        Traffic(minutes=0)


@pytest.mark.slow
def test_an_event_from_an_earlier_minute_goes_to_that_minute() -> None:
    """The wall clock can step back (NTP); each event still lands in its own minute."""
    traffic = Traffic()
    traffic.record(A, HIT, T0 + 61)
    traffic.record(A, HIT, T0 + 1)
    traffic.record(A, MISS, T0 + 62)
    traffic.record_clear(A, T0 + 2)
    traffic.record(A, STALE, T0 + 63)
    assert minutes(traffic, T0 + 63, 2) == [(0, 1, 0, 1), (60, 1, 2, 0)]
