"""Reclaiming cleared generations: the memory store's lurker.

A clear moves a domain to a new generation and leaves the old bucket's keys where they are
(memory.py: the clear costs the same with 10 or 1,000,000 entries). The bucket is queued
here, doomed; ``Doomed.reclaim`` then deletes its keys a slice at a time, between requests,
newest listed first, until the bucket is empty and forgotten. Until then the old entries
count against max_bytes and may be evicted like any other, so the memory bound holds
throughout; a key evicted or invalidated before its turn is found gone and skipped.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from proxy.store.entries import Bucket, Key

RECLAIM_CHECK = 32  # keys between clock reads in a time-bounded reclaim


class Doomed:
    """The buckets of cleared generations, oldest clear first, and how many of their keys
    are still stored (``pending``: the store lowers it as it drops any of them)."""

    __slots__ = ("buckets", "pending")

    def __init__(self) -> None:
        self.buckets: deque[tuple[str, int]] = deque()
        self.pending = 0

    def add(self, name: tuple[str, int], live: int) -> None:
        self.buckets.append(name)
        self.pending += live

    def reclaim(
        self,
        budget: int,
        seconds: float | None,
        buckets: dict[tuple[str, int], Bucket],
        drop: Callable[[Key], int],
    ) -> int:
        """Unlist at most ``budget`` keys of doomed buckets, dropping each with ``drop`` (the
        store's: the number of variants it held, 0 when the key was gone already), and stop
        once ``seconds`` have passed (checked every RECLAIM_CHECK keys); return how many keys
        were dropped. The time bound keeps a slice short when freeing is slow (large bodies,
        a busy machine), so requests waiting behind it are not held up."""
        deadline = None if seconds is None else time.perf_counter() + seconds
        done = visited = 0
        while visited < budget and self.buckets:
            name = self.buckets[0]
            bucket = buckets[name]
            while visited < budget and bucket.live:
                if (
                    deadline is not None
                    and visited % RECLAIM_CHECK == RECLAIM_CHECK - 1
                    and time.perf_counter() > deadline
                ):
                    return done
                visited += 1
                if drop(bucket.pop()):  # else dropped before, or listed twice
                    done += 1
            if not bucket.live:
                self.buckets.popleft()
                del buckets[name]
        return done
