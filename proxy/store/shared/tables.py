"""What the modules that change the shared tier's entries read of it (``Tables``,
``Dropping``), as protocols: totals.py and url_drops.py are called by tier.py, so they
cannot import it (tests/test_layers.py refuses the cycle). ``SharedTier`` is the one
implementation; mypy checks it against both where tier.py passes itself."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import lmdb

from proxy.store.shared.evict import Evictor
from proxy.store.shared.health import Health
from proxy.store.shared.purge_state import PurgeStateStore

Removals = list[tuple[bytes, int]]  # (entry key, sequence; -1: whatever it is)


class Tables(Protocol):
    """The entries environment's databases, the eviction policy and the capacity."""

    @property
    def db_entries(self) -> lmdb._Database: ...

    @property
    def db_order(self) -> lmdb._Database: ...

    @property
    def db_meta(self) -> lmdb._Database: ...

    @property
    def evictor(self) -> Evictor: ...

    @property
    def capacity(self) -> int: ...

    @property
    def trees(self) -> list[lmdb._Database]: ...


class Dropping(Tables, Protocol):
    """``Tables`` and what a removal of entries outside a fill needs: transactions, the
    domains' purge state, the body files' directory and the health it reports faults to."""

    @property
    def health(self) -> Health: ...

    @property
    def bodies(self) -> Path: ...

    @property
    def purges(self) -> PurgeStateStore: ...

    def reading(self) -> lmdb.Transaction: ...

    def writing(
        self, *, doomed: bool = False
    ) -> AbstractContextManager[tuple[lmdb.Transaction, Removals]]: ...
