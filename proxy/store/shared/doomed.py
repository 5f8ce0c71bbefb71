"""Entries a reader found dead or corrupt, handed to the next write that removes them.

A reader never writes LMDB (decision 0030): a lookup that finds an entry a hard purge covers,
or a record that fails its checks, only names it here, and the next write transaction of this
process (a fill's commit, in the tier's writer thread) removes it. Readers add from the event
loop or a read thread while the writer takes, so the list changes hands whole, under a lock:
``take`` swaps it for an empty one (an entry added during a commit waits for the next), and a
transaction that aborts gives back what it took (``give_back``), so no entry is lost.

Bounded (MAX): an entry never removed here is still never served, and is evicted in its turn.
"""

from __future__ import annotations

import threading

MAX = 4096  # dead entries remembered for removal by this process's next write


class Doomed:
    __slots__ = ("_entries", "_keys", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[tuple[bytes, int]] = []  # (entry key, sequence; -1: any)
        self._keys: set[bytes] = set()

    def add(self, key: bytes, sequence: int) -> None:
        with self._lock:
            if len(self._entries) < MAX:
                self._entries.append((key, sequence))
                self._keys.add(key)

    def take(self) -> list[tuple[bytes, int]]:
        """Every entry named so far, and none left: the caller's to remove."""
        with self._lock:
            taken, self._entries = self._entries, []
            self._keys = set()
        return taken

    def give_back(self, entries: list[tuple[bytes, int]]) -> None:
        """Entries ``take`` gave to a write that did not commit: removed by a later one."""
        with self._lock:
            room = MAX - len(self._entries)
            self._entries[:0] = entries[:room]
            self._keys.update(key for key, _ in entries[:room])

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._entries)
