"""Hit counters of the shared tier: one byte per slot in a file every process of the node maps.

S3-FIFO (s3fifo.py) needs to know which entries were hit since they came in, and a hit in the
shared tier happens in any process of the node, in the caller's thread, in a read transaction:
a reader never writes LMDB (decision 0030), and a hit must cost neither a write transaction
nor an fsync. So a hit raises a counter in a shared map instead: ``counters[slot] += 1``, a
store into a page of a ``MAP_SHARED`` file, up to MAX (S3-FIFO reads at most 3). The writer
thread of whichever process evicts reads and lowers them in its write transaction.

- **Slots:** an entry's counter is at ``sequence % slots`` (its sequence is unique and never
  changes while it is stored, and the commit picks it so that no other stored entry has that
  slot: s3fifo.py). A fill resets its slot to 0. When nearly every slot is taken (more
  entries than slots), two entries may share one: each gets the other's hits, an
  approximation (as a count-min sketch's), never a wrong answer. ``slots`` grows with the
  tier (one per KiB of ``disk_max_bytes``, a power of two between 4,096 and 16,777,216): a
  1 GiB tier maps 1 MiB.
- **No lock:** two processes raising one counter at once may lose one increment; that costs
  one hit's credit in an eviction decision, nothing else.
- **Durable enough:** the file is in the cache directory, so counters survive a restart with
  the queues (the kernel writes the pages back). A power loss empties the entries anyway.
- **Never shrunk:** another process may map it (a store past the end of a file is SIGBUS); a
  tier made smaller keeps the larger file.
- **Faults:** the file is allocated whole when made (``posix_fallocate``), so a store into the
  map never needs a new block: a full disk cannot turn a hit into SIGBUS. When the file cannot
  be made or mapped (full, read-only, gone), the counters are this process's memory: eviction
  still works, with only this process's hits, and the tier says why (degraded).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from proxy.store.shared.health import Health

FILE = "hits"
MAX = 3  # S3-FIFO's counters count to 3 at most
MIN_SLOTS, MAX_SLOTS = 1 << 12, 1 << 24
BYTES_PER_SLOT = 1024  # of the tier's capacity


def slots_for(capacity: int) -> int:
    """A power of two: one slot per BYTES_PER_SLOT of capacity, within bounds."""
    wanted = max(MIN_SLOTS, min(MAX_SLOTS, capacity // BYTES_PER_SLOT))
    return 1 << (wanted - 1).bit_length()


class HitCounters:
    def __init__(self, directory: Path, capacity: int, health: Health) -> None:
        self.slots = slots_for(capacity)
        self.shared = False  # whether the counters are the node's file (else this process's)
        self._map: mmap.mmap | None = None
        try:
            self._map, self.slots = _map_file(directory / FILE, self.slots)
            # Read and raised in place by the shared tier's fast path too (``TierReads.peek``).
            self.counts: mmap.mmap | bytearray = self._map
            self.shared = True
        except (OSError, ValueError) as error:
            health.fault("hit counters (this process's own until restarted)", error)
            self.counts = bytearray(self.slots)
        self.mask = self.slots - 1

    def hit(self, sequence: int) -> None:
        """A hit of the entry stored under ``sequence``: its counter, up to MAX."""
        slot = sequence & self.mask
        counters = self.counts
        count = counters[slot]
        if count < MAX:
            counters[slot] = count + 1

    def get(self, sequence: int) -> int:
        return self.counts[sequence & self.mask]

    def set(self, sequence: int, count: int) -> None:
        self.counts[sequence & self.mask] = max(0, min(count, MAX))

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
            self.counts = bytearray(self.slots)


def _map_file(path: Path, wanted: int) -> tuple[mmap.mmap, int]:
    """The file mapped, and its slots: ``wanted``, or more when another process (a larger
    ``disk_max_bytes`` before a restart) made it larger. Never shrunk: another process may
    map it, and a store past the end of a file is SIGBUS."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        slots = size if size > wanted and size & (size - 1) == 0 else wanted
        os.posix_fallocate(fd, 0, slots)  # every block now: a store never finds the disk full
        return mmap.mmap(fd, slots, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE), slots
    finally:
        os.close(fd)
