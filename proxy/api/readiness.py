"""GET /readyz: can this node serve its domains? Which origin servers fail, and how.

/healthz is liveness: the process answers, nothing more (a supervisor restarts it when that
stops). Readiness asks the origins: 200 when every configured domain's origin answers, 503
otherwise, with one JSON row per domain. A load balancer can then take the node out of
rotation (or a human can see why misses fail) while the process is alive and hits still work.

How an origin is judged: a short active probe, ``HEAD /`` with the domain's Host, through the
edge's own origin client (``edge.origin.origin_request``: the same TLS verification and
error translation as real traffic), bounded by the domain's connect_timeout and by
``PROBE_READ_TIMEOUT`` for the answer. Any answer below 500 counts as "answers": a 404 or a
401 at / still says the origin is up. A 5xx, a timeout, a refused connection or a broken
answer is a failure, named in the row. The probe runs on the control plane, so it works the
same with edge workers.

Every origin server of a domain (``origins`` and ``backup_origins``, decision 0034) is probed,
with the domain's health check when it has one (``GET path``, or ``HEAD`` as its ``method``
says; 2xx or 3xx passes, bounded by its timeout), and the domain is ready while any of them
passes: the edge fails over to it.
Its row keeps the first passing server's fields (or the first server's), and lists each
server under ``origins``: ok, status, error, since when, its last failure, and, where the edge
shares this process, the edge's own view (``edge``: up, requests, errors, active).

It cannot be used to hammer origins: probes of all domains run together as one round, at most
one round is under way (concurrent /readyz requests wait for it), and a round's results are
reused for ``PROBE_INTERVAL`` seconds, so each origin gets at most one probe per interval
however often /readyz is asked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace

import aiohttp
from aiohttp import web

from proxy.config.model import Config, DomainConfig
from proxy.edge.origin import new_session, origin_request
from proxy.errors import OriginError
from proxy.observe.telemetry import TELEMETRY

READYZ_PATH = "/readyz"
PROBE_INTERVAL = 5.0  # seconds a round of probes is reused for
PROBE_READ_TIMEOUT = 5.0  # at most this long for an answer, whatever the domain's read_timeout


@dataclass(frozen=True, slots=True)
class Probe:
    """One origin server's answer to a probe: its status, or why there was none."""

    domain: str
    origin: str
    status: int | None
    error: str | None
    at: float  # monotonic seconds
    backup: bool = False
    # 2xx and 3xx pass a configured health check; without one, anything below 500 does.
    passing: tuple[int, int] = (0, 500)

    @property
    def ok(self) -> bool:
        low, high = self.passing
        return self.error is None and self.status is not None and low <= self.status < high

    def row(self, now: float) -> dict[str, object]:
        return {
            "domain": self.domain,
            "origin": self.origin,
            "ok": self.ok,
            "status": self.status,
            "error": self.error if self.error is not None else self._status_error(),
            "checked_seconds_ago": round(max(0.0, now - self.at), 3),
        }

    def _status_error(self) -> str | None:
        return None if self.ok else f"the origin answered {self.status}"


@dataclass(frozen=True, slots=True)
class History:
    """An origin server's probes over time: ok or not since when, and its last failure."""

    ok: bool
    since: float
    last_failure: str | None = None
    last_failure_at: float | None = None

    def after(self, probe: Probe) -> History:
        since = self.since if probe.ok == self.ok else probe.at
        if probe.ok:
            return replace(self, ok=True, since=since)
        reason = probe.row(probe.at)["error"]
        return History(False, since, str(reason), probe.at)


