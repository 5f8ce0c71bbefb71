"""Each domain's origin servers, for this edge process: choosing, retrying, probing.

``Upstreams.request`` is the one way the edge asks an origin (edge/messages.py's
``Messages.ask``). It asks core's ``OriginPool`` (core/http/balance.py) for a server, sends the
request there through ``origin_request`` (within that server's own ``origin_connections``),
tells the pool what happened, and on a failure retries once when core's ``may_retry`` allows
it: always when nothing was sent (the connect failed), else only for an idempotent method
that did not time out, and never a streamed body once sent. The retry goes to another server,
or, when there is none, to the same one for a connection that broke after the request was
sent (a keep-alive connection the server was closing: RFC 9112 §9.3.1; the origin client's
own retry of it is off, so there is one layer of retry: decision 0046). While no server is
up the request fails with OriginsDown (503 with Retry-After, or stale content: edge/fill.py).

Passive detection counts only failures to connect (core's ``counts_against``: OriginUnreachable,
or an OriginTimeout before anything was sent); a read timeout or a broken answer is counted
as the server's error but does not mark it down, nor does a busy queue (OriginBusy: the
edge's own limit).

Active detection: for each domain with a ``[domains.health_check]``, one background task
probes every server each ``interval`` (with ±10 % jitter, so a fleet's processes spread their
probes: decision 0034), ``GET path`` (or ``HEAD``: ``method``) with the domain's Host,
bounded by ``timeout``; a 2xx or 3xx passes. Tasks are created by ``start`` and cancelled by
``close`` (Edge's lifecycle), and a reload restarts them for the new domains. Pools of
unchanged servers keep their state.

``/metrics`` gets ``origin_server_up``, ``origin_server_requests_total`` and
``origin_server_errors_total``, each ``{domain, origin}``, from a collector read at scrape
(proxy/observe/origin_metrics.py, as a node's merged figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TypeVar

import aiohttp
from prometheus_client.core import Metric

from proxy.config.model import Config, DomainConfig
from proxy.core.http.balance import (
    OriginPool,
    PoolRules,
    ServerState,
    counts_against,
    may_retry,
)
from proxy.edge import bodies
from proxy.edge.origin import ConnectionSlots, OriginResponse, origin_request
from proxy.edge.tls import EdgeTls
from proxy.errors import (
    OriginBusy,
    OriginDisconnected,
    OriginError,
    OriginsDown,
    OriginTimeout,
)
from proxy.observe.origin_metrics import origin_server_metrics
from proxy.observe.telemetry import PREFIX, Telemetry

log = logging.getLogger("cdn_proxy.origins")
Link = TypeVar("Link")
JITTER = 0.1  # a probe interval varies by this fraction either way


def rules_of(domain: DomainConfig) -> PoolRules:
    health = domain.health_check
    if health is None:
        # Passive only, as nginx's defaults: the first connection failure marks a server
        # down (max_fails=1), tried again after fail_timeout.
        return PoolRules(balance=domain.balance, fails=1)
    return PoolRules(
        balance=domain.balance,
        fails=health.fails,
        passes=health.passes,
        probing=True,
        interval=health.interval,
    )


class Upstreams:
    """The origin servers of every domain: their pools, connection slots and probes."""

    def __init__(
        self,
        config: Config,
        *,
        session: aiohttp.ClientSession,
        telemetry: Telemetry,
        tls: EdgeTls,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._telemetry = telemetry
        self._tls = tls
        self.clock = clock
        self._slots = ConnectionSlots(config.domains)
        self._domains: dict[str, DomainConfig] = {}
        self.pools: dict[str, OriginPool] = {}
        self._probes: dict[str, asyncio.Task[None]] = {}
        self._started = False
        self._via = config.edge.via if config.edge is not None else "cdn-proxy"
        self._collector = _Collector(self)
        self.received = 0  # body bytes read from origin servers (origin offload: 0047)
        telemetry.registry.register(self._collector)
        self._configure(config.domains)

    def _configure(self, domains: Iterable[DomainConfig]) -> None:
        now = self.clock()
        for domain in domains:
            self._domains[domain.name] = domain
            self.pools[domain.name] = OriginPool.new(
                domain.origins,
                domain.backup_origins,
                rules_of(domain),
                now,
                previous=self.pools.get(domain.name),
            )

    def reconfigure(self, config: Config) -> None:
        """A reloaded config: new servers start up, removed ones are forgotten (a request
        already under way finishes on its own), probes restart for the new health checks."""
        self._slots = self._slots.reconfigured(config.domains)
        names = {d.name for d in config.domains}
        for name in [n for n in self.pools if n not in names]:
            del self.pools[name], self._domains[name]
        self._configure(config.domains)
        if self._started:
            self._stop_probes()
            self.start()

    def start(self) -> None:
        """Start the probes (within a running loop)."""
        self._started = True
        for domain in self._domains.values():
            if domain.health_check is not None and domain.name not in self._probes:
                task = asyncio.create_task(self._probe_loop(domain), name=f"probe {domain.name}")
                self._probes[domain.name] = task

    def _stop_probes(self) -> list[asyncio.Task[None]]:
        tasks = list(self._probes.values())
        for task in tasks:
            task.cancel()
        self._probes = {}
        return tasks

    async def close(self) -> None:
        self._started = False
        await asyncio.gather(*self._stop_probes(), return_exceptions=True)
        with contextlib.suppress(KeyError):
            self._telemetry.registry.unregister(self._collector)

    # -- requests --------------------------------------------------------------------------

    @asynccontextmanager
    async def request(
        self,
        domain: DomainConfig,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        data: bytes | bodies.Streamed | None = None,
    ) -> AsyncIterator[OriginResponse]:
        """Send one request to one of the domain's servers, retried once on another when
        allowed. Raises OriginError (OriginsDown when none is up)."""
        pool = self.pools[domain.name]
        tried: list[str] = []
        last: OriginError | None = None
        while True:
            server = self._next(domain, pool, target, tried, last)
            stack = AsyncExitStack()
            server.requests += 1
            server.active += 1
            try:
                response = await stack.enter_async_context(
                    self._send(domain, server, method, target, headers, data)
                )
            except OriginError as exc:
                server.active -= 1
                self._failed(domain, pool, server, exc)
                if tried or not _retryable(method, data, exc):
                    raise
                tried.append(server.url)
                last = exc
                continue
            break
        pool.succeeded(server, self.clock(), probe=False)
        try:
            async with stack:
                yield response
        except OriginError as exc:
            self._failed(domain, pool, server, exc)  # while the body was being read
            raise
        finally:
            server.active -= 1
            self.received += response.received

    async def connect(
        self, domain: DomainConfig, target: str, opener: Callable[[str], Awaitable[Link]]
    ) -> Link:
        """A connection of its own to one of the domain's servers, for an upgrade request
        (edge/tunnel.py): ``opener(server_url)`` opens it. The server is chosen as ``request``
        chooses, and one other server is tried when connecting fails (nothing was sent yet).
        Raises OriginError (OriginsDown when none is up)."""
        pool = self.pools[domain.name]
        tried: list[str] = []
        last: OriginError | None = None
        while True:
            server = self._next(domain, pool, target, tried, last)
            server.requests += 1
            try:
                link = await opener(server.url)
            except OriginError as exc:
                self._failed(domain, pool, server, exc)
                if tried:
                    raise
                tried.append(server.url)
                last = exc
                continue
            pool.succeeded(server, self.clock(), probe=False)
            return link

    def _next(
        self,
        domain: DomainConfig,
        pool: OriginPool,
        target: str,
        tried: list[str],
        last: OriginError | None,
    ) -> ServerState:
        """The server to ask next, other than those ``tried``; raises ``last`` when there is no
        other to retry on, or OriginsDown when none is up at all."""
        server = pool.choose(target, self.clock(), tried)
        if server is None and isinstance(last, OriginDisconnected):
            # No other server: a connection closed before an answer is tried again on the
            # same one (the request was allowed a retry: idempotent, no timeout).
            server = pool.choose(target, self.clock())
        if server is not None:
            if last is not None:  # said only when there is another server to try
                log.warning("%s (%s); retrying on %s", last, tried[-1], server.url)
            return server
        if last is not None:
            raise last
        raise OriginsDown(f"{domain.name}: no origin server is up", pool.retry_in(self.clock()))

    def _send(
        self,
        domain: DomainConfig,
        server: ServerState,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        data: bytes | bodies.Streamed | None,
    ) -> contextlib.AbstractAsyncContextManager[OriginResponse]:
        return origin_request(
            self._session,
            domain,
            method,
            target,
            headers,
            data,
            telemetry=self._telemetry,
            slots=self._slots,
            tls=self._tls.origin(domain.name),
            server=server.url,
        )

    def _failed(
        self, domain: DomainConfig, pool: OriginPool, server: ServerState, exc: OriginError
    ) -> None:
        if isinstance(exc, OriginBusy):
            return  # the edge's own queue, not the server's fault
        server.errors += 1
        if counts_against(reached=exc.reached) and pool.failed(
            server, str(exc), self.clock(), probe=False
        ):
            log.warning("%s: origin server %s is down (%s)", domain.name, server.url, exc)

    # -- probes ----------------------------------------------------------------------------

    async def _probe_loop(self, domain: DomainConfig) -> None:
        health = domain.health_check
        assert health is not None
        while True:
            pool = self.pools.get(domain.name)
            if pool is None:
                return
            await asyncio.gather(*(self.probe(domain, s, pool) for s in list(pool.servers)))
            await asyncio.sleep(health.interval * random.uniform(1 - JITTER, 1 + JITTER))

    async def probe(self, domain: DomainConfig, server: ServerState, pool: OriginPool) -> bool:
        """One probe of one server, bounded by the health check's timeout; the pool is told."""
        health = domain.health_check
        assert health is not None
        headers = [("Host", domain.name), ("User-Agent", "cdn-proxy"), ("Via", f"1.1 {self._via}")]
        failure: str | None = None
        try:
            async with (
                asyncio.timeout(health.timeout),
                origin_request(
                    self._session,
                    domain,
                    health.method,
                    health.path,
                    headers,
                    tls=self._tls.origin(domain.name),
                    server=server.url,
                ) as answer,
            ):
                answer.close()
                if not 200 <= answer.status < 400:
                    failure = f"the health check answered {answer.status}"
        except TimeoutError:
            failure = f"the health check took over {health.timeout:g} s"
        except (OriginError, aiohttp.ClientError, OSError, ValueError) as exc:
            # Whatever the probe met is the server's failure: the loop must go on.
            failure = str(exc) or type(exc).__name__
        now = self.clock()
        if failure is None:
            if pool.succeeded(server, now, probe=True):
                log.warning("%s: origin server %s is up again", domain.name, server.url)
            return True
        if pool.failed(server, failure, now, probe=True):
            log.warning("%s: origin server %s is down (%s)", domain.name, server.url, failure)
        return False

    def rows(self) -> list[dict[str, object]]:
        """Every origin server's state, for /readyz and the dashboard."""
        now = self.clock()
        return [
            {"domain": name, **server.row(now)}
            for name, pool in self.pools.items()
            for server in pool.servers
        ]


def _retryable(method: str, data: bytes | bodies.Streamed | None, exc: OriginError) -> bool:
    if isinstance(exc, OriginBusy):
        return False  # it waited origin_queue_timeout already
    if isinstance(data, bodies.Streamed) and exc.reached:
        return False  # part of the body is gone to the first server
    return may_retry(method, reached=exc.reached, timed_out=isinstance(exc, OriginTimeout))


class _Collector:
    """The origin servers' states as Prometheus samples, read when /metrics is scraped."""

    def __init__(self, upstreams: Upstreams) -> None:
        self._upstreams = upstreams

    def collect(self) -> Iterable[Metric]:
        return origin_server_metrics(self._upstreams.rows(), PREFIX)
