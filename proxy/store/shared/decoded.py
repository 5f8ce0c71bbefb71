"""Records this process has checked and decoded, kept with the exact bytes they came from
(decision 0056): the fast path's read (``SharedTier.peek``) decodes a record once per version.

A hit from the shared tier still reads its record in a read transaction every time (so a
purge, a new fill, a removal or any change to its bytes is seen at once), but decoding it is
most of what it costs: the CRC of the whole record, ``marshal.loads`` of its metadata, the
body copied out. So ``peek`` keeps, by entry key, the record's bytes as read and what it
decoded from them, and the next read of the key compares the bytes it finds with those
(``==`` of two bytes objects: ``memcmp``, some 30 instructions a KiB against the CRC's 5,000),
and reuses the decoded hit only when they are equal, byte for byte. A record that changed in
any way, a corrupted one included, is not equal, and is checked and decoded afresh, as if
never seen: integrity is exactly the CRC's, the check is only not repeated on bytes it has
already passed.

Bounded (MAX_BYTES of records and their decoded copies, in this process): past it the
oldest are dropped first. Used from one thread (the event loop's), so plain dict steps.
"""

from __future__ import annotations

from proxy.store.shared.records import SharedHit

MAX_BYTES = 8 << 20  # each kept record counts twice (its bytes, and its body decoded)
OVERHEAD = 512  # what a kept record costs besides its bytes: the tuples, the hit lines


class Decoded(dict[bytes, tuple[bytes, int, int, SharedHit]]):
    """Entry key -> (the record's bytes, its flags, its sequence, its hit): a dict, so that
    the fast path's ``get`` is a C call."""

    __slots__ = ("bytes", "max_bytes")

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        super().__init__()
        self.bytes = 0
        self.max_bytes = max_bytes

    def keep(self, key: bytes, record: bytes, flags: int, sequence: int, hit: SharedHit) -> None:
        """Keep what ``record`` (under ``key``) decoded to, in place of what the key held,
        dropping the oldest kept records past ``max_bytes``."""
        cost = _cost(record)
        if cost > self.max_bytes:
            return
        old = self.pop(key, None)
        if old is not None:
            self.bytes -= _cost(old[0])
        while self and self.bytes + cost > self.max_bytes:
            oldest = next(iter(self))
            self.bytes -= _cost(self.pop(oldest)[0])
        self[key] = (record, flags, sequence, hit)
        self.bytes += cost


def _cost(record: bytes) -> int:
    return 2 * len(record) + OVERHEAD
