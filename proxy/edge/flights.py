"""Request collapsing: one origin request per key, however many clients miss at once.

The first request to miss a key leads a Flight; the others wait on it. The leader finishes
the flight with what the waiters may use: the stored response, the origin error (so an origin
outage is not multiplied by the number of waiting clients), or None when the response could
not be shared (not storable, or too large), in which case each waiter asks the origin itself.

Keys carry the domain's generation, so a request that arrives after a clear never joins a
flight that started before it.
"""

from __future__ import annotations

import asyncio

from proxy.core.entry import CacheKey, StoredResponse
from proxy.errors import OriginError

FlightResult = StoredResponse | OriginError | None


class Flight:
    __slots__ = ("_future", "waiters")

    def __init__(self) -> None:
        self._future: asyncio.Future[FlightResult] = asyncio.get_running_loop().create_future()
        self.waiters = 0  # requests waiting on the leader; for metrics and tests

    def finish(self, result: FlightResult) -> None:
        if not self._future.done():
            self._future.set_result(result)

    async def wait(self, patience: float) -> FlightResult:
        """The leader's result, or None if it takes longer than ``patience`` seconds."""
        self.waiters += 1
        try:
            async with asyncio.timeout(patience):
                return await asyncio.shield(self._future)
        except TimeoutError:
            return None
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
