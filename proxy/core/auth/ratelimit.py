"""Slowing down guessing: failures counted per key (an address, a user name). No I/O.

One throttle, ``FailureThrottle``, keeps the failures of each key and says how long a key must
wait before its next attempt; a rule says what the failures cost:

- ``SlidingWindow`` (the clear-cache API, per address): a key that failed ``allowed`` times
  within ``window`` seconds waits until the oldest of those failures leaves the window.
- ``DoublingDelay`` (dashboard sign-in, per user name and per address): the first ``free``
  failures cost nothing, since people mistype passwords; each further one makes the key wait
  twice as long as the one before (``base``, ``2 * base``...), capped at ``max_delay``. A key
  quiet for ``forget_after`` seconds starts again. The cap bounds how long someone who knows
  an admin's name can lock that admin out.

An attempt made while a key must wait is refused without being checked, so a guesser gets at
most one guess per wait, whatever rate it sends at. A success forgets the key. At most
``max_keys`` keys are tracked (the one whose last failure is oldest is forgotten first), and a
key keeps only the failure times its rule needs, so memory is bounded whatever a flood of
addresses or names does. Forgetting a key early can only let it try sooner.

Every wait is clamped to the rule's ``cap``, so a clock stepping backwards cannot make anyone
wait longer than the rule allows.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

DEFAULT_MAX_KEYS = 10_000


class Rule(Protocol):
    @property
    def kept(self) -> int:
        """How many of a key's newest failure times the rule needs."""

    @property
    def cap(self) -> float:
        """The longest wait the rule can impose, in seconds."""

    @property
    def forget_after(self) -> float:
        """Seconds after a key's last failure when its failures stop counting."""

    def blocked_until(self, failures: int, times: Sequence[float]) -> float:
        """When a key may try again after its ``failures``-th failure; ``times`` are its newest."""


@dataclass(frozen=True, slots=True)
class SlidingWindow:
    """At most ``allowed`` failures within ``window`` seconds."""

    allowed: int
    window: float

    def __post_init__(self) -> None:
        if self.allowed < 1:
            raise ValueError("allowed must be at least 1")
        if not self.window > 0:
            raise ValueError("window must be greater than zero")

    @property
    def kept(self) -> int:
        return self.allowed

    @property
    def cap(self) -> float:
        return self.window

    @property
    def forget_after(self) -> float:
        return self.window

    def blocked_until(self, failures: int, times: Sequence[float]) -> float:
        # Blocked while the oldest of the newest `allowed` failures is inside the window.
        return times[0] + self.window if len(times) == self.allowed else -math.inf


@dataclass(frozen=True, slots=True)
class DoublingDelay:
    """``free`` failures, then waits doubling from ``base`` up to ``max_delay``."""

    free: int
    max_delay: float
    base: float = 1.0
    forget_after: float = 86_400.0

    def __post_init__(self) -> None:
        if self.free < 0:
            raise ValueError("free must not be negative")
        if not (self.base > 0 and self.max_delay >= self.base and self.forget_after > 0):
            raise ValueError("need 0 < base <= max_delay and forget_after > 0")

    @property
    def kept(self) -> int:
        return 1  # the last failure: waits count from it

    @property
    def cap(self) -> float:
        return self.max_delay

    def delay_after(self, failures: int) -> float:
        """The wait imposed after a key's ``failures``-th failure in a row."""
        excess = failures - self.free
        if excess <= 0:
            return 0.0
        # 2**excess overflows a float long before the cap matters; stop doubling at the cap.
        doublings = min(excess - 1, 64)
        return min(self.max_delay, self.base * 2.0**doublings)

    def blocked_until(self, failures: int, times: Sequence[float]) -> float:
        return times[-1] + self.delay_after(failures)


@dataclass(slots=True)
class _Failures:
    count: int
    times: deque[float]  # the newest, oldest first; times[-1] is the last failure
    blocked_until: float


class FailureThrottle:
    """Failures per key and the wait they impose under ``rule``. Callers pass ``now``."""

    def __init__(self, rule: Rule, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self._rule = rule
        self._max_keys = max_keys
        # key -> its failures; keys in the order of their last failure, oldest first.
        self._keys: OrderedDict[str, _Failures] = OrderedDict()

    def __len__(self) -> int:
        """How many keys are tracked."""
        return len(self._keys)

    def record_failure(self, key: str, now: float) -> None:
        entry = self._current(key, now)
        if entry is None:
            entry = _Failures(count=0, times=deque(maxlen=self._rule.kept), blocked_until=now)
            self._keys[key] = entry
            while len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(key)
        entry.count += 1
        entry.times.append(now)
        entry.blocked_until = self._rule.blocked_until(entry.count, entry.times)

    def record_success(self, key: str) -> None:
        self._keys.pop(key, None)

    def retry_after(self, key: str, now: float) -> int | None:
        """Whole seconds (at least 1) until ``key`` may try again, or None if it may now."""
        entry = self._current(key, now)
        if entry is None or entry.blocked_until <= now:
            return None
        return max(1, math.ceil(min(entry.blocked_until - now, self._rule.cap)))

    def _current(self, key: str, now: float) -> _Failures | None:
        entry = self._keys.get(key)
        if entry is not None and now - entry.times[-1] >= self._rule.forget_after:
            del self._keys[key]
            return None
        return entry
