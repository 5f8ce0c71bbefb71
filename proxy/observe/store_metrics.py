"""The store's figures as Prometheus metric families, at scrape time.

``Telemetry`` (proxy/observe/telemetry.py) takes a ``StoreSnapshot`` of the store (or of a
whole fleet's stores) and of the node's shared tier when /metrics is scraped; these turn it
into samples: the store's size and evictions, each domain's, the purge state's (decision
0037), and the two tiers' (decision 0030).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.store.base import DomainStats, StoreStats
from proxy.store.shared import SharedStats


@dataclass(frozen=True, slots=True)
class StoreSnapshot:
    stats: StoreStats
    domains: tuple[tuple[str, DomainStats], ...]
    shared: SharedStats | None = None
    disk_hits: int | None = None
    # A node's control process: its edge processes' memory-tier hits (else the hits counted
    # less the disk hits), and misses collapsed behind another worker's fill.
    memory_hits: int | None = None
    collapsed: int | None = None


def store_metrics(snapshot: StoreSnapshot, prefix: str) -> Iterable[Metric]:
    """The store's figures, as the last scrape's snapshot holds them."""
    stats = snapshot.stats
    yield GaugeMetricFamily(
        prefix + "store_entries",
        "Entries in the store, reclaimable ones included.",
        stats.entries,
    )
    yield GaugeMetricFamily(prefix + "store_bytes", "Bytes held by the store.", stats.bytes)
    yield GaugeMetricFamily(
        prefix + "store_max_bytes",
        "The store's memory bound (cache.max_bytes).",
        stats.max_bytes,
    )
    yield GaugeMetricFamily(
        prefix + "store_pending_reclaim_entries",
        "Entries of cleared generations not yet reclaimed.",
        stats.pending_reclaim,
    )
    yield CounterMetricFamily(
        prefix + "store_evictions",
        "Entries evicted to stay within cache.max_bytes.",
        stats.evictions,
    )
    yield from _purge_state_metrics(stats, prefix)
    entries = GaugeMetricFamily(
        prefix + "domain_entries",
        "Servable entries of the domain (its current generation).",
        labels=["domain"],
    )
    size = GaugeMetricFamily(
        prefix + "domain_bytes",
        "Bytes of the domain's servable entries (its current generation).",
        labels=["domain"],
    )
    for domain, domain_stats in snapshot.domains:
        entries.add_metric([domain], domain_stats.entries)
        size.add_metric([domain], domain_stats.bytes)
    yield entries
    yield size


def tier_metrics(snapshot: StoreSnapshot, hits: int, prefix: str) -> Iterable[Metric]:
    """The two tiers: hits by tier, and the shared tier's size, evictions and faults."""
    shared = snapshot.shared
    assert shared is not None
    if snapshot.disk_hits is not None:
        by_tier = CounterMetricFamily(
            prefix + "tier_hits",
            "Hits by the tier that answered: disk (the node's shared tier), memory (the rest).",
            labels=["tier"],
        )
        memory = snapshot.memory_hits
        by_tier.add_metric(
            ["memory"], max(0, hits - snapshot.disk_hits) if memory is None else memory
        )
        by_tier.add_metric(["disk"], snapshot.disk_hits)
        yield by_tier
    if snapshot.collapsed is not None:
        yield CounterMetricFamily(
            prefix + "shared_tier_collapsed",
            "Misses that waited for another worker's fill of the same key and were answered by "
            "it (collapsed across workers), summed over the node's edge processes.",
            snapshot.collapsed,
        )
    status = shared.status
    gauges = (
        ("shared_tier_entries", "Objects in the node's shared tier.", shared.entries),
        ("shared_tier_bytes", "Bytes in the node's shared tier.", shared.bytes),
        ("shared_tier_max_bytes", "The shared tier's bound (disk_max_bytes).", shared.max_bytes),
        ("shared_tier_degraded", "1 while its last write failed.", int(bool(status.degraded))),
        ("shared_tier_stopped", "1 when it serves nothing until a restart.", int(status.stuck)),
        (
            "shared_tier_purge_state_bytes",
            "Bytes of the shared tier's purge records (budget: purge_state_max_bytes).",
            shared.purge_state_bytes,
        ),
        (
            "shared_tier_purge_state_max_bytes",
            "The shared tier's purge-state budget (cache.purge_state_max_bytes).",
            shared.purge_state_max_bytes,
        ),
    )
    counters = (
        ("shared_tier_evictions", "Objects evicted from the shared tier.", shared.evictions),
        ("shared_tier_write_errors", "Fills dropped by a fault.", status.dropped_fills),
        ("shared_tier_faults", "Failed calls: I/O errors, full disk, no directory.", status.faults),
        (
            "shared_tier_corrupt",
            "Entries that failed their checksum (never served).",
            status.corrupt,
        ),
        (
            "shared_tier_purge_folds",
            "Domains cleared to keep the shared tier's purge state within its budget.",
            shared.purge_folds,
        ),
        (
            "shared_tier_orphans_reclaimed",
            "Body files no record named (a crash mid-fill), removed by the sweep.",
            shared.orphans,
        ),
        (
            "shared_tier_orphan_bytes_reclaimed",
            "Bytes of those files.",
            shared.orphan_bytes,
        ),
        (
            "shared_tier_swept",
            "Entries of cleared domains the sweep removed with their body files.",
            shared.swept,
        ),
        (
            "shared_tier_url_purges_retired",
            "URLs whose purge records retired after cache.url_purge_keep, with what they covered.",
            shared.retired_urls,
        ),
    )
    for kind, rows in ((GaugeMetricFamily, gauges), (CounterMetricFamily, counters)):
        for name, text, value in rows:
            yield kind(prefix + name, text, value)


def _purge_state_metrics(stats: StoreStats, prefix: str) -> Iterable[Metric]:
    """The purge state's gauges and fold counters (decision 0037)."""
    yield GaugeMetricFamily(
        prefix + "purge_state_bytes",
        "Bytes of purge state held: remembered purges, outstanding bans and tags (an estimate).",
        stats.purge_state_bytes,
    )
    yield GaugeMetricFamily(
        prefix + "purge_state_max_bytes",
        "The purge state's budget (cache.purge_state_max_bytes).",
        stats.purge_state_max_bytes,
    )
    folded = CounterMetricFamily(
        prefix + "purge_state_folded",
        "Purge state folded to stay within its budget: forgotten, retired, cleared.",
        labels=["fold"],
    )
    folded.add_metric(["forgotten"], stats.purges_forgotten)
    folded.add_metric(["retired"], stats.purges_retired)
    folded.add_metric(["cleared"], stats.purge_folds_cleared)
    yield folded
