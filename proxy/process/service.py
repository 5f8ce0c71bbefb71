"""One process, two listeners: the lifecycle of everything that runs.

``running(config)`` creates, in one place and in order, everything the process owns: the
store, the state database, the origin session, the reclaim task, the edge listener and the
API listener; and closes them in reverse order however it is left. Nothing is half-started:
if any step fails (a port in use, an unreadable state database) the steps already taken are
undone before the error leaves.

``serve(config)`` runs it until SIGTERM or SIGINT, then drains (``Draining``): the listeners
stop accepting, idle connections close, in-flight requests get what is left of
edge.shutdown_timeout to finish, less a reserve in which the rest are cancelled and everything
is closed, and the process exits 0: edge.shutdown_timeout bounds the whole shutdown.

The listeners themselves, and ``Draining``, are in proxy/process/listeners.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from proxy.config.model import Config
from proxy.core.purge.retention import DEFAULT_MAX_BYTES as DEFAULT_PURGE_STATE_BYTES
from proxy.edge.access_log import EdgeAccess
from proxy.edge.handler import Edge
from proxy.observe.telemetry import Telemetry
from proxy.process import startup
from proxy.process.listeners import (
    Draining,
    ProcessContext,
    StartError,
    control_listening,
    edge_connections,
    edge_listening,
)
from proxy.process.reload import domains_hook, reloading
from proxy.state.async_state import AsyncState
from proxy.store.base import LocalPurger
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.shared.retire import retiring
from proxy.store.shared.sweep import sweeping
from proxy.store.tiered import TieredStore

# The listeners moved to proxy/process/listeners.py; these names are still importable here.
__all__ = [
    "RECLAIM_SLICE",
    "RECLAIM_SLICE_SECONDS",
    "Draining",
    "ProcessContext",
    "Service",
    "StartError",
    "control_listening",
    "edge_connections",
    "edge_listening",
    "memory_store",
    "running",
    "serve",
    "tiered_store",
]

log = logging.getLogger("proxy")

# A reclaim slice deletes at most 500 keys and runs at most 0.5 ms, whichever comes first
# (about 0.2 ms for 500 small entries on a quiet machine: benchmarks/clear_cost.py).
RECLAIM_SLICE = 500
RECLAIM_SLICE_SECONDS = 0.0005


@dataclass(frozen=True, slots=True)
class Service:
    config: Config
    store: MemoryStore | TieredStore
    state: AsyncState
    edge: Edge
    telemetry: Telemetry
    edge_url: str
    api_url: str
    draining: Draining
    # What a config reload calls besides the edge's and telemetry's (proxy/process/reload.py).
    reload_hooks: list[Callable[[Config], None]] = field(default_factory=list)

    @property
    def tls_url(self) -> str | None:
        """The edge's TLS listener (edge.tls_listen), if it has one."""
        return self.edge.tls.url

    access: EdgeAccess | None = None  # the access log and response figures (reopen, reconfigure)


@asynccontextmanager
async def running(
    config: Config, *, clock: Callable[[], float] = time.time
) -> AsyncIterator[Service]:
    """One process with both roles and nothing to coordinate (no [fleet]): the edge and the
    control plane share one memory store, and a clear is a call into it.

    ``clock`` is the service's wall clock, one for all: cache freshness, the traffic
    timeline, audit times, rate limits and dashboard sessions (tests move it by hand)."""
    draining = Draining.of(config)
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(service_store(config))
        telemetry = Telemetry(store=store, domains=[d.name for d in config.domains], clock=clock)
        if isinstance(store, TieredStore):
            telemetry.tier = store  # /metrics and /readyz read the shared tier
        access = EdgeAccess(config, responses=telemetry.responses)
        stack.push_async_callback(access.close)
        process = ProcessContext(config, telemetry, clock=clock, draining=draining)
        edge, edge_url = await stack.enter_async_context(
            edge_listening(process, store=store, access=access)
        )
        reload_hooks: list[Callable[[Config], None]] = []
        state, api_url = await stack.enter_async_context(
            control_listening(
                process,
                purger=LocalPurger(store),
                store=store,
                reload_hooks=reload_hooks,
                origin_states=edge.upstreams.rows,  # /readyz shows the edge's view too
                inspect=edge.traced(store.inspect),  # with its refusals (hit-for-miss)
            )
        )
        yield Service(
            config=config,
            store=store,
            state=state,
            edge=edge,
            telemetry=telemetry,
            edge_url=edge_url,
            api_url=api_url,
            draining=draining,
            reload_hooks=reload_hooks,
            access=access,
        )


