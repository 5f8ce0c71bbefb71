"""The whole fleet's figures on the control plane: what each edge process reports with every
sync, summed for /metrics, the dashboard's Overview and Domains pages, and listed per process
for the Nodes page.

An edge process sends its report (``edge_report``) in the member info it writes at each sync
(proxy/fleet/member.py), every ``fleet.renew`` seconds. The control plane reads every
member's info from Valkey once a second (``FleetFigures.refresh``), and answers from that
copy, so a scrape or a page costs no round trip. A member whose lease has run out still counts
until Valkey drops it (at the next clear): a report is the process's counters since it
started, and dropping it would make the sums go back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.observe.responses import Responses
from proxy.core.observe.traffic import OUTCOMES, MinuteCounts
from proxy.errors import FleetUnavailable, WireError
from proxy.fleet.peers import live_peers
from proxy.fleet.scripts import FleetScripts, MembersView
from proxy.observe.connection_metrics import CONNECTION_FIGURES, merged
from proxy.observe.telemetry import Telemetry
from proxy.observe.worker_figures import server_reports, tier_report
from proxy.store.base import DomainStats, Store, StoreStats
from proxy.wire.reports import NO_INFO, EdgeReport, MemberInfo, unpack_member_info

log = logging.getLogger("proxy.fleet")

REFRESH_SECONDS = 1.0
MINUTES = 60


async def edge_report(
    telemetry: Telemetry, store: Store, domains: Sequence[str], now: float
) -> EdgeReport:
    """What an edge process tells the control plane about itself: its responses by domain
    and outcome, its last hour's hits and misses per minute (only minutes with any), and its
    store's figures (proxy/wire/reports.py is its format)."""
    stats = await store.stats()
    return EdgeReport(
        counts={domain: dict(counts) for domain, counts in telemetry.outcomes().items()},
        minutes=[
            (minute.start, minute.hits, minute.misses)
            for minute in telemetry.timeline(now, MINUTES)
            if minute.hits or minute.misses
        ],
        store=(stats.entries, stats.bytes, stats.max_bytes, stats.evictions),
        purge_state=(
            stats.purge_state_bytes,
            stats.purge_state_max_bytes,
            stats.purges_forgotten,
            stats.purges_retired,
            stats.purge_folds_cleared,
        ),
        connections={guard.listener: list(guard.figures()) for guard in telemetry.connections},
        responses=telemetry.responses.report(),
        domains={
            domain: (figures.entries, figures.bytes)
            for domain in domains
            if (figures := await store.domain_stats(domain)).entries
        },
        tier=tier_report(store),
        origins=server_reports(telemetry.origin_servers),
        answers=telemetry.answers.figures() if telemetry.answers is not None else [],
        counters=telemetry.edge_counters(),
        **peer_report(telemetry),
    )


def peer_report(telemetry: Telemetry) -> dict[str, Any]:
    """Its peer fills' figures (decision 0047), when it makes them."""
    fills = telemetry.peer_fills
    if fills is None:
        return {}
    errors: dict[str, dict[str, int]] = {}
    for (peer, kind), count in fills.errors.items():
        errors.setdefault(peer, {})[kind] = count
    sent = sum(figures.sent for figures in telemetry.responses.domains.values())
    return {
        "peer_requests": dict(fills.requests),
        "peer_errors": errors,
        "peer_answers": fills.answers,
        "peer_answer_bytes": fills.answer_bytes,
        "served_bytes": max(0, sent - fills.answer_bytes),
        "origin_bytes": fills.origin_bytes(),
    }


@dataclass(frozen=True, slots=True)
class EdgeProcess:
    """One row of the Nodes page."""

    member: str
    node: str
    worker: int
    pid: int
    address: str
    lease_age: float | None  # seconds since its lease was last renewed; None: no live lease
    applied: int  # the number of the last clear it applied
    acked: int  # the number Valkey holds as its acknowledgement
    fenced: bool
    renew_failures: int


