"""Waiting for another worker's fill of the same key (issue 23 §2, nginx's proxy_cache_lock).

A worker that leads a cacheable miss in its process (edge/flights.py), or the revalidation of
a stale entry, claims the key for the node (``proxy/store/shared/markers.py``). A stale entry
is then revalidated once for the node: after a Valkey loss every entry of the tier is stale
(distrusted), and each costs the origin one conditional request, not one per worker. When
another worker holds it, this worker waits for that fill's entry to appear in the shared
tier: it looks the key up again with a short backoff (each look is one read transaction on
the shared map, in this thread; the event loop sleeps between them; a stale copy in its own
memory tier gives way to a fresh one there: store/tiered.py). The wait ends:

- with the entry, once a lookup finds a response it may serve (served: a collapsed request;
  the stale entry a revalidation waits on is not one, its refreshed copy is);
- with nothing, once the other worker's marker is gone without one (its response was not
  storable, or its fetch failed): this worker fetches by itself;
- with nothing and ``timed_out``, once the marker is stale: ``[cache] lock_timeout`` has
  passed since the leader's latest progress (``Renewal`` moves the marker's deadline as the
  leader's flight moves: its headers, each piece of its body), or its worker died. This
  worker then fetches by itself and says so in Cache-Status (``detail="lock-timeout"``).
  A slow leader whose body keeps coming is followed, across workers as within one
  (edge/flights.py); one that stalls is given up after ``lock_timeout``;
- with nothing and ``timed_out``, once ``limit`` has passed since the wait began, however
  live the marker still is (WAIT_LIMIT lock timeouts: two minutes at the default): a marker
  that somehow stays live (an endless body, a leader stuck renewing) never holds a request
  for ever.

The requests of this worker that wait on its flight follow it through all of this.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple

from multidict import CIMultiDictProxy

from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.cache.policy import Serve, decide_lookup
from proxy.edge.flights import Flight
from proxy.store.base import Store
from proxy.store.shared.markers import GONE, STALE, Markers

FIRST_PAUSE = 0.005  # seconds before the first look; doubled up to LAST_PAUSE
WAIT_LIMIT = 24  # lock timeouts a wait may last at most, however live the marker
LAST_PAUSE = 0.05
LOCK_TIMEOUT_DETAIL = "lock-timeout"


class Waited(NamedTuple):
    response: StoredResponse | None  # the other worker's stored response
    timed_out: bool


async def wait_for_worker(
    *,
    store: Store,
    markers: Markers,
    domain: str,
    target: str,
    headers: CIMultiDictProxy[str],
    coding: str,
    obey: bool,
    clock: Callable[[], float],
    limit: float,
) -> Waited:
    """Wait for the fill another worker leads for ``target`` (the cache target), while its
    marker is live, ``limit`` seconds at most."""
    pause = FIRST_PAUSE
    loop = asyncio.get_running_loop()
    ends = loop.time() + limit
    while True:
        if loop.time() >= ends:
            return Waited(None, True)
        await asyncio.sleep(pause)
        pause = min(pause * 2, LAST_PAUSE)
        # The marker first: a fill commits its entry before it removes its marker, so a
        # lookup after a marker seen gone finds the entry when there is one.
        marker = markers.state(domain, target)
        found = await store.lookup(domain, target)
        decision = decide_lookup(found.variants, headers, clock(), coding, obey_request=obey)
        if isinstance(decision, Serve):
            return Waited(decision.response, False)
        if marker == GONE:  # removed without an entry: not storable, or failed
            return Waited(None, False)
        if marker == STALE:  # lock_timeout passed without progress, or the leader died
            return Waited(None, True)


class Renewal:
    """The marker of a fill this worker leads, kept live while the fill moves: at each
    progress of its flight, at most every quarter of ``lifetime``, its deadline is moved to
    ``lifetime`` from then. ``release`` removes it when the flight lands."""

    def __init__(
        self,
        markers: Markers,
        key: CacheKey,
        text: str,
        lifetime: float,
        flight: Flight | None,
    ) -> None:
        self._markers, self._domain, self._target = markers, key[0], key[2]
        self.text, self._lifetime = text, lifetime
        self._due = asyncio.get_running_loop().time() + lifetime / 4
        if flight is not None and text:  # "": led unmarked (a fault), nothing to renew
            flight.on_progress = self._progressed

    def _progressed(self, now: float) -> None:
        if now < self._due:
            return
        self._due = now + self._lifetime / 4
        renewed = self._markers.renew(self._domain, self._target, self.text, self._lifetime)
        if renewed is not None:
            self.text = renewed

    def release(self) -> None:
        self._markers.release(self._domain, self._target, self.text)
