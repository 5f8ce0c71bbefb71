"""The two tiers as the Overview and Nodes pages show them (issue 23 §7-8, decision 0030).

The memory tier: each edge process's own (with workers, their figures summed, as /metrics
sums them), its objects, bytes against ``cache.max_bytes``, evictions, and the hits it
answered. The shared tier (``cache.disk_path``): the node's one copy on disk, its objects,
bytes against ``disk_max_bytes``, evictions, the hits it answered, its write errors and
faults, the misses collapsed behind another worker's fill, and whether it is degraded (with
the fault's words) or stopped. The same figures /metrics gives (``tier_hits_total``,
``shared_tier_*``), read from the same place: ``Telemetry.tier``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.observe.telemetry import NodeHits, StoreFigures, Telemetry

if TYPE_CHECKING:  # the fleet, with its Valkey client, only where a node has one
    from proxy.fleet.figures import FleetFigures


@dataclass(frozen=True, slots=True)
class TierRow:
    name: str  # "Memory" or "Shared (disk)"
    entries: int
    bytes: int
    max_bytes: int
    evictions: int
    hits: int | None  # None: not known here
    write_errors: int | None = None  # the shared tier's only
    faults: int | None = None
    degraded: str | None = None
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class TiersView:
    rows: tuple[TierRow, ...]
    collapsed: int | None  # misses answered by another worker's fill; None: no shared tier

    @property
    def degraded(self) -> TierRow | None:
        return next((row for row in self.rows if row.degraded or row.stopped), None)


async def tiers_view(
    telemetry: Telemetry | None, store: StoreFigures | None, domains: Sequence[str]
) -> TiersView | None:
    """Both tiers' rows; None where this process has no store figures to show."""
    if telemetry is None or store is None:
        return None
    stats = await store.stats()
    hits = sum(telemetry.domain_counts(domain).hits for domain in domains)
    tier = telemetry.tier
    if tier is None:
        memory = TierRow(
            "Memory", stats.entries, stats.bytes, stats.max_bytes, stats.evictions, hits
        )
        return TiersView((memory,), None)
    shared = tier.shared_stats()
    disk_hits = tier.disk_hits or 0
    memory_hits = tier.memory_hits if isinstance(tier, NodeHits) else max(0, hits - disk_hits)
    status = shared.status
    return TiersView(
        (
            TierRow(
                "Memory", stats.entries, stats.bytes, stats.max_bytes, stats.evictions, memory_hits
            ),
            TierRow(
                "Shared (disk)",
                shared.entries,
                shared.bytes,
                shared.max_bytes,
                shared.evictions,
                disk_hits,
                write_errors=status.dropped_fills,
                faults=status.faults,
                degraded=status.degraded,
                stopped=status.stuck,
            ),
        ),
        tier.collapsed,
    )


@dataclass(frozen=True, slots=True)
class ProcessTiers:
    """One edge process's part of the tiers, for its row on the Nodes page."""

    entries: int  # in its memory tier
    bytes: int
    disk_hits: int | None  # None: it has no shared tier
    degraded: str | None


def process_tiers(fleet: FleetFigures) -> dict[tuple[str, int, int], ProcessTiers]:
    """Each edge process's tiers, by (node, worker, pid) as the Nodes page lists them."""
    found = {}
    for info, _ in fleet.reports():
        tier = info.tier
        found[info.node, info.worker, info.pid] = ProcessTiers(
            entries=info.store[0],
            bytes=info.store[1],
            disk_hits=None if tier is None else tier.disk_hits,
            degraded=None if tier is None else ("stopped" if tier.stopped else tier.degraded),
        )
    return found
