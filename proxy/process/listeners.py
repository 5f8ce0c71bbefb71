"""A process's listeners: the edge's (plain and TLS, HTTP/1.1 and HTTP/2) and the control
plane's (the API, with the state database), and the one shutdown they share.

``edge_listening`` and ``control_listening`` each open their listener and what it owns, and
close it in reverse order however they are left; both take the ``ProcessContext`` (config,
telemetry, clock, shutdown) that a process's listeners share. proxy/process/service.py runs
both in one process, proxy/process/worker.py the edge alone and proxy/process/node.py the
control plane alone. ``Draining`` is the shutdown: the listeners stop accepting, idle
connections close, and in-flight requests get what is left of edge.shutdown_timeout to finish.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from aiohttp import web

from proxy.api.app import ApiAccessLogger, create_api_app
from proxy.api.clear_cache import PURGE_CONTEXT
from proxy.api.readiness import READINESS
from proxy.api.trace import Inspect
from proxy.api.trace_workers import ASK_WORKERS, AskWorkers
from proxy.config.model import ApiConfig, Config, EdgeConfig
from proxy.config.values import Listen
from proxy.edge.access_log import EdgeAccess
from proxy.edge.aiohttp_server import GuardedAppRunner, GuardedServer
from proxy.edge.answer_budget import AnswerBudget
from proxy.edge.bodies import BodyBudget
from proxy.edge.connections import (
    ConnectionGuard,
    api_share,
    edge_share,
    open_files_limit,
    per_client_share,
)
from proxy.edge.h2.client_streams import ClientStreams
from proxy.edge.h2.front import H2Front
from proxy.edge.h2.limits import H2Limits
from proxy.edge.handler import Edge
from proxy.edge.handshakes import HandshakeTimedSite
from proxy.edge.hit_lane import HitLane
from proxy.edge.origin import new_session
from proxy.edge.origin_asks import OriginAsks
from proxy.edge.peer_fill import PeerView
from proxy.edge.tls import TlsHandler
from proxy.errors import ProxyError
from proxy.observe.telemetry import StoreFigures, Telemetry
from proxy.state.async_state import AsyncState
from proxy.store.base import Purger, Store
from proxy.store.memory import MemoryStore
from proxy.store.tiered import TieredStore

if TYPE_CHECKING:  # the fleet, with its Valkey client, only where a node has one
    from proxy.fleet.figures import FleetFigures

log = logging.getLogger("proxy")


class StartError(ProxyError):
    """A listener or resource could not be started."""


class Draining:
    """One shutdown for every listener of a process, bounded by ``timeout`` in all.

    ``drain()`` stops every listener accepting, closes idle connections, and waits for the
    requests in flight until ``timeout`` less ``reserve``; the listeners' cleanup then cancels
    what is left, each within ``reserve / 2`` (aiohttp waits twice its shutdown timeout: for
    the handler, then for its cancellation), and the rest closes in what remains."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.reserve = min(1.0, timeout / 4)
        self._listeners: list[tuple[web.BaseRunner, ConnectionGuard]] = []
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, config: Config) -> Draining:
        """A process's shutdown: edge.shutdown_timeout, 30 s on a node without an [edge]."""
        return cls(config.edge.shutdown_timeout if config.edge is not None else 30.0)

    @property
    def runner_timeout(self) -> float:
        """The shutdown timeout of each listener's runner, for what is left after a drain."""
        return self.reserve / 4

    def add(self, runner: web.BaseRunner, guard: ConnectionGuard) -> None:
        self._listeners.append((runner, guard))

    async def drain(self) -> None:
        """Drain every listener; a second call waits for the first one's drain."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._drain())
        await self._task

    async def _drain(self) -> None:
        for runner, _ in self._listeners:
            for site in list(runner.sites):
                await site.stop()
            if runner.server is not None:
                runner.server.pre_shutdown()
        guards = list(dict.fromkeys(guard for _, guard in self._listeners))  # once each
        try:
            async with asyncio.timeout(self.timeout - self.reserve):
                await asyncio.gather(*(guard.none_open() for guard in guards))
        except TimeoutError:
            left = sum(guard.open for guard in guards)
            log.warning("%d connections still busy at the shutdown timeout: cancelled", left)
        for guard in guards:
            guard.close()


@dataclass(frozen=True, slots=True)
class ProcessContext:
    """What every listener of one process shares: its config, its telemetry (the figures
    /metrics reads; each listener adds its connection guard), its wall clock (cache
    freshness, audit times, sessions: tests move it by hand), and its shutdown.

    ``draining``: one shutdown for all its listeners; when left out, each listener makes and
    drains one of its own."""

    config: Config
    telemetry: Telemetry
    clock: Callable[[], float] = time.time
    draining: Draining | None = None

    def shutdown(self) -> Draining:
        """The shutdown a listener joins: the process's, else one of the listener's own."""
        return Draining.of(self.config) if self.draining is None else self.draining


@asynccontextmanager
async def edge_listening(
    process: ProcessContext,
    *,
    store: Store,
    port: int | None = None,
    reuse_port: bool = False,
    tls_port: int | None = None,
    access: EdgeAccess | None = None,
    peers: PeerView | None = None,
) -> AsyncIterator[tuple[Edge, str]]:
    """The edge listener on ``edge.listen`` (its port replaced by ``port`` when given), with
    its origin session; closed in reverse order. ``reuse_port``: one of several edge
    processes sharing the port (SO_REUSEPORT), the kernel spreading connections among them.
    It is drained when the listener is left, if not before. With ``edge.tls_listen`` (its
    port replaced by ``tls_port``), a TLS listener serves the same edge behind the
    Host-vs-SNI check, sharing the connection limit; its URL is ``edge.tls.url``. ``access``:
    the access log and response figures every response reports to (one of its own when left
    out, closed with the listener). ``peers``: the fleet member's view, for peer fills."""
    config, telemetry = process.config, process.telemetry
    edge_config, _ = config.edge_role()
    draining = process.shutdown()
    async with AsyncExitStack() as stack:
        if access is None:
            access = EdgeAccess(config, responses=telemetry.responses)
            stack.push_async_callback(access.close)
        session = new_session()
        stack.push_async_callback(session.close)
        edge = Edge(
            config=config,
            store=store,
            session=session,
            telemetry=telemetry,
            clock=process.clock,
            peers=peers,
        )
        stack.push_async_callback(edge.close)
        guard = _edge_guard(config)
        telemetry.connections.append(guard)
        h2c = _http2(edge.handle, guard, access, edge_config, tls=False)
        lane = HitLane(edge, access) if edge_config.hit_lane else None
        runner = await _edge_runner(edge.handle, guard, access, draining, stack, h2c, lane)
        tls_runner = None
        if edge_config.tls_listen is not None:
            # The same edge behind the Host-vs-SNI check, with the same log and figures.
            tls_handler = TlsHandler(edge.handle, edge.tls).handle
            h2 = _http2(tls_handler, guard, access, edge_config, tls=True)
            tls_lane = HitLane(edge, access, tls=edge.tls) if edge_config.hit_lane else None
            tls_runner = await _edge_runner(
                tls_handler, guard, access, draining, stack, h2, tls_lane
            )
        stack.push_async_callback(draining.drain)  # before the runners' cleanup
        where = edge_config.listen if port is None else Listen(edge_config.listen.host, port)
        url = await _listen(runner, where, "edge.listen", reuse_port=reuse_port)
        if tls_runner is not None and edge_config.tls_listen is not None:
            tls_where = edge_config.tls_listen
            if tls_port is not None:
                tls_where = Listen(tls_where.host, tls_port)
            edge.tls.url = await _listen(
                tls_runner,
                tls_where,
                "edge.tls_listen",
                reuse_port=reuse_port,
                tls=edge.tls.listener_context(),
                handshake_timeout=edge_config.header_timeout,
            )
        yield edge, url


