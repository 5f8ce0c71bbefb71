"""What a node's control process shows of its edge workers (issue 23 §7-8, issue 25 §2).

The control process serves no traffic: its /metrics, /readyz, dashboard and trace read the
reports every edge process writes with its lease renewals (proxy/fleet/figures.py), summed by
proxy/observe/worker_figures.py, and the node's shared tier, which it holds open.
"""

from __future__ import annotations

import os
from dataclasses import replace

from proxy.config.model import Config
from proxy.fleet.figures import FleetFigures
from proxy.observe.peer_metrics import PeerCollector
from proxy.observe.telemetry import PREFIX, Telemetry
from proxy.observe.worker_edge import WorkerEdgeCollector
from proxy.observe.worker_figures import NodeTierTotals, merged_servers, node_tier_totals
from proxy.store.shared import SharedStats, SharedTier


def node_telemetry(config: Config, figures: FleetFigures, tier: SharedTier | None) -> Telemetry:
    """The control process's telemetry: the edge processes' figures (``figures``), the node's
    shared tier with their parts of it, and their origin servers merged."""
    assert config.fleet is not None
    telemetry = Telemetry(store=figures, domains=[d.name for d in config.domains], remote=figures)
    if tier is not None:
        telemetry.tier = NodeTier(tier, figures, config.fleet.node)
    # The edge processes' origin servers, merged: /metrics, /readyz, the dashboard, trace.
    telemetry.origin_servers = lambda: merged_servers(figures.reports())
    # The edge processes' peer fills (decision 0047): none listed while none report any.
    telemetry.registry.register(PeerCollector(figures.reports, PREFIX))
    # Their fill budgets, compression queues and origin counters (decision 0051).
    telemetry.registry.register(
        WorkerEdgeCollector(figures.reports, lambda: telemetry.domains, PREFIX)
    )
    return telemetry


class NodeTier:
    """The node's shared tier as /metrics, /readyz and the dashboard read it in the control
    process (``observe.telemetry.TierFigures``): the node-wide totals of its LMDB, whether
    the directory is still there and writable, and what this node's edge processes report of
    it (hits by tier, collapsed misses, their faults and degraded state: summed by
    proxy/observe/worker_figures.py)."""

    def __init__(self, tier: SharedTier, figures: FleetFigures, node: str) -> None:
        self._tier = tier
        self._figures = figures
        self._node = node

    def _totals(self) -> NodeTierTotals:
        return node_tier_totals(self._figures.reports(), self._node)

    def shared_stats(self) -> SharedStats:
        tier = self._tier
        if tier.check_directory() and not os.access(tier.bodies, os.W_OK):
            tier.health.fault("cache directory", PermissionError("not writable"))
        stats = tier.stats()
        return replace(stats, status=self._totals().status(stats.status))

    @property
    def disk_hits(self) -> int | None:
        return self._totals().disk_hits

    @property
    def memory_hits(self) -> int:
        return self._totals().memory_hits

    @property
    def collapsed(self) -> int:
        return self._totals().collapsed
