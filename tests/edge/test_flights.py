"""Flights: waiters follow their leader's progress, and give up only when it stops.

The leader here is the test, recording progress at a pace of its own; the bounds come from
``proxy.core.cache.collapsing.give_up_at`` (tested in tests/core/test_collapsing.py).
"""

from __future__ import annotations

import asyncio

import pytest

from proxy.core.cache.collapsing import LEADER_FIRST
from proxy.edge.flights import Flight, Flights
from proxy.errors import OriginTimeout
from tests.polling import until

CONNECT, READ = 0.05, 0.1
KEY = ("example.com", 0, "/k")


def waiting(flight: Flight) -> asyncio.Task[object]:
    return asyncio.create_task(flight.wait(connect_timeout=CONNECT, read_timeout=READ))


@pytest.mark.slow
async def test_a_waiter_follows_a_leader_that_keeps_moving_past_the_old_total_patience() -> None:
    flight, leading = Flights().join(KEY)
    assert leading
    waiter = waiting(flight)
    await until(lambda: flight.waiters == 1)
    loop = asyncio.get_running_loop()
    began = loop.time()
    flight.progress()  # the headers
    # Body pieces every READ / 2 for three times the whole pre-headers bound.
    while loop.time() - began < 3 * (CONNECT + READ + LEADER_FIRST):
        await asyncio.sleep(READ / 2)  # the leader's pace, not synchronisation
        assert not waiter.done()
        flight.progress()
    result = OriginTimeout("example.com: late")
    flight.finish(result)
    assert await waiter is result
    assert flight.waiters == 0


async def test_a_waiter_gives_up_on_a_leader_that_never_gets_headers() -> None:
    flight = Flight()
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(5):
        assert await waiting(flight) is None
    assert loop.time() - flight.started >= CONNECT + READ + LEADER_FIRST
    assert flight.waiters == 0


@pytest.mark.slow
async def test_a_waiter_gives_up_one_read_timeout_after_the_leader_stops_moving() -> None:
    flight = Flight()
    loop = asyncio.get_running_loop()
    waiter = waiting(flight)
    flight.progress()
    # Moving for longer than the pre-headers bound, then stopping.
    while loop.time() - flight.started < CONNECT + READ + LEADER_FIRST + READ:
        await asyncio.sleep(READ / 2)  # the leader's pace, not synchronisation
        flight.progress()
    assert not waiter.done()
    stopped = flight.progressed
    assert stopped is not None
    async with asyncio.timeout(5):
        assert await waiter is None
    assert loop.time() >= stopped + READ + LEADER_FIRST


@pytest.mark.slow
async def test_a_waiter_that_goes_away_leaves_the_flight_to_the_others() -> None:
    flight = Flight()
    gone, staying = waiting(flight), waiting(flight)
    await until(lambda: flight.waiters == 2)
    gone.cancel()
    await until(gone.done)
    assert flight.waiters == 1
    result = OriginTimeout("example.com: late")
    flight.finish(result)  # the shared result was not cancelled with the waiter that left
    assert await staying is result