def _edge_guard(config: Config) -> ConnectionGuard:
    """The edge listeners' connection guard (one for the plain and the TLS listener)."""
    edge = config.edge_role()[0]
    limit = edge_connections(config)
    guard = ConnectionGuard(
        "edge",
        limit=limit,
        header_timeout=edge.header_timeout,
        keepalive_timeout=edge.keepalive_timeout,
        per_client=per_client_share(edge.max_connections_per_client, limit, edge.workers),
    )
    # Each worker's share of the node's budget for buffered request bodies (decision 0032).
    guard.bodies = BodyBudget(-(-edge.request_buffer_total_bytes // edge.workers))
    guard.send_timeout = edge.send_timeout  # read by GuardedRequestHandler (decision 0046)
    # Answers not yet sent, per connection and per client (each worker its share): 0051.
    per_client = edge.answers_held_per_client_bytes
    guard.answers = AnswerBudget(
        per_connection=edge.answers_held_per_connection_bytes,
        per_client=-(-per_client // edge.workers),
    )
    # Requests the origin is asked for at once, per connection and per client: 0057.
    guard.asks = OriginAsks(
        per_connection=edge.origin_requests_per_connection,
        per_client=-(-edge.origin_requests_per_client // edge.workers),
    )
    # HTTP/2 streams open at once per client address, over both listeners: 0060.
    guard.streams = ClientStreams(per_client=-(-edge.http2_streams_per_client // edge.workers))
    return guard


def _http2(
    handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
    guard: ConnectionGuard,
    access: EdgeAccess,
    edge_config: EdgeConfig,
    *,
    tls: bool,
) -> H2Front | None:
    """The HTTP/2 side of an edge listener (decision 0036): ALPN h2 on the TLS one, h2c by
    prior knowledge on the plain one; None where it is off."""
    if not (edge_config.http2 if tls else edge_config.h2c):
        return None
    hook = access.logger_class()(cast(logging.Logger, access), "")
    return H2Front(
        handler=handler, limits=H2Limits.of(edge_config), guard=guard, tls=tls, log=hook.log
    )


async def _edge_runner(
    handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
    guard: ConnectionGuard,
    access: EdgeAccess,
    draining: Draining,
    stack: AsyncExitStack,
    http2: H2Front | None = None,
    lane: HitLane | None = None,
) -> web.ServerRunner:
    """One edge listener's server and runner, set up, cleaned up by ``stack`` and drained
    with the process's other listeners."""
    # auto_decompress=False: request bodies reach the origin as the client encoded them.
    server = GuardedServer(
        handler,
        guard=guard,
        http2=http2,
        lane=lane,  # decision 0050
        # aiohttp's access-log hook, public API: each response, once sent (decision 0019).
        access_log=access,
        access_log_class=access.logger_class(),
        handler_cancellation=False,
        auto_decompress=False,
    )
    runner = web.ServerRunner(
        server, shutdown_timeout=draining.runner_timeout, handle_signals=False
    )
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    draining.add(runner, guard)
    return runner


def edge_connections(config: Config) -> int:
    """This process's limit on open edge connections: its share of edge.max_connections,
    or what its open-files limit leaves (proxy/edge/connections.py)."""
    edge_config, _ = config.edge_role()
    if edge_config.max_connections is None:
        return edge_share(open_files_limit())
    return -(-edge_config.max_connections // edge_config.workers)


@asynccontextmanager
async def control_listening(
    process: ProcessContext,
    *,
    purger: Purger,
    store: StoreFigures | None = None,
    fleet: FleetFigures | None = None,
    reload_hooks: list[Callable[[Config], None]] | None = None,
    origin_states: Callable[[], list[dict[str, object]]] | None = None,
    inspect: Inspect | None = None,
    ask_workers: AskWorkers | None = None,
) -> AsyncIterator[tuple[AsyncState, str]]:
    """The control plane: the state database and the API listener (clear-cache, dashboard,
    /metrics, /healthz), closed in reverse order; drained as the edge's is.
    ``reload_hooks``: where it adds what a config reload calls (proxy/process/reload.py)."""
    config, telemetry = process.config, process.telemetry
    api_config, state_config = config.api_role()
    draining = process.shutdown()
    async with AsyncExitStack() as stack:
        state = await AsyncState.open(
            state_config.path,
            audit_max_rows=state_config.audit_max_rows,
            audit_fsync=state_config.audit_fsync,
        )
        stack.push_async_callback(state.close)
        app = create_api_app(
            config=config,
            state=state,
            purger=purger,
            telemetry=telemetry,
            store=store,
            clock=process.clock,
            fleet=fleet,
            # A trace reads ``inspect`` (the edge's store and refusals in this process, or a
            # node's shared tier), else the store when it is this process's; else it asks the
            # workers (``ask_workers``) when there are some.
            inspect=inspect
            if inspect is not None or not isinstance(store, MemoryStore | TieredStore)
            else store.inspect,
        )
        if ask_workers is not None:
            app[ASK_WORKERS] = ask_workers
        app[READINESS].edge_states = origin_states
        if reload_hooks is not None:
            reload_hooks.append(app[PURGE_CONTEXT].reconfigure)
            reload_hooks.append(app[READINESS].reconfigure)  # /readyz probes the new domains
        runner = await _api_runner(app, api_config, telemetry, draining, stack)
        stack.push_async_callback(draining.drain)
        yield state, await _listen(runner, api_config.listen, "api.listen")


async def _api_runner(
    app: web.Application,
    api_config: ApiConfig,
    telemetry: Telemetry,
    draining: Draining,
    stack: AsyncExitStack,
) -> GuardedAppRunner:
    """The API listener's runner with its connection guard, set up, cleaned up by ``stack``
    and drained with the process's other listeners."""
    # Its share of open files is kept free by the edge's limit (edge_share), so the API
    # answers while the edge is full.
    guard = ConnectionGuard(
        "api",
        limit=api_share(open_files_limit()),
        header_timeout=api_config.header_timeout,
        keepalive_timeout=api_config.keepalive_timeout,
    )
    telemetry.connections.append(guard)
    runner = GuardedAppRunner(
        app,
        guard=guard,
        shutdown_timeout=draining.runner_timeout,
        handle_signals=False,
        access_log_class=ApiAccessLogger,
        # Bodies as sent: the API refuses compressed ones (415) unread, and aiohttp
        # decoding them anyway failed, and logged a traceback, once the answer was out.
        auto_decompress=False,
    )
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    draining.add(runner, guard)
    return runner


LISTEN_BACKLOG = 4096


async def _listen(
    runner: web.BaseRunner,
    where: Listen,
    key: str,
    *,
    reuse_port: bool = False,
    tls: ssl.SSLContext | None = None,
    handshake_timeout: float = 60.0,
) -> str:
    """Listen on ``where``; with ``tls``, a handshake not done ``handshake_timeout``
    seconds after the connection opened closes it."""
    # A deep accept queue: after a clear, hundreds of clients may connect at once, and with
    # the default of 128 the kernel drops SYNs that are retried only a second later.
    site = HandshakeTimedSite(
        runner,
        where.host,
        where.port,
        reuse_address=True,
        reuse_port=reuse_port or None,
        backlog=LISTEN_BACKLOG,
        ssl_context=tls,
        handshake_timeout=handshake_timeout,
    )
    try:
        await site.start()
    except OSError as exc:
        raise StartError(f"{key}: cannot listen on {where} ({exc.strerror or exc})") from None
    # The bound address tells the real port when the config says 0.
    host, port = runner.addresses[-1][:2]
    return f"{'http' if tls is None else 'https'}://{host}:{port}"
