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
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from proxy.core.observe.responses import Responses
from proxy.core.observe.traffic import OUTCOMES, MinuteCounts
from proxy.errors import FleetUnavailable
from proxy.fleet.scripts import FleetScripts, MembersView
from proxy.observe.connection_metrics import CONNECTION_FIGURES
from proxy.observe.telemetry import Telemetry
from proxy.store.base import DomainStats, Store, StoreStats

log = logging.getLogger("proxy.fleet")

REFRESH_SECONDS = 1.0
MINUTES = 60


async def edge_report(
    telemetry: Telemetry, store: Store, domains: Sequence[str], now: float
) -> dict[str, object]:
    """What an edge process tells the control plane about itself: its responses by domain
    and outcome, its last hour's hits and misses per minute (only minutes with any), and its
    store's figures."""
    stats = await store.stats()
    return {
        "counts": {domain: dict(counts) for domain, counts in telemetry.outcomes().items()},
        "minutes": [
            [minute.start, minute.hits, minute.misses]
            for minute in telemetry.timeline(now, MINUTES)
            if minute.hits or minute.misses
        ],
        "store": [stats.entries, stats.bytes, stats.max_bytes, stats.evictions],
        "connections": {guard.listener: guard.figures() for guard in telemetry.connections},
        "responses": telemetry.responses.report(),
        "domains": {
            domain: [figures.entries, figures.bytes]
            for domain in domains
            if (figures := await store.domain_stats(domain)).entries
        },
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
        self._reports: dict[str, Mapping[str, object]] = {}
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
        reports: dict[str, Mapping[str, object]] = {}
        for row in view.members:
            try:
                info = json.loads(row.info)
            except ValueError:
                continue
            if isinstance(info, dict):
                reports[row.member] = info
        self._view, self._reports, self._totals = view, reports, _Totals.of(reports.values())

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
            info = self._reports.get(row.member, {})
            live = row.expires_ms > now_ms
            renewed_ms = row.expires_ms - self._lease * 1000
            rows.append(
                EdgeProcess(
                    member=row.member,
                    node=str(info.get("node", "")),
                    worker=_int(info.get("worker")),
                    pid=_int(info.get("pid")),
                    address=str(info.get("address", "")),
                    lease_age=max(0.0, (now_ms - renewed_ms) / 1000) if live else None,
                    applied=_int(info.get("applied")),
                    acked=row.ack,
                    fenced=not live or bool(info.get("fenced")),
                    renew_failures=_int(info.get("renew_failures")),
                )
            )
        return sorted(rows, key=lambda p: (p.node, p.worker, p.member))

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
    def of(cls, reports: Iterable[Mapping[str, object]]) -> _Totals:
        reports = list(reports)
        outcomes: dict[str, dict[str, int]] = {}
        minutes: dict[float, tuple[int, int]] = {}
        store = [0, 0, 0, 0]  # entries, bytes, max_bytes, evictions
        domains: dict[str, DomainStats] = {}
        renew_failures = 0
        connections: dict[str, list[int]] = {}
        for report in reports:
            counts = report.get("counts")
            for domain, by_outcome in counts.items() if isinstance(counts, dict) else ():
                mine = outcomes.setdefault(str(domain), dict.fromkeys(OUTCOMES, 0))
                if isinstance(by_outcome, dict):
                    for outcome in OUTCOMES:
                        mine[outcome] += _int(by_outcome.get(outcome))
            for entry in _list(report.get("minutes")):
                if isinstance(entry, list) and len(entry) == 3:
                    hits, misses = minutes.get(float(entry[0]), (0, 0))
                    minutes[float(entry[0])] = (hits + _int(entry[1]), misses + _int(entry[2]))
            figures = _list(report.get("store"))
            if len(figures) == 4:
                store = [total + _int(value) for total, value in zip(store, figures, strict=True)]
            per_domain = report.get("domains")
            for domain, pair in per_domain.items() if isinstance(per_domain, dict) else ():
                pair = _list(pair)
                if len(pair) == 2:
                    had = domains.get(str(domain), _NO_ENTRIES)
                    domains[str(domain)] = DomainStats(
                        entries=had.entries + _int(pair[0]), bytes=had.bytes + _int(pair[1])
                    )
            renew_failures += _int(report.get("renew_failures"))
            listeners = report.get("connections")
            for listener, figures in listeners.items() if isinstance(listeners, dict) else ():
                into = connections.setdefault(str(listener), [0] * CONNECTION_FIGURES)
                for index, value in enumerate(_list(figures)[:CONNECTION_FIGURES]):
                    into[index] += _int(value)
        return cls(
            outcomes=outcomes,
            minutes=minutes,
            store=StoreStats(
                entries=store[0],
                bytes=store[1],
                max_bytes=store[2],
                evictions=store[3],
                pending_reclaim=0,
            ),
            domains=domains,
            renew_failures=renew_failures,
            connections=connections,
            responses=Responses.summed(report.get("responses") for report in reports),
        )


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []
