"""What a node's control process sees of its edge workers' tiers and origin servers.

Each edge process puts its shared tier's figures (``tier_report``) and its origin servers'
states (``server_reports``) in the report it writes at every sync (proxy/fleet/figures.py
``edge_report``, proxy/wire/reports.py). The control process, which serves no traffic
itself, reads every report once a second and turns them into the node's figures here:

- ``NodeTierTotals``: the node's hits by tier, the misses collapsed behind another worker's
  fill, and the shared tier's faults, summed over the node's edge processes; the tier is
  degraded (or stopped) while any live process says so, with that process's reason.
- ``merged_servers``: each origin server once, its requests and errors summed over the edge
  processes, up only while every live process sees it up (each judges it on its own:
  decision 0034), in the shape of ``Upstreams.rows`` so that /readyz, the dashboard and the
  trace read it as they read a one-process edge's.

A report is its process's counters since it started: the reports of processes gone (and not
yet dropped by Valkey) still count in the sums, as they do for requests, but their
up/down and degraded views no longer do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from proxy.core.observe.traffic import HIT
from proxy.store.shared import TierStatus
from proxy.store.tiered import TieredStore
from proxy.wire.reports import MemberInfo, ServerReport, TierReport

# Each origin server's state in an edge (``Upstreams.rows``), or the edge processes' merged.
OriginRows = Callable[[], list[dict[str, object]]]


def tier_report(store: object) -> TierReport | None:
    """An edge process's shared-tier figures; None when its store has no shared tier."""
    if not isinstance(store, TieredStore):
        return None
    status = store.tier.health.status()
    return TierReport(
        # A miss that waited for another worker's fill found it with a lookup (counted in
        # hits["disk"]) but was answered as a miss (collapsed): not a hit of the tier.
        disk_hits=max(0, store.hits["disk"] - store.collapsed),
        collapsed=store.collapsed,
        faults=status.faults,
        corrupt=status.corrupt,
        dropped_fills=status.dropped_fills,
        not_durable=store.not_durable,
        degraded=status.degraded,
        stopped=status.stuck,
    )


def server_reports(rows: OriginRows | None) -> list[ServerReport]:
    """An edge process's origin servers, from its ``Upstreams.rows``."""
    if rows is None:
        return []
    return [_server(row) for row in rows()]


def _server(row: Mapping[str, object]) -> ServerReport:
    failure = row.get("last_failure")
    ago = row.get("last_failure_seconds_ago")
    return ServerReport(
        domain=str(row["domain"]),
        origin=str(row["origin"]),
        backup=bool(row.get("backup")),
        up=bool(row.get("up")),
        since_seconds=_number(row.get("since_seconds")),
        last_failure=None if failure is None else str(failure),
        last_failure_seconds_ago=None if ago is None else _number(ago),
        requests=int(_number(row.get("requests"))),
        errors=int(_number(row.get("errors"))),
        active=int(_number(row.get("active"))),
    )


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


@dataclass(frozen=True, slots=True)
class NodeTierTotals:
    """A node's edge processes' tier figures, summed."""

    hits: int  # every hit, whichever tier answered
    disk_hits: int
    collapsed: int
    faults: int
    corrupt: int
    dropped_fills: int
    not_durable: int
    degraded: tuple[str, ...]  # "worker N: reason" for each live process that says so
    stopped: bool

    @property
    def memory_hits(self) -> int:
        return max(0, self.hits - self.disk_hits)

    def status(self, own: TierStatus) -> TierStatus:
        """The tier's status as the node sees it: the control process's own (``own``: its
        directory checks) with every edge process's faults added."""
        reasons = ([own.degraded] if own.degraded else []) + list(self.degraded)
        return TierStatus(
            degraded="; ".join(reasons) or None,
            stuck=own.stuck or self.stopped,
            faults=own.faults + self.faults,
            corrupt=own.corrupt + self.corrupt,
            dropped_fills=own.dropped_fills + self.dropped_fills,
        )


def node_tier_totals(
    reports: Iterable[tuple[MemberInfo, bool]], node: str | None = None
) -> NodeTierTotals:
    """The tier figures of ``node``'s edge processes (every one's when None), from their
    reports, each with whether it is live now."""
    hits = disk_hits = collapsed = faults = corrupt = dropped = not_durable = 0
    degraded: list[str] = []
    stopped = False
    for info, live in reports:
        if node is not None and info.node != node:
            continue
        hits += sum(counts.get(HIT, 0) for counts in info.counts.values())
        tier = info.tier
        if tier is None:
            continue
        disk_hits += tier.disk_hits
        collapsed += tier.collapsed
        faults += tier.faults
        corrupt += tier.corrupt
        dropped += tier.dropped_fills
        not_durable += tier.not_durable
        if live and tier.degraded is not None:
            degraded.append(f"worker {info.worker}: {tier.degraded}")
        stopped = stopped or (live and tier.stopped)
    return NodeTierTotals(
        hits, disk_hits, collapsed, faults, corrupt, dropped, not_durable, tuple(degraded), stopped
    )


def merged_servers(reports: Iterable[tuple[MemberInfo, bool]]) -> list[dict[str, object]]:
    """Each origin server once (in the order the reports first name them), as
    ``Upstreams.rows`` gives it, with ``processes`` (the live edge processes that report it)
    and ``up_in`` (how many of them see it up)."""
    merged: dict[tuple[str, str], dict[str, object]] = {}
    for info, live in reports:
        for server in info.origins:
            row = merged.setdefault((server.domain, server.origin), _empty(server))
            _add(row, server, live)
    for row in merged.values():
        row["up"] = row["up_in"] == row["processes"]  # none live: as configured, up
        if row["since_seconds"] is None:
            row["since_seconds"] = 0.0
    return list(merged.values())


def _empty(server: ServerReport) -> dict[str, object]:
    return {
        "domain": server.domain,
        "origin": server.origin,
        "backup": server.backup,
        "up": True,
        "since_seconds": None,
        "last_failure": None,
        "last_failure_seconds_ago": None,
        "requests": 0,
        "errors": 0,
        "active": 0,
        "processes": 0,
        "up_in": 0,
    }


def _add(row: dict[str, object], server: ServerReport, live: bool) -> None:
    row["requests"] = _int(row["requests"]) + server.requests
    row["errors"] = _int(row["errors"]) + server.errors
    if not live:
        return
    row["active"] = _int(row["active"]) + server.active
    row["processes"] = _int(row["processes"]) + 1
    row["up_in"] = _int(row["up_in"]) + int(server.up)
    # Since when in its state: the most recent change any process saw.
    since = row["since_seconds"]
    if since is None or server.since_seconds < _number(since):
        row["since_seconds"] = server.since_seconds
    ago = server.last_failure_seconds_ago
    had = row["last_failure_seconds_ago"]
    if ago is not None and (had is None or ago < _number(had)):
        row["last_failure"], row["last_failure_seconds_ago"] = server.last_failure, ago


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