class FleetFigures:
    """Implements the store figures the dashboard and /metrics read (``stats`` and
    ``domain_stats``), and ``Telemetry``'s remote counts, for the whole fleet."""

    def __init__(self, scripts: FleetScripts, *, lease: float) -> None:
        self._scripts = scripts
        self._lease = lease
        self._view = MembersView(now_ms=0, members=())
        self._reports: dict[str, MemberInfo] = {}
        self._totals = _Totals.of(())
        self._task: asyncio.Task[None] | None = None

    # -- keeping the copy ------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._refresh_loop(), name="fleet-figures")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._scripts.aclose()

    async def refresh(self) -> None:
        view = await self._scripts.members()
        reports: dict[str, MemberInfo] = {}
        for row in view.members:
            try:
                reports[row.member] = unpack_member_info(row.info)
            except WireError as exc:
                log.debug("member %s left out of the figures: %s", row.member, exc)
        self._view, self._reports, self._totals = view, reports, _Totals.of(reports.values())

    async def peer_nodes(self) -> dict[str, str]:
        """The live nodes that take peer fills, read now as the edges read them (decision
        0047: ``fleet.peers.live_peers``): the trace's owners. {} when Valkey cannot say."""
        try:
            return live_peers(await self._scripts.members())
        except FleetUnavailable:
            return {}

    async def peer_key(self) -> str | None:
        """The fleet's peer key, read now (the trace asks an https key's owner with it, as
        a peer does: decision 0047). None when Valkey holds none or cannot say."""
        try:
            return await self._scripts.read_peer_key()
        except FleetUnavailable:
            return None

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self.refresh()
            except FleetUnavailable as exc:
                log.warning("fleet figures not refreshed: %s", exc)
            await asyncio.sleep(REFRESH_SECONDS)  # a period, not a synchronisation

    # -- what the pages and /metrics read -----------------------------------------------------

    def processes(self) -> list[EdgeProcess]:
        now_ms = self._view.now_ms
        rows = []
        for row in self._view.members:
            info = self._reports.get(row.member, NO_INFO)
            live = row.expires_ms > now_ms
            renewed_ms = row.expires_ms - self._lease * 1000
            rows.append(
                EdgeProcess(
                    member=row.member,
                    node=info.node,
                    worker=info.worker,
                    pid=info.pid,
                    address=info.address,
                    lease_age=max(0.0, (now_ms - renewed_ms) / 1000) if live else None,
                    applied=info.applied,
                    acked=row.ack,
                    fenced=not live or info.fenced,
                    renew_failures=info.renew_failures,
                )
            )
        return sorted(rows, key=lambda p: (p.node, p.worker, p.member))

    def reports(self) -> list[tuple[MemberInfo, bool]]:
        """Every listed edge process's report, with whether its lease is live now
        (proxy/observe/worker_figures.py sums them for the node's tiers and origins)."""
        now_ms = self._view.now_ms
        return [
            (self._reports[row.member], row.expires_ms > now_ms)
            for row in self._view.members
            if row.member in self._reports
        ]

    def outcomes(self) -> Mapping[str, Mapping[str, int]]:
        return self._totals.outcomes

    def timeline(self, minutes: Sequence[MinuteCounts]) -> list[MinuteCounts]:
        """``minutes`` (the control plane's own: its clears) with every process's hits and
        misses added."""
        added = self._totals.minutes
        return [
            MinuteCounts(
                m.start,
                m.hits + added.get(m.start, (0, 0))[0],
                m.misses + added.get(m.start, (0, 0))[1],
                m.clears,
            )
            for m in minutes
        ]

    async def stats(self) -> StoreStats:
        return self._totals.store

    async def domain_stats(self, domain: str) -> DomainStats:
        return self._totals.domains.get(domain, _NO_ENTRIES)

    def live_and_fenced(self) -> tuple[int, int]:
        processes = self.processes()
        fenced = sum(1 for process in processes if process.fenced)
        return len(processes) - fenced, fenced

    @property
    def renew_failures(self) -> int:
        return self._totals.renew_failures

    def connections(self) -> Mapping[str, Sequence[int]]:
        return self._totals.connections

    def responses(self) -> Responses:
        return self._totals.responses


_NO_ENTRIES = DomainStats(entries=0, bytes=0)


@dataclass(frozen=True, slots=True)
class _Totals:
    """The reports summed once, when they are read from Valkey: every scrape and page reads
    these, not the reports."""

    outcomes: dict[str, dict[str, int]]
    minutes: dict[float, tuple[int, int]]  # minute start -> hits, misses
    store: StoreStats
    domains: dict[str, DomainStats]
    renew_failures: int
    connections: dict[str, list[int]]  # listener -> ConnectionGuard.figures(), summed
    responses: Responses

    @classmethod
    def of(cls, reports: Iterable[MemberInfo]) -> _Totals:
        reports = list(reports)
        outcomes: dict[str, dict[str, int]] = {}
        minutes: dict[float, tuple[int, int]] = {}
        domains: dict[str, DomainStats] = {}
        connections: dict[str, list[int]] = {}
        for report in reports:
            for domain, by_outcome in report.counts.items():
                mine = outcomes.setdefault(domain, dict.fromkeys(OUTCOMES, 0))
                for outcome in OUTCOMES:
                    mine[outcome] += by_outcome.get(outcome, 0)
            for start, hits, misses in report.minutes:
                had_hits, had_misses = minutes.get(start, (0, 0))
                minutes[start] = (had_hits + hits, had_misses + misses)
            for domain, (entries, size) in report.domains.items():
                had = domains.get(domain, _NO_ENTRIES)
                domains[domain] = DomainStats(entries=had.entries + entries, bytes=had.bytes + size)
            for listener, figures in report.connections.items():
                into = connections.setdefault(listener, [0] * CONNECTION_FIGURES)
                merged(into, figures)
        return cls(
            outcomes=outcomes,
            minutes=minutes,
            store=StoreStats(
                entries=sum(report.store[0] for report in reports),
                bytes=sum(report.store[1] for report in reports),
                max_bytes=sum(report.store[2] for report in reports),
                evictions=sum(report.store[3] for report in reports),
                pending_reclaim=0,
                purge_state_bytes=sum(report.purge_state[0] for report in reports),
                purge_state_max_bytes=sum(report.purge_state[1] for report in reports),
                purges_forgotten=sum(report.purge_state[2] for report in reports),
                purges_retired=sum(report.purge_state[3] for report in reports),
                purge_folds_cleared=sum(report.purge_state[4] for report in reports),
            ),
            domains=domains,
            renew_failures=sum(report.renew_failures for report in reports),
            connections=connections,
            responses=Responses.summed(report.responses for report in reports),
        )
