"""The shared tier: one cache per node on local disk, for every worker (decision 0030).

``SharedTier.open_node`` (the node's control process, or its only process) and
``SharedTier.open_member`` (its workers) open a directory; ``lookup`` and ``read_body`` read,
``Fill``/``AsyncFill`` store, ``clear_domain`` and ``purge`` make purges durable.
"""

from proxy.store.shared.evict import Admission, Evictor, OldestFirst
from proxy.store.shared.fill import AsyncFill, Fill
from proxy.store.shared.health import TierStatus
from proxy.store.shared.records import SharedHit
from proxy.store.shared.s3fifo import S3FifoEvictor
from proxy.store.shared.tier import (
    SharedEntry,
    SharedLookup,
    SharedStats,
    SharedTier,
)

__all__ = [
    "Admission",
    "AsyncFill",
    "Evictor",
    "Fill",
    "OldestFirst",
    "S3FifoEvictor",
    "SharedEntry",
    "SharedHit",
    "SharedLookup",
    "SharedStats",
    "SharedTier",
    "TierStatus",
]
