"""GET /readyz: can this node serve its domains? Which origins fail, and how.

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

READYZ_PATH = "/readyz"
PROBE_INTERVAL = 5.0  # seconds a round of probes is reused for
PROBE_READ_TIMEOUT = 5.0  # at most this long for an answer, whatever the domain's read_timeout


@dataclass(frozen=True, slots=True)
class Probe:
    """One origin's answer to a probe: its status, or why there was none."""

    domain: str
    origin: str
    status: int | None
    error: str | None
    at: float  # monotonic seconds

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and self.status < 500

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


class Readiness:
    """The last round of probes, and the one under way. ``reconfigure`` swaps the domains."""

    def __init__(
        self, config: Config, *, clock: Callable[[], float] = time.monotonic, via: str = ""
    ) -> None:
        self._domains: tuple[DomainConfig, ...] = config.domains
        self._via = via or _via(config)
        self.clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._results: Mapping[str, Probe] = {}
        self._round: asyncio.Task[Mapping[str, Probe]] | None = None
        self._round_at: float | None = None
        self.rounds = 0  # probe rounds started, for tests and curiosity

    def reconfigure(self, config: Config) -> None:
        """Probe the new domains from the next round on: the results of domains removed or
        re-pointed are dropped at once, those of unchanged domains kept."""
        unchanged = {(d.name, d.origin) for d in config.domains}
        self._domains = config.domains
        self._results = {
            name: probe
            for name, probe in self._results.items()
            if (name, probe.origin) in unchanged
        }
        self._round_at = None if len(self._results) < len(config.domains) else self._round_at

    async def probes(self) -> list[Probe]:
        """Each domain's latest probe, after a new round if the last is older than
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

    async def _probe_all(self) -> Mapping[str, Probe]:
        if self._session is None:
            self._session = new_session()
        domains = self._domains
        found = await asyncio.gather(*(self._probe(d) for d in domains))
        return {probe.domain: probe for probe in found}

    async def _probe(self, domain: DomainConfig) -> Probe:
        assert self._session is not None
        bounded = _bounded(domain)
        headers = [("Host", domain.name), ("Via", f"1.1 {self._via}"), ("User-Agent", "cdn-proxy")]
        status: int | None = None
        error: str | None = None
        try:
            async with origin_request(self._session, bounded, "HEAD", "/", headers) as answer:
                status = answer.status
                answer.close()
        except OriginError as exc:
            error = str(exc)
        return Probe(domain.name, domain.origin, status, error, self.clock())

    async def close(self) -> None:
        if self._round is not None:
            self._round.cancel()
            await asyncio.gather(self._round, return_exceptions=True)
        if self._session is not None:
            await self._session.close()


def _bounded(domain: DomainConfig) -> DomainConfig:
    """The domain with its read timeout capped for a probe."""
    return replace(domain, read_timeout=min(domain.read_timeout, PROBE_READ_TIMEOUT))


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
    now = readiness.clock()
    ready = all(p.ok for p in probes)
    failing = [p.domain for p in probes if not p.ok]
    response = web.json_response(
        {"ready": ready, "failing": failing, "domains": [p.row(now) for p in probes]},
        status=200 if ready else 503,
    )
    response.headers["Cache-Control"] = "no-store"
    return response
