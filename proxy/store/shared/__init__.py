"""The shared tier: one cache per node on local disk, for every worker (decision 0030).

``SharedTier.open_node`` (the node's control process, or its only process) and
``SharedTier.open_member`` (its workers) open a directory; ``lookup`` and ``read_body`` read,
``Fill``/``AsyncFill`` store, ``clear_domain`` and ``purge`` make purges durable.
"""

from proxy.store.shared.fill import AsyncFill, Fill
from proxy.store.shared.health import TierStatus
from proxy.store.shared.records import SharedHit
from proxy.store.shared.tier import (
    Evictor,
    OldestFirst,
    SharedEntry,
    SharedLookup,
    SharedStats,
    SharedTier,
)

__all__ = [
    "AsyncFill",
    "Evictor",
    "Fill",
    "OldestFirst",
    "SharedEntry",
    "SharedHit",
    "SharedLookup",
    "SharedStats",
    "SharedTier",
    "TierStatus",
]
