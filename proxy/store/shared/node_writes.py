"""A fleet batch's writes to the node's shared tier, made once per node (decision 0048).

Every worker of a node is a fleet member, and each applies every batch of clears and purges
it learns of (proxy/fleet/member.py). Each used to write them to the shared tier itself: one
synced write transaction per purge per worker, one after another behind LMDB's one writer
lock, on the event loops. Now a member hands its batch's writes to the tier (``FleetBatch``),
in the tier's writer thread, and the tier writes a domain's part only when no worker has:

- Each domain's record keeps a **fleet mark**, ``(epoch, number)``: every fleet clear and
  purge of the domain in that epoch numbered up to it is durable in the tier.
- A batch covers, for each of its domains, every fleet write numbered between what the member
  had applied and ``seq``. Its writes of a domain are skipped when the domain's mark, in the
  batch's epoch, is at or above the newest of them (another worker wrote them, or a clear
  since); else they are all written and the mark moved to ``seq``, in the same transaction.
- Why the mark stays true: a worker writes a domain's part of a batch whole; what it had
  applied before the batch was durable already (it wrote it, or skipped it under a mark that
  said so, or its starting point was the tier's own record of what was applied, applied.py);
  so after the batch every write of the domain up to ``seq`` is durable.
- The check is made first in a read transaction (no lock: a worker that comes second pays no
  write), and again inside the write transaction (two that come together write once).

A distrust of every domain (a new epoch, decision 0040) is one write named by what it was made
for, which the tier already makes once per node (``FLOOR_FOR``).

What the member acks is then as true as before: when ``apply_fleet`` returns, every write of
the batch is durable in the node's tier, written by this worker or by another.

A worker that skips must also *see* what it skips at once. A process keeps each domain's
parsed purge state until ``state/stamp`` changes, and the writer announces its commit there
only after the commit returns: a skip can fall in between. Its next lookup would then judge
the tier's entries by the state from before the purge, and copy what the purge covers into
its memory tier, after the memory tier applied the batch, to be served after the 200. So a
skip drops the process's parsed states of the batch's domains (of every domain, for a
distrust of all), and the next lookup reads them again (``PurgeStateStore._seen``;
tests/store/shared/test_skipped_writes.py). Durable: the skip saw the writer's commit, whose
meta page may still await its fsync; a crash of the writer's process loses nothing (the page
cache holds it), and after an OS crash or a power loss the node empties its entries at start
(``SharedTier.open_node``), so nothing a lost purge covered can be served.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.purge.purges import Purge


@dataclass(frozen=True, slots=True)
class NodeWrite:
    """One write of a fleet batch to the node's tier: a clear of the domain (``purge`` None,
    ``distrust`` False), a distrust of it (decision 0040), or a purge. ``number``: the fleet
    number it carries (a clear's or a purge's; for a distrust, the batch's ``seq``)."""

    domain: str
    number: int
    purge: Purge | None = None
    distrust: bool = False


@dataclass(frozen=True, slots=True)
class FleetBatch:
    """What a member's batch writes to the node's tier. ``epoch`` None: the member has no
    epoch yet, and every write is made. ``every``: distrust every domain first, made for that
    (the member's ``epoch seq``); empty: not."""

    epoch: str | None
    seq: int
    writes: tuple[NodeWrite, ...]
    every: str = ""

    def by_domain(self) -> dict[str, list[NodeWrite]]:
        """The writes of each domain, in the batch's order (its clears before its purges)."""
        grouped: dict[str, list[NodeWrite]] = {}
        for write in self.writes:
            grouped.setdefault(write.domain, []).append(write)
        return grouped

    def done(self, fleet: tuple[str, int] | None, writes: list[NodeWrite]) -> bool:
        """Whether a domain whose record holds the fleet mark ``fleet`` has ``writes`` (its
        part of the batch) durable already."""
        if self.epoch is None or fleet is None or fleet[0] != self.epoch:
            return False
        return fleet[1] >= max(write.number for write in writes)