@dataclass(frozen=True, slots=True)
class DomainProbes:
    """One round's probes of a domain's origin servers (primaries, then backups)."""

    domain: str
    probes: tuple[Probe, ...]

    @property
    def ok(self) -> bool:
        """Ready when any server answers: the edge fails over to it (decision 0034)."""
        return any(p.ok for p in self.probes)

    @property
    def servers(self) -> frozenset[str]:
        return frozenset(p.origin for p in self.probes)

    def row(
        self,
        now: float,
        history: Mapping[tuple[str, str], History],
        edge: Mapping[tuple[str, str], Mapping[str, object]],
    ) -> dict[str, object]:
        """The domain's row: as one probe's (the first that passed, else the first), and
        each server's own."""
        best = next((p for p in self.probes if p.ok), self.probes[0])
        servers = []
        for probe in self.probes:
            key = (self.domain, probe.origin)
            server = {**probe.row(now), "backup": probe.backup}
            del server["domain"]
            past = history.get(key)
            if past is not None:
                server["since_seconds"] = round(max(0.0, now - past.since), 3)
                server["last_failure"] = past.last_failure
                ago = None if past.last_failure_at is None else now - past.last_failure_at
                server["last_failure_seconds_ago"] = None if ago is None else round(ago, 3)
            if key in edge:
                server["edge"] = edge[key]
            servers.append(server)
        return {**best.row(now), "ok": self.ok, "origins": servers}


@dataclass(frozen=True, slots=True)
class ServerView:
    """One origin server as the dashboard shows it."""

    origin: str
    backup: bool
    up: bool | None  # None: not known yet
    since_seconds: float | None
    last_failure: object
    edge: Mapping[str, object]  # requests, errors, active: where the edge shares the process


# Each origin server's state in this process's edge (Upstreams.rows), when it has one.
EdgeStates = Callable[[], list[dict[str, object]]]


class Readiness:
    """The last round of probes, and the one under way. ``reconfigure`` swaps the domains."""

    def __init__(
        self, config: Config, *, clock: Callable[[], float] = time.monotonic, via: str = ""
    ) -> None:
        self._domains: tuple[DomainConfig, ...] = config.domains
        self._via = via or _via(config)
        self.clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._results: Mapping[str, DomainProbes] = {}
        self._history: dict[tuple[str, str], History] = {}
        self._round: asyncio.Task[Mapping[str, DomainProbes]] | None = None
        self._round_at: float | None = None
        self.rounds = 0  # probe rounds started, for tests and curiosity
        # Set on a node whose control plane shares its process with the edge (service.py):
        # each server's up/down, requests and errors as the edge sees them.
        self.edge_states: EdgeStates | None = None

    def reconfigure(self, config: Config) -> None:
        """Probe the new domains from the next round on: the results of domains removed or
        re-pointed are dropped at once, those of unchanged domains kept."""
        unchanged = {(d.name, frozenset(d.origins + d.backup_origins)) for d in config.domains}
        self._domains = config.domains
        self._results = {
            name: probes
            for name, probes in self._results.items()
            if (name, probes.servers) in unchanged
        }
        self._round_at = None if len(self._results) < len(config.domains) else self._round_at

    async def probes(self) -> list[DomainProbes]:
        """Each domain's latest probes, after a new round if the last is older than
        PROBE_INTERVAL (sharing a round already under way)."""
        now = self.clock()
        stale = self._round_at is None or now - self._round_at >= PROBE_INTERVAL
        if stale and self._round is None:
            self._round_at = now
            self.rounds += 1
            self._round = asyncio.create_task(self._probe_all(), name="readiness")
        if self._round is not None:
            task = self._round
            try:
                self._results = await asyncio.shield(task)
            finally:
                if task.done() and self._round is task:
                    self._round = None
        return [self._results[d.name] for d in self._domains if d.name in self._results]

    def rows(self, found: list[DomainProbes]) -> list[dict[str, object]]:
        now = self.clock()
        return [probes.row(now, self._history, self._edge()) for probes in found]

    def servers(self, domain: DomainConfig) -> list[ServerView]:
        """The domain's origin servers as last seen, without probing (the dashboard): the
        edge's view where it shares the process, else the last probe's, else unknown."""
        now = self.clock()
        edge = self._edge()
        views = []
        for url, backup in [(u, False) for u in domain.origins] + [
            (u, True) for u in domain.backup_origins
        ]:
            mine = edge.get((domain.name, url))
            past = self._history.get((domain.name, url))
            if mine is not None:
                since = float(str(mine["since_seconds"]))
                failure = mine["last_failure"]
                view = ServerView(url, backup, bool(mine["up"]), since, failure, mine)
            elif past is not None:
                since = max(0.0, now - past.since)
                view = ServerView(url, backup, past.ok, since, past.last_failure, {})
            else:
                view = ServerView(url, backup, None, None, None, {})
            views.append(view)
        return views

    def _edge(self) -> dict[tuple[str, str], Mapping[str, object]]:
        edge: dict[tuple[str, str], Mapping[str, object]] = {}
        for state in self.edge_states() if self.edge_states is not None else []:
            edge[str(state["domain"]), str(state["origin"])] = {
                k: v for k, v in state.items() if k not in ("domain", "origin")
            }
        return edge

    async def _probe_all(self) -> Mapping[str, DomainProbes]:
        if self._session is None:
            self._session = new_session()
        domains = self._domains
        found = await asyncio.gather(*(self._probe_domain(d) for d in domains))
        for probes in found:
            for probe in probes.probes:
                key = (probes.domain, probe.origin)
                past = self._history.get(key, History(probe.ok, probe.at))
                self._history[key] = past.after(probe)
        return {probes.domain: probes for probes in found}

    async def _probe_domain(self, domain: DomainConfig) -> DomainProbes:
        servers = [(url, False) for url in domain.origins]
        servers += [(url, True) for url in domain.backup_origins]
        found = await asyncio.gather(*(self._probe(domain, url, b) for url, b in servers))
        return DomainProbes(domain.name, tuple(found))

    async def _probe(self, domain: DomainConfig, server: str, backup: bool) -> Probe:
        assert self._session is not None
        bounded = _bounded(domain)
        headers = [("Host", domain.name), ("Via", f"1.1 {self._via}"), ("User-Agent", "cdn-proxy")]
        health = domain.health_check
        # The domain's health check when it has one (its method and path, 2xx/3xx), else HEAD /.
        method, path = ("HEAD", "/") if health is None else (health.method, health.path)
        passing = (0, 500) if health is None else (200, 400)
        status: int | None = None
        error: str | None = None
        try:
            async with origin_request(
                self._session, bounded, method, path, headers, server=server
            ) as answer:
                status = answer.status
                answer.close()
        except OriginError as exc:
            error = str(exc)
        return Probe(domain.name, server, status, error, self.clock(), backup, passing)

    async def close(self) -> None:
        if self._round is not None:
            self._round.cancel()
            await asyncio.gather(self._round, return_exceptions=True)
        if self._session is not None:
            await self._session.close()


