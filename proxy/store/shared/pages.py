"""The shared tier's capacity in pages, as the disk holds it (issue 31 item 2, decision 0041).

LMDB stores in whole pages. A record over a page's node limit (``NODE_MAX``: half a page, less
its header) takes overflow pages of its own, rounded up; a smaller one shares a leaf page, and
B-tree leaves are between half full and full. Each entry also has a node in the tier's other
trees (the eviction order, the S3-FIFO queues and its place). Counted in bytes of keys and
records, as the tier did, a tier of 1 to 4 KB records used 1.9 to 2.8 times its size on disk,
and then filled its map (``MDB_MAP_FULL``) and never stored again.

So:

- **Cost of an entry** (``entry_cost``): what it may take on disk, in bytes of pages: its
  record's overflow pages, or its share of a leaf page left half full by a split (a whole
  page for a record of a third of a page or more); its nodes in the other trees, twice
  over; its body file rounded up to file-system blocks. The tier's totals and its eviction
  policy count this, so the policy sees about the size the disk sees, within the usable
  size (``usable_bytes``: the size, less a reserve for free pages not yet reused).
- **Measured use**: the pages the environment's trees hold now (``txn.stat`` of every
  database, ``pages_in_use``) plus the tier's body files. What the cost does not see still
  counts here: leaves a quarter full after deletions (LMDB merges only below that), branch
  pages. A commit that leaves the tier above its usable size has the tier evict, oldest
  first, in a write transaction of its own, down to ``LOW`` of it (fill.py, ``trim``); a
  fill's transaction that fails with ``MDB_MAP_FULL`` does the same, then tries once more.
- **The map** is reserved far above the size (``map_size``): it is address space, not disk
  (the file grows as pages are used), and the gap is what freed pages waiting for readers,
  and a transaction's copies, may need before the trim has run.
"""

from __future__ import annotations

from typing import NamedTuple

import lmdb

PAGE = 4096  # LMDB's page on every platform this runs on (``env.stat()["psize"]``)
PAGE_HEADER = 16
NODE_HEADER = 8
NODE_MAX = ((PAGE - PAGE_HEADER) // 2) & ~1  # a node past this goes to overflow pages
BLOCK = 4096  # what a body file takes on disk, rounded up
INDEX_NODES = 6  # its nodes in other trees: order, S3-FIFO queue, place, slot, ghost and its index
INDEX_NODE = 40  # bytes of one, its key aside: the largest value (place) and its header
RESERVE_MAX = 1 << 20  # of the size, kept for free pages waiting to be reused
LOW = 0.9  # a trim evicts down to this share of the usable size
STATE_MAP_MIN = 256 << 20


def record_cost(key: int, record: int) -> int:
    """What an entry's record under a key of ``key`` bytes takes in the entries tree."""
    node = NODE_HEADER + key + record
    if node > NODE_MAX:
        overflow = -(-(PAGE_HEADER + record) // PAGE)
        return overflow * PAGE + 2 * (NODE_HEADER + key + 8)
    # A leaf split leaves each half with half the nodes: a page that holds ``fits`` of them
    # may hold as few as ``(fits + 1) // 2`` (one, for records of a third of a page or more).
    fits = (PAGE - PAGE_HEADER) // (node + 2)
    return PAGE // ((fits + 1) // 2)


def entry_cost(key: int, record: int, file: int = 0) -> int:
    """An entry's cost: its record (``record`` bytes, its inline body included), its nodes
    in the other trees, and a body file of ``file`` bytes (0: inline)."""
    index = 2 * INDEX_NODES * (NODE_HEADER + key + INDEX_NODE)
    return record_cost(key, record) + index + -(-file // BLOCK) * BLOCK


def usable_bytes(max_bytes: int) -> int:
    """What the tier's entries may take, in costs and in pages in use: the size, less a
    reserve for the pages freed by the last commits that LMDB has not reused yet (about a
    hundred: a commit rewrites a path in each of a dozen trees), which the environment's
    file holds too: a quarter of a small tier, 1 MiB of one of 4 MiB or more. (The tier's
    tests size tiers of 2 MiB and more: below, the reserve is short of what free pages take.)"""
    return max_bytes - min(max_bytes // 4, RESERVE_MAX)


def map_size(max_bytes: int) -> int:
    """The entries environment's map: far more than the tier may use (reserved only)."""
    return 4 * max_bytes + (1 << 30)


def state_map_size(purge_max_bytes: int) -> int:
    """The purge state's map, bounded by the purge state's own budget: a purge rewrites a
    domain's record (a copy, then the old pages freed), so four times it, and room."""
    return max(STATE_MAP_MIN, 4 * purge_max_bytes + (64 << 20))


class Usage(NamedTuple):
    pages: int  # in the entries environment's trees
    files: int  # bytes of body files (counted, rounded up to blocks)

    @property
    def bytes(self) -> int:
        return self.pages * PAGE + self.files


def pages_in_use(txn: lmdb.Transaction, databases: list[lmdb._Database]) -> int:
    """The pages held by the trees of ``databases`` as ``txn`` sees them, beyond the one
    page each holds when it is nearly empty (a fixed cost, not the entries'); free pages
    aside, which LMDB reuses."""
    total = 0
    for db in databases:
        stat = txn.stat(db)
        total += max(0, stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"] - 1)
    return total
