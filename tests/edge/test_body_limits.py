"""The rules of decision 0032 one by one: a body's pace (``Pace``), the budget for buffered
bodies (``BodyBudget``), the per-client count of ``ConnectionGuard``, and the config values
that set them. The end-to-end behaviour, against ``cdn-proxy serve``, is in
tests/reliability/test_body_budget.py and test_client_limits.py."""

from __future__ import annotations

import pytest

from proxy.config import values
from proxy.edge.bodies import BodyBudget, Pace
from proxy.edge.connections import ConnectionGuard, per_client_share
from proxy.errors import ConfigError
from proxy.observe.connection_metrics import CONNECTION_FIGURES

# (reads as (bytes, seconds waited for them), the wait then allowed, and whether its end
# would be "too slow"), with timeout = 10 s and min_rate = 100 B/s: 1,000 bytes a window.
PACES = [
    ([], (10.0, True)),
    ([(400, 3.0)], (7.0, True)),  # the window's rest: 600 bytes still due in 7 s
    ([(1000, 3.0)], (10.0, False)),  # met: only the timeout between pieces
    ([(1000, 3.0), (1, 9.0)], (8.0, True)),  # a new window 2 s old, 1 byte of 1,000 in it
    ([(1, 9.9)], (0.1, True)),  # a trickle: its window ends in 0.1 s
    ([(1000, 9.0), (1000, 10.0), (10, 0.5)], (10.0, False)),  # second window, met
    ([(1000, 9.0), (1000, 10.0), (10, 1.5)], (9.5, True)),  # third window, 0.5 s in
]


@pytest.mark.parametrize(("reads", "expected"), PACES)
def test_a_body_must_bring_min_rate_times_timeout_bytes_in_each_window(
    reads: list[tuple[int, float]], expected: tuple[float, bool]
) -> None:
    pace = Pace(10.0, 100)
    for size, waited in reads:
        pace.took(size, waited)
    seconds, for_rate = pace.wait()
    assert (round(seconds, 6), for_rate) == expected


def test_without_a_minimum_rate_only_the_timeout_between_pieces_applies() -> None:
    pace = Pace(10.0, 0)
    pace.took(1, 9.9)
    assert pace.wait() == (10.0, False)


def test_time_not_spent_waiting_for_the_client_does_not_count() -> None:
    """A streamed body blocked on a slow origin between reads: only the reads' waits count,
    so 999 bytes after 9 s of waiting leave 1 s for the last byte of the window, whatever
    the wall clock says."""
    pace = Pace(10.0, 100)
    pace.took(999, 9.0)
    assert pace.wait() == (1.0, True)


def test_the_budget_takes_only_what_it_has_room_for() -> None:
    budget = BodyBudget(100)
    assert budget.take(60)
    assert budget.free == 40
    assert not budget.take(41)
    assert budget.take(40)
    assert budget.free == 0
    budget.give_back(100)
    assert budget.figures() == [0, 100, 0, 0]


async def test_one_address_is_held_to_its_share_and_others_are_not() -> None:
    guard = ConnectionGuard("edge", limit=10, header_timeout=1, keepalive_timeout=1, per_client=2)
    assert guard.admit("192.0.2.1") and guard.admit("192.0.2.1")
    assert not guard.admit("192.0.2.1")
    assert guard.admit("192.0.2.2")
    assert guard.admit(None)  # no address (a Unix socket): only the listener's limit
    assert (guard.open, guard.refused, guard.refused_per_client) == (4, 0, 1)
    guard.release("192.0.2.1")
    assert guard.held_by("192.0.2.1") == 1
    assert guard.admit("192.0.2.1")
    for peer in ("192.0.2.1", "192.0.2.1", "192.0.2.2", None):
        guard.release(peer)
    assert (guard.open, guard.held_by("192.0.2.1"), guard.held_by("192.0.2.2")) == (0, 0, 0)
    figures = guard.figures()
    assert len(figures) == CONNECTION_FIGURES
    assert figures[7:9] == [1, 2]  # refused per client, the per-client limit
    guard.close()


async def test_the_listener_limit_is_met_before_the_per_client_one() -> None:
    guard = ConnectionGuard("edge", limit=1, header_timeout=1, keepalive_timeout=1, per_client=5)
    assert guard.admit("192.0.2.1")
    assert not guard.admit("192.0.2.2")
    assert (guard.refused, guard.refused_per_client) == (1, 0)
    guard.close()


@pytest.mark.parametrize(
    ("configured", "limit", "workers", "share"),
    [
        (None, 18_656, 1, 1024),  # auto: a quarter, at most 1,024
        (None, 416, 1, 104),
        (None, 2, 1, 1),
        (100, 1000, 1, 100),
        (100, 1000, 3, 34),  # each worker its share of the node's total, rounded up
        (0, 1000, 2, 0),  # off
    ],
)
def test_per_client_share(configured: int | None, limit: int, workers: int, share: int) -> None:
    assert per_client_share(configured, limit, workers) == share


@pytest.mark.parametrize(("value", "expected"), [("auto", None), (0, 0), (256, 256)])
def test_max_connections_per_client_values(value: object, expected: int | None) -> None:
    assert values.per_client_connections("edge.max_connections_per_client", value) == expected


@pytest.mark.parametrize("value", [-1, True, "many", 1.5])
def test_bad_max_connections_per_client_values(value: object) -> None:
    with pytest.raises(ConfigError, match="max_connections_per_client"):
        values.per_client_connections("edge.max_connections_per_client", value)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (500, 500), ("1KiB", 1024)])
def test_body_min_rate_values(value: object, expected: int) -> None:
    assert values.rate("edge.body_min_rate", value) == expected


@pytest.mark.slow
@pytest.mark.parametrize("value", [-5, False, "fast"])
def test_bad_body_min_rate_values(value: object) -> None:
    with pytest.raises(ConfigError, match="body_min_rate"):
        values.rate("edge.body_min_rate", value)
