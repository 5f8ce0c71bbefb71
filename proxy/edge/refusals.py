"""Refusals remembered per key, as Varnish's hit-for-miss objects are (issue 34 §3).

A fill whose answer may not be stored (``private``, ``no-store``, a Set-Cookie, too large...)
leaves its reason here for ``REMEMBER`` seconds, by domain and cache target. Two uses:

- **No waiting list for it.** The next miss of the key asks the origin at once. Without
  this, it would wait for the key's leader, whose answer most likely cannot be shared; the
  leader releases its waiters only when the origin's headers arrive, so each waiter pays two
  origin round trips instead of one (measured in decision 0054). Such a fill may still store
  its answer: a key whose answers became cacheable is stored by its next miss, which forgets
  the refusal. This is hit-for-miss, not hit-for-pass.
- **The trace says why.** A trace without ``--fetch`` of a refused key said only "0
  variants"; it now gives the reason, the status and how long ago.

A 5xx answer is not remembered: collapsing is what keeps an origin in trouble from getting
one request per client. Nor is a background revalidation's (no client was waiting).

Bounded: at most ``MAX_KEYS`` keys per process, the least recently refused forgotten first.
An entry is a small tuple and two strings (about 300 bytes with a 100-byte target), so the
whole is about 3 MB at most. Per process: each edge worker remembers its own refusals.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from proxy.core.cache.trace import Held

REMEMBER = 120.0  # seconds: Varnish's built-in VCL gives its hit-for-miss objects 120 s
MAX_KEYS = 10_000


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the last fill of a key was not stored: the reason (``DontStore``'s, or the
    edge's: ``too-large``, ``fill-budget``...), the origin's status, and when (wall clock)."""

    reason: str
    status: int
    at: float


class Refusals:
    """The recent refusals of one process, bounded (see the module's docstring)."""

    def __init__(self, *, remember: float = REMEMBER, max_keys: int = MAX_KEYS) -> None:
        self.remember = remember
        self.max_keys = max_keys
        self._by_key: OrderedDict[tuple[str, str], Refusal] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_key)

    def refused(self, domain: str, target: str, reason: str, status: int, now: float) -> None:
        """A fill of ``target`` (a cache target) got an answer it did not store."""
        if status >= 500:
            return
        key = (domain, target)
        self._by_key[key] = Refusal(reason, status, now)
        self._by_key.move_to_end(key)
        while len(self._by_key) > self.max_keys:
            self._by_key.popitem(last=False)

    def recent(self, domain: str, target: str, now: float) -> Refusal | None:
        """The key's refusal if it is at most ``remember`` seconds old."""
        found = self._by_key.get((domain, target))
        if found is None:
            return None
        if now - found.at > self.remember:
            del self._by_key[(domain, target)]
            return None
        return found

    def stored(self, domain: str, target: str) -> None:
        """A fill of the key stored its answer: it is cacheable again."""
        self._by_key.pop((domain, target), None)


def with_refusals(
    inspect: Callable[[str, str], Held], refusals: Refusals, clock: Callable[[], float]
) -> Callable[[str, str], Held]:
    """``inspect`` (a store's read for a trace) with the key's recent refusal, if any."""

    def inspected(domain: str, target: str) -> Held:
        held = inspect(domain, target)
        found = refusals.recent(domain, target, clock())
        if found is None:
            return held
        return replace(held, refused=(found.reason, found.status, found.at))

    return inspected
