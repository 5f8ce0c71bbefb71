"""The shared tier's purges (decision 0030): a clear, a purge, a distrust or a fleet batch
is durable (fsync'ed, purge_state.py) before the call returns, or the tier stops.

Nothing on disk is visited at purge time: lookups judge entries against the purge state
(reads.py). A hard URL purge also removes the URL's variants, right after (url_drops.py).
When a purge cannot be made durable the tier serves nothing more until the node restarts,
and its entries are voided for that start (``stop``, handles.py): a purge answered 200 must
hold, and one that did not reach the disk cannot be known to.
"""

from __future__ import annotations

from collections.abc import Callable

import lmdb

from proxy.core.purge.purges import Purge
from proxy.store.shared.handles import TierHandles
from proxy.store.shared.node_writes import FleetBatch
from proxy.store.shared.url_drops import drop_urls


class TierPurges(TierHandles):
    # -- purges ---------------------------------------------------------------------------------

    def clear_domain(self, domain: str) -> int | None:
        """Make everything stored for the domain unservable, durably (fsync) before it
        returns: the domain's new purge number. None when it could not be made durable:
        the tier then serves nothing more, and its entries are voided for the next start."""
        return self._durably(lambda: self.purges.clear(domain))

    def purge(self, domain: str, purge: Purge, at: float | None = None) -> int | None:
        """Record a purge (url, prefix, tag, soft ``all``; a hard ``all`` is ``clear_domain``)
        durably before it returns: its number. Applied lazily, at every lookup; a hard URL
        purge also removes the URL's variants, right after (url_drops.py). None as for
        ``clear_domain``."""
        if purge.kind == "all" and not purge.soft:
            return self.clear_domain(domain)
        stamp = self._clock() if at is None else at
        number = self._durably(lambda: self.purges.add(domain, purge, stamp))
        if number is not None and purge.kind == "url" and not purge.soft:
            drop_urls(self, domain, purge.items)
        return number

    def distrust(self, domain: str | None, made_for: bytes = b"") -> int | None:
        """Have every entry of the domain (None: of every domain, in one write) revalidated
        before it is served again, durably (decision 0040): the floor or the domain's number.
        None as for ``clear_domain``."""
        if domain is None:
            return self._durably(lambda: self.purges.distrust_all(made_for))
        return self._durably(lambda: self.purges.distrust(domain))

    def apply_fleet(self, batch: FleetBatch) -> int | None:
        """A fleet batch's writes, once per node (node_writes.py), durably before it returns:
        how many parts this call wrote. None as for ``clear_domain``. In the writer thread.
        Its hard URL purges' variants are then removed (url_drops.py), by whichever worker
        finds them first (a skip finds none once the writer removed them)."""
        written = self._durably(lambda: self.purges.apply_fleet(batch, self._clock()))
        if written is not None:
            for domain, writes in batch.by_domain().items():
                targets = [
                    target
                    for write in writes
                    if write.purge is not None
                    and write.purge.kind == "url"
                    and not write.purge.soft
                    for target in write.purge.items
                ]
                if targets:
                    drop_urls(self, domain, targets)
        return written

    async def clear_domain_async(self, domain: str) -> int | None:
        """``clear_domain`` in the writer thread: its fsync never blocks the event loop."""
        return await self.run(lambda: self.clear_domain(domain))

    async def purge_async(self, domain: str, purge: Purge, at: float | None = None) -> int | None:
        """``purge`` in the writer thread."""
        return await self.run(lambda: self.purge(domain, purge, at))

    def _durably(self, write: Callable[[], int]) -> int | None:
        """Commit a purge; None when it is not durable. It is committed even when the
        directory is gone: the node's other processes still read the unlinked files, and
        must see it until they notice (``lookup`` checks the directory every second)."""
        try:
            number = write()
            if self.check_directory():
                return number
            error: BaseException = OSError("the cache directory is gone")
        except (lmdb.Error, OSError) as failed:
            error = failed
        self.stop(f"purge not durable: {error}")
        return None
