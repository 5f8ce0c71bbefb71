"""Waiting for another worker's fill of the same key (issue 23 §2, nginx's proxy_cache_lock).

A worker that leads a cacheable miss in its process (edge/flights.py) claims the key for the
node (``proxy/store/shared/markers.py``). When another worker holds it, this worker waits for
that fill's entry to appear in the shared tier: it looks the key up again with a short
backoff (each look is one read transaction on the shared map, in this thread; the event loop
sleeps between them). The wait ends:

- with the entry, once a lookup finds a response it may serve (served: a collapsed request);
- with nothing, once the other worker's marker is gone without one (its response was not
  storable, or its fetch failed): this worker fetches by itself;
- with nothing and ``timed_out``, once ``[cache] lock_timeout`` has passed (for this
  worker, or for the marker, written with that lifetime, or its worker died): this worker
  fetches by itself and says so in Cache-Status (``detail="lock-timeout"``).

The requests of this worker that wait on its flight follow it through all of this.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple

from multidict import CIMultiDictProxy

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.policy import Serve, decide_lookup
from proxy.store.base import Store
from proxy.store.shared.markers import GONE, STALE, Markers

FIRST_PAUSE = 0.005  # seconds before the first look; doubled up to LAST_PAUSE
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
    wait_max: float,
) -> Waited:
    """Wait for the fill another worker leads for ``target`` (the cache target)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_max
    pause = FIRST_PAUSE
    while True:
        await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
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
        if marker == STALE or loop.time() >= deadline:  # the marker outlived its lock timeout
            return Waited(None, True)
