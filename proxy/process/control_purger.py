"""The control plane's purger on a node whose fleet is its own embedded Valkey
(``SharedFirstPurger``): every clear and purge it answers 200 is durable in the node's shared
tier before the answer, written once per node (decision 0052).

Why the tier must hold them all: the embedded Valkey starts empty with the node (a new epoch
at every start), and a worker that starts trusts the tier's entries at the new epoch's
beginning (process/worker.py ``_tier_applied``). That is true only if the tier's purge state
holds every purge the node ever answered 200, even one made while no worker was live, or
while no worker served the domain.

Who writes it: the fleet's workers write each batch they apply to the tier, once per node,
and move the domain's fleet mark (store/shared/node_writes.py): every fleet write of the
domain numbered up to the mark, in its epoch, is durable. So the purger asks the fleet
first, then reads the mark: at or past the purge's number in its epoch, a worker wrote it
before it acked, and there is nothing left to write; else (no worker was live, or none
serves the domain yet) it writes the purge itself, in the tier's writer thread, before the
answer. A fleet that fails or does not confirm gets the write too, before the error is
raised: harmless, and the tier then holds it if the fleet applies it later.

The mark is true because no writer moves it past a write it did not make: a worker writes a
domain's part of a batch whole, and a domain it took on after it had applied purges of the
epoch (a reload, a start from another worker's record) is cleared as of the batch's number
before anything else of it is written (core/lease.py ``Applied.learned``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial

from proxy.core.purge.purges import Purge, PurgeResult
from proxy.fleet.purger import FleetPurger
from proxy.store.base import ClearResult, Position
from proxy.store.shared import SharedTier
from proxy.store.shared.sweep import held as held_entries


class SharedFirstPurger:
    """A ``Purger``: the fleet's, with each clear and purge made durable in the node's shared
    tier before it is answered (written by a worker, or else here)."""

    def __init__(self, purger: FleetPurger, tier: SharedTier) -> None:
        self._purger = purger
        self._tier = tier
        self.writes = 0  # the clears and purges this process wrote to the tier itself

    @property
    def name(self) -> str | None:
        return self._purger.name

    async def clear_domain(self, domain: str) -> ClearResult:
        tier = self._tier
        held = await tier.run(lambda: held_entries(tier, domain))  # what the clear drops
        write = partial(tier.clear_domain_async, domain)
        try:
            result = await self._purger.clear_domain(domain)
        except BaseException:
            await self._write(write)
            raise
        await self._unless_written(domain, result.epoch, result.generation, write)
        return replace(result, entries_dropped=result.entries_dropped + held)

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        if purge.dry_run:
            return await self._purger.purge(domain, purge)
        write = partial(self._tier.purge_async, domain, purge)
        try:
            result = await self._purger.purge(domain, purge)
        except BaseException:
            await self._write(write)
            raise
        await self._unless_written(domain, result.epoch, result.number, write)
        return result

    async def position(self, domain: str) -> Position:
        return await self._purger.position(domain)

    async def _unless_written(
        self,
        domain: str,
        epoch: str | None,
        number: int,
        write: Callable[[], Awaitable[int | None]],
    ) -> None:
        """``write`` unless the tier's fleet mark for ``domain`` says a worker wrote every
        fleet write of it up to ``number`` in ``epoch``."""
        mark = self._tier.purges.fleet_written(domain).mark
        if epoch is not None and mark is not None and mark[0] == epoch and mark[1] >= number:
            return
        await self._write(write)

    async def _write(self, write: Callable[[], Awaitable[int | None]]) -> None:
        self.writes += 1
        await write()  # None: the tier stopped itself (decision 0030), and serves nothing