def _bounded(domain: DomainConfig) -> DomainConfig:
    """The domain with its read timeout capped for a probe (by its health check's timeout
    when it has one)."""
    cap = PROBE_READ_TIMEOUT if domain.health_check is None else domain.health_check.timeout
    return replace(
        domain,
        read_timeout=min(domain.read_timeout, cap),
        connect_timeout=min(domain.connect_timeout, cap),
    )


def _via(config: Config) -> str:
    edge = config.edge
    return edge.via if edge is not None else "cdn-proxy"


READINESS = web.AppKey("readiness", Readiness)


async def readiness_context(app: web.Application) -> AsyncIterator[None]:
    """The probes' origin session lives as long as the app (``cleanup_ctx``)."""
    yield
    await app[READINESS].close()


async def readyz(request: web.Request) -> web.Response:
    readiness = request.app[READINESS]
    probes = await readiness.probes()
    ready = all(p.ok for p in probes)
    failing = [p.domain for p in probes if not p.ok]
    body: dict[str, object] = {
        "ready": ready,
        "failing": failing,
        "domains": readiness.rows(probes),
    }
    telemetry = request.app.get(TELEMETRY)
    tier = telemetry.tier if telemetry is not None else None
    if tier is not None:
        # A degraded shared tier is a warning, not a 503: the edge keeps answering from its
        # memory tier and the origin (README "The shared tier").
        status = tier.shared_stats().status
        body["disk"] = {
            "ok": status.degraded is None,
            "degraded": status.degraded,
            "stopped": status.stuck,
        }
        if status.degraded is not None:
            body["warnings"] = [f"shared tier degraded: {status.degraded}"]
    response = web.json_response(body, status=200 if ready else 503)
    response.headers["Cache-Control"] = "no-store"
    return response
