"""Growing delays after repeated failed sign-ins, per key (a user name, an address). No I/O.

The first ``free`` failures of a key cost nothing: people mistype passwords. Each failure
after that makes the key wait before its next attempt, twice as long as the one before:
``base``, ``2 * base``, ``4 * base``... capped at ``max_delay``. An attempt made while a key
must wait is refused without being checked, so a guesser gets at most one guess per delay,
whatever rate it sends at. A success forgets the key; so do ``forget_after`` seconds without
a failure.

Keys are kept per user name *and* per address: the first stops a botnet spreading guesses
for one account over many addresses, the second stops one address trying many accounts. The
price of the per-name key is that someone who knows an admin's name can make that admin
wait too; the delay is capped so that such a lockout is never longer than ``max_delay``.

At most ``max_keys`` keys are tracked (the one idle longest is forgotten first), so memory
is bounded whatever a flood of names or addresses does.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_MAX_KEYS = 10_000


@dataclass(slots=True)
class _Failures:
    count: int
    last: float
    blocked_until: float


class FailureBackoff:
    """Per-key failure counts and the delay they impose. Callers pass ``now`` in seconds."""

    def __init__(
        self,
        *,
        free: int,
        max_delay: float,
        base: float = 1.0,
        forget_after: float = 86_400.0,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        if free < 0:
            raise ValueError("free must not be negative")
        if not (base > 0 and max_delay >= base and forget_after > 0):
            raise ValueError("need 0 < base <= max_delay and forget_after > 0")
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self.free = free
        self.base = base
        self.max_delay = max_delay
        self.forget_after = forget_after
        self.max_keys = max_keys
        self._keys: OrderedDict[str, _Failures] = OrderedDict()

    def __len__(self) -> int:
        """How many keys are tracked."""
        return len(self._keys)

    def delay_after(self, failures: int) -> float:
        """The wait imposed after a key's ``failures``-th failure in a row."""
        excess = failures - self.free
        if excess <= 0:
            return 0.0
        # 2**excess overflows a float long before the cap matters; stop doubling at the cap.
        doublings = min(excess - 1, 64)
        return min(self.max_delay, self.base * 2.0**doublings)

    def record_failure(self, key: str, now: float) -> None:
        entry = self._current(key, now)
        if entry is None:
            entry = self._keys[key] = _Failures(count=0, last=now, blocked_until=now)
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(key)
        entry.count += 1
        entry.last = now
        entry.blocked_until = now + self.delay_after(entry.count)

    def record_success(self, key: str) -> None:
        self._keys.pop(key, None)

    def retry_after(self, key: str, now: float) -> int | None:
        """Whole seconds (at least 1) until ``key`` may try again, or None if it may now."""
        entry = self._current(key, now)
        if entry is None or entry.blocked_until <= now:
            return None
        # Clamped so a clock stepping backwards cannot make anyone wait longer than the cap.
        return max(1, math.ceil(min(entry.blocked_until - now, self.max_delay)))

    def _current(self, key: str, now: float) -> _Failures | None:
        entry = self._keys.get(key)
        if entry is not None and now - entry.last >= self.forget_after:
            del self._keys[key]
            return None
        return entry
