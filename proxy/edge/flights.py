"""Request collapsing: one origin request per key, however many clients miss at once.

The first request to miss a key leads a Flight; the others wait on it. The leader finishes
the flight with what the waiters may use: the stored response, the origin error (so an origin
outage is not multiplied by the number of waiting clients), or None when the response could
not be shared (not storable, or too large), in which case each waiter asks the origin itself.
The leader finishes it as soon as it knows, so waiters are never held behind a response that
can never be shared (one streamed to its client because it is too large, for instance).

Waiters follow the leader while its response makes progress, not for a fixed time: the
leader records each step (``progress``: the headers arrived, body bytes arrived) in the
flight, and a waiter gives up, as if the answer were not shareable, only once the leader has
made none for as long as ``proxy.core.cache.collapsing.give_up_at`` allows. A waiter sleeps until
that moment and then looks at the record again, so a body arriving in many pieces costs the
leader one clock read per piece and wakes no waiter.

Keys carry the domain's generation, so a request that arrives after a clear never joins a
flight that started before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from proxy.core.cache.collapsing import give_up_at
from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.errors import OriginError

FlightResult = StoredResponse | OriginError | None


class Flight:
    __slots__ = (
        "_future",
        "_loop",
        "on_progress",
        "position",
        "progressed",
        "started",
        "waiters",
    )

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._future: asyncio.Future[FlightResult] = self._loop.create_future()
        # The record of progress, on the loop's monotonic clock: when the leader started,
        # and when its response last moved (None until its headers arrive).
        self.started = self._loop.time()
        self.progressed: float | None = None
        self.waiters = 0  # requests waiting on the leader; for metrics and tests
        # Told of each progress (the node's fill marker: edge/node_fills.py's Renewal).
        self.on_progress: Callable[[float], None] | None = None
        # With peer fills, the fleet purge position applied when it began (edge/peer_fill.py
        # ``may_follow``); None: unknown, and no peer's request follows it.
        self.position: tuple[str, int] | None = None

    def progress(self) -> None:
        """The leader's response moved: its headers arrived, or more of its body did."""
        self.progressed = now = self._loop.time()
        if self.on_progress is not None:
            self.on_progress(now)

    def finish(self, result: FlightResult) -> None:
        if not self._future.done():
            self._future.set_result(result)

    async def wait(self, *, connect_timeout: float, read_timeout: float) -> FlightResult:
        """The leader's result, or None once the leader has made no progress for too long
        (see ``give_up_at``)."""
        self.waiters += 1
        try:
            while not self._future.done():
                deadline = give_up_at(
                    started=self.started,
                    progressed=self.progressed,
                    connect_timeout=connect_timeout,
                    read_timeout=read_timeout,
                )
                if deadline <= self._loop.time():
                    return None
                try:
                    async with asyncio.timeout_at(deadline):
                        return await asyncio.shield(self._future)
                except TimeoutError:
                    continue  # the leader may have moved since: look at the record again
            return self._future.result()
        finally:
            self.waiters -= 1


class Flights:
    def __init__(self) -> None:
        self._flights: dict[CacheKey, Flight] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def get(self, key: CacheKey) -> Flight | None:
        return self._flights.get(key)

    def join(self, key: CacheKey) -> tuple[Flight, bool]:
        """The flight for the key and whether the caller leads it."""
        flight = self._flights.get(key)
        if flight is not None:
            return flight, False
        flight = self._flights[key] = Flight()
        return flight, True

    def land(self, key: CacheKey, flight: Flight, result: FlightResult) -> None:
        """Finish the flight and forget it. Safe to call more than once."""
        flight.finish(result)
        if self._flights.get(key) is flight:
            del self._flights[key]