@asynccontextmanager
async def service_store(config: Config) -> AsyncIterator[MemoryStore | TieredStore]:
    """The one process's store: a memory store, in front of the shared tier when
    ``cache.disk_path`` is set (locked to this process, decision 0030)."""
    cache = config.edge_role()[1]
    async with AsyncExitStack() as stack:
        memory = await stack.enter_async_context(
            memory_store(cache.max_bytes, purge_max_bytes=cache.purge_state_max_bytes)
        )
        tier = await open_node_tier(config)
        if tier is None:
            yield memory
            return
        tiered = tiered_store(
            memory,
            tier,
            sendfile=cache.sendfile,
            sweep_pause=cache.sweep_pause,
            url_purge_keep=cache.url_purge_keep,
        )
        yield await stack.enter_async_context(tiered)


async def open_node_tier(config: Config) -> SharedTier | None:
    """The shared tier (``cache.disk_path``) opened as its node: the directory locked to this
    process (a second node on it gets CacheDirectoryLocked). None without a shared tier."""
    cache = config.edge_role()[1]
    if cache.disk_path is None:
        return None
    return await asyncio.to_thread(
        SharedTier.open_node,
        cache.disk_path,
        max_bytes=cache.disk_max_bytes,
        purge_max_bytes=cache.purge_state_max_bytes,
    )


@asynccontextmanager
async def memory_store(
    max_bytes: int, *, purge_max_bytes: int = DEFAULT_PURGE_STATE_BYTES
) -> AsyncIterator[MemoryStore]:
    """A memory store, and the task that reclaims its cleared generations in slices."""
    wake = asyncio.Event()
    store = MemoryStore(max_bytes=max_bytes, on_clear=wake.set, purge_max_bytes=purge_max_bytes)
    reclaimer = asyncio.create_task(_reclaim(store, wake), name="reclaim")
    try:
        yield store
    finally:
        await _cancel(reclaimer)


@asynccontextmanager
async def tiered_store(
    memory: MemoryStore,
    tier: SharedTier,
    *,
    sendfile: bool = False,
    sweep_pause: float = 30.0,
    url_purge_keep: float = 300.0,
) -> AsyncIterator[TieredStore]:
    """The memory store in front of an opened shared tier; the tier is closed (a clean close:
    its entries are trusted at the next start, decision 0030) once its fills are done."""
    store = TieredStore(memory, tier, sendfile=sendfile)
    try:
        # the node's only process: it sweeps (sweep.py) and retires (retire.py)
        async with sweeping(tier, round_pause=sweep_pause), retiring(tier, url_purge_keep):
            yield store
    finally:
        await store.close()
        await asyncio.to_thread(tier.close)


async def _reclaim(store: MemoryStore, wake: asyncio.Event) -> None:
    """Delete cleared generations, and check entries against lazy purges, in small slices,
    yielding to requests between slices."""
    while True:
        await wake.wait()
        wake.clear()
        # Yield to requests between slices (sleep(0) is a yield, not a wait).
        while store.pending_reclaim:
            store.reclaim(RECLAIM_SLICE, seconds=RECLAIM_SLICE_SECONDS)
            await asyncio.sleep(0)
        # Retire lazy purges (prefix bans, tag purges: decision 0024) in the same slices.
        while store.pending_settle:
            store.settle(RECLAIM_SLICE, seconds=RECLAIM_SLICE_SECONDS)
            await asyncio.sleep(0)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def serve(config: Config, config_path: Path | None = None) -> int:
    """Run one process with both roles until SIGTERM/SIGINT; return the exit code. (A node
    with workers or a fleet is run by proxy/process/node.py instead.) SIGHUP reloads the config from
    ``config_path`` (proxy/process/reload.py)."""
    return startup.run(lambda: _serve(config, config_path))


async def _serve(config: Config, config_path: Path | None = None) -> int:
    stop = startup.stop_on_signals()
    loop = asyncio.get_running_loop()
    async with running(config) as service, AsyncExitStack() as reloads:
        if service.access is not None:
            loop.add_signal_handler(signal.SIGUSR1, service.access.reopen)  # logrotate
        if config_path is not None:
            access = [] if service.access is None else [service.access.reconfigure]
            await reloads.enter_async_context(
                reloading(
                    config_path,
                    config,
                    # The access log first: opening its new file is what may refuse.
                    hooks=[
                        *access,
                        service.edge.reconfigure,
                        domains_hook(service.telemetry.set_domains),
                        *service.reload_hooks,
                    ],
                    clear=service.store.clear_domain,
                )
            )
        startup.freeze_heap()
        log.info("edge listening on %s, api on %s", service.edge_url, service.api_url)
        # Machine-readable lines for scripts and tests that start us on port 0.
        print(f"edge {service.edge_url}", flush=True)
        print(f"api {service.api_url}", flush=True)
        if service.tls_url is not None:
            log.info("edge TLS listening on %s", service.tls_url)
            print(f"edge-tls {service.tls_url}", flush=True)
        await stop.wait()
        log.info("stopping: draining in-flight requests")
        await service.draining.drain()
    log.info("stopped")
    return 0
