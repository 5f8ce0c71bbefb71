"""Counting failed authentications per client, to slow down token guessing. No I/O.

A sliding window: a client that failed ``allowed`` times within ``window`` seconds is blocked
until the oldest of those failures leaves the window. Only the newest ``allowed`` failure
times of a client matter, so no more are kept, and at most ``max_clients`` clients are
tracked (the one whose last failure is oldest is forgotten first). Memory is therefore
bounded by ``max_clients * allowed`` timestamps, whatever a flood of addresses does.

Forgetting a client early can only let it try sooner, never block an innocent one.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

DEFAULT_MAX_CLIENTS = 10_000


class FailureLimiter:
    """Failures per client in a sliding window. Callers pass ``now`` in seconds."""

    def __init__(
        self, allowed: int, window: float, *, max_clients: int = DEFAULT_MAX_CLIENTS
    ) -> None:
        if allowed < 1:
            raise ValueError("allowed must be at least 1")
        if not window > 0:
            raise ValueError("window must be greater than zero")
        if max_clients < 1:
            raise ValueError("max_clients must be at least 1")
        self.allowed = allowed
        self.window = window
        self.max_clients = max_clients
        # client -> its newest failure times, oldest first; clients in order of last failure.
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        """How many clients are tracked."""
        return len(self._failures)

    def record_failure(self, client: str, now: float) -> None:
        times = self._failures.get(client)
        if times is None:
            times = self._failures[client] = deque(maxlen=self.allowed)
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(client)
        times.append(now)

    def retry_after(self, client: str, now: float) -> int | None:
        """Whole seconds (at least 1) until the client may try again, or None if not blocked."""
        times = self._failures.get(client)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        if len(times) < self.allowed:
            return None
        # Clamped to the window so a clock stepping backwards cannot block a client for longer.
        wait = min(times[0] + self.window - now, self.window)
        return max(1, math.ceil(wait))
