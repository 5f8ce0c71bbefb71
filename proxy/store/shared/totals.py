"""The shared tier's entry count and bytes, kept in its ``meta`` database and changed inside
one write transaction (``Totals``): a fill's commit, an eviction, a sweep, a hard URL purge's
removal of the URL's variants (url_drops.py). Moved out of fill.py so that the tier itself can
remove entries (fill.py imports the tier)."""

from __future__ import annotations

import struct

import lmdb

from proxy.store.shared.pages import BLOCK, PAGE, entry_cost, pages_in_use
from proxy.store.shared.records import body_name, read_header
from proxy.store.shared.tables import Tables

U64 = struct.Struct(">Q")
TRIM_STEP = 16  # evictions between two measures of the pages in use


def u64(txn: lmdb.Transaction, db: lmdb._Database, key: bytes) -> int:
    value = txn.get(key, db=db)
    return 0 if value is None else int(U64.unpack(value)[0])


class Totals:
    """The tier's entry count and bytes inside one write transaction."""

    def __init__(self, txn: lmdb.Transaction, tier: Tables) -> None:
        self._txn = txn
        self._tier = tier
        meta = tier.db_meta
        self.entries = u64(txn, meta, b"entries")
        self.bytes = u64(txn, meta, b"bytes")
        self.evicted = u64(txn, meta, b"evicted")
        self.files = u64(txn, meta, b"files")  # of them, the body files'

    def add(self, cost: int, file: int) -> None:
        self.entries += 1
        self.bytes += cost
        self.files += file

    def remove(self, key: bytes, sequence: int, gone: list[str], *, forget: bool = True) -> bool:
        """Delete the entry at ``key`` (only if its sequence is ``sequence``, unless -1), and
        tell the evictor unless ``forget`` is False (it chose it, or keeps its place)."""
        txn, tier = self._txn, self._tier
        record = txn.get(key, db=tier.db_entries)
        if record is None:
            return False
        try:
            header = read_header(record)
        except Exception:  # corrupt: its length and file are unknown
            txn.delete(key, db=tier.db_entries)
            if forget:
                tier.evictor.removed(txn, key)
            self.entries = max(0, self.entries - 1)
            self.bytes = max(0, self.bytes - entry_cost(len(key), len(record)))
            return True
        if sequence != -1 and header.sequence != sequence:
            return False
        txn.delete(key, db=tier.db_entries)
        txn.delete(U64.pack(header.sequence), db=tier.db_order)
        if forget:
            tier.evictor.removed(txn, key)
        file = 0
        if header.in_file:
            file = file_bytes(header.body_length)
            gone.append(body_name(header.sequence))
        self.entries = max(0, self.entries - 1)
        self.bytes = max(0, self.bytes - entry_cost(len(key), len(record), file))
        self.files = max(0, self.files - file)
        return True

    def evict_oldest(self, gone: list[str]) -> None:
        """While still over the size (entries the evictor does not know, stored before it
        was plugged in, or an evictor that leaves it all here), the oldest entries go."""
        txn, tier = self._txn, self._tier
        cursor = txn.cursor(tier.db_order)
        while self.bytes > tier.capacity and cursor.first():
            order_key, entry_key = bytes(cursor.key()), bytes(cursor.value())
            cursor.delete()
            if self.remove(entry_key, U64.unpack(order_key)[0], gone):
                self.evicted += 1

    def trim(self, target: float, gone: list[str]) -> int:
        """Evict the oldest entries until the pages in use and the body files are within
        ``target`` bytes (measured every TRIM_STEP evictions); how many went."""
        txn, tier = self._txn, self._tier
        cursor = txn.cursor(tier.db_order)
        evicted = 0
        while cursor.first():
            if evicted % TRIM_STEP == 0 and usage(txn, tier, self.files) <= target:
                break
            order_key, entry_key = bytes(cursor.key()), bytes(cursor.value())
            cursor.delete()
            if self.remove(entry_key, U64.unpack(order_key)[0], gone):
                evicted += 1
        self.evicted += evicted
        return evicted

    def save(self) -> None:
        meta = self._tier.db_meta
        for name, value in (
            (b"entries", self.entries),
            (b"bytes", self.bytes),
            (b"evicted", self.evicted),
            (b"files", self.files),
        ):
            self._txn.put(name, U64.pack(value), db=meta)


def file_bytes(length: int) -> int:
    """A body file's bytes: the body and its chunk table (a CRC per chunk)."""
    return length + 4 * -(-length // 65536)


def usage(txn: lmdb.Transaction, tier: Tables, files: int) -> int:
    """The tier's use of the disk as ``txn`` sees it: its pages in use and its body files."""
    return pages_in_use(txn, tier.trees) * PAGE + -(-files // BLOCK) * BLOCK
