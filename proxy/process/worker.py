"""One edge worker process of a fleet: ``python -m proxy worker --config PATH --index N --port P
--fleet-url URL`` (proxy/process/worker_args.py), started by the node's supervisor
(proxy/process/supervisor.py), never by hand.

It owns a memory store of its own (``cache.max_bytes`` divided by ``edge.workers``), joins the
fleet as a member (proxy/fleet/member.py: lease, generations, acknowledgements), and listens
on the shared edge port with SO_REUSEPORT. Its cache answers only while its lease holds
(proxy/fleet/store.py). It prints ``ready`` on standard output once it listens, and on SIGTERM
drains its connections (``edge.shutdown_timeout``) and exits 0; so it does when its node
is gone (its standard input, a pipe from the node, reaches its end). The node asks it on that
pipe what its store holds for a URL, for a trace (proxy/process/worker_channel.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from contextlib import AsyncExitStack

from proxy.config.model import Config, FleetConfig
from proxy.config.settings import settings_of
from proxy.config.values import Listen
from proxy.core.lease import Applied
from proxy.edge.access_log import EdgeAccess
from proxy.errors import FleetUnavailable, WireError
from proxy.fleet.figures import edge_report
from proxy.fleet.member import FleetMember
from proxy.fleet.scripts import FleetScripts
from proxy.fleet.settings import FleetSettings
from proxy.fleet.store import FleetStore
from proxy.observe.telemetry import Telemetry
from proxy.process import startup
from proxy.process.listeners import ProcessContext, edge_listening
from proxy.process.reload import Outcome, domains_hook, reloading
from proxy.process.service import memory_store, tiered_store
from proxy.process.worker_args import WorkerArgs
from proxy.process.worker_channel import NodeChannel
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.shared.applied import load_applied, save_applied
from proxy.store.tiered import TieredStore
from proxy.wire.worker import Ready, Reloaded, pack_worker_line

log = logging.getLogger("proxy.worker")


def fleet_settings(fleet: FleetConfig, url: str) -> FleetSettings:
    """``[fleet]``'s keys, with the URL the node resolved; ``margin`` and ``hints`` are for
    tests and benchmarks, not the config."""
    return settings_of(FleetSettings, fleet, url=url, keep=("margin", "hints"))


def run(config: Config, args: WorkerArgs, index: int) -> int:
    """The worker's life: returns its exit status. SIGHUP (from its node) reloads the config
    from ``args.config_path``; it prints the outcome on one line (``reloaded ok|failed DIGEST
    MESSAGE``) for the node to read."""
    return startup.run(lambda: _run(config, args, index), who=f"[worker {index}]")


async def _run(config: Config, args: WorkerArgs, index: int) -> int:
    stop = startup.stop_on_signals()
    loop = asyncio.get_running_loop()
    channel = NodeChannel(loop, stop)  # stops this worker when its node is gone
    async with AsyncExitStack() as stack:
        local = await _local_store(config, stack, args.cache_instance)
        channel.inspect = local.inspect  # the node's trace asks what this worker holds
        telemetry = Telemetry(store=local, domains=[domain.name for domain in config.domains])
        member = _member(config, local, telemetry, args, index)
        await _join(config, local, member, stack)
        store = FleetStore(local, member)
        # The access log ("-" is the node's standard output) and the response figures.
        access = EdgeAccess(config, responses=telemetry.responses, stdout=args.stdout_fd)
        stack.push_async_callback(access.close)
        loop.add_signal_handler(signal.SIGUSR1, access.reopen)  # the node passes it on
        handler, url = await stack.enter_async_context(
            edge_listening(
                ProcessContext(config, telemetry),
                store=store,
                port=args.port,
                reuse_port=True,
                tls_port=args.tls_port,
                access=access,
                peers=member,  # peer fills, when [fleet] peer_fill (decision 0047)
            )
        )
        # Each worker clears its own store of removed and re-pointed domains on its reload,
        # never through the fleet (decision 0020).
        await stack.enter_async_context(
            reloading(
                args.config_path,
                config,
                hooks=[
                    access.reconfigure,  # first: opening its new file is what may refuse
                    handler.reconfigure,
                    domains_hook(telemetry.set_domains),
                    domains_hook(member.set_domains),
                ],
                clear=local.clear_domain,
                run_file=False,
                report=_tell_node,
            )
        )
        channel.inspect = handler.traced(local.inspect)  # and its refusals (hit-for-miss)
        telemetry.origin_servers = handler.upstreams.rows  # in its report (origin figures)
        telemetry.peer_fills = handler.peer_fills  # in its report too, with peer fills
        startup.freeze_heap()
        log.info("edge worker listening on %s as %s", url, member.name)
        print(pack_worker_line(Ready()), flush=True)
        await stop.wait()
        log.info("stopping: draining in-flight requests")
    return 0


async def _local_store(
    config: Config, stack: AsyncExitStack, cache_instance: str | None
) -> MemoryStore | TieredStore:
    """This worker's own store: its share of the memory tier, in front of the node's shared
    tier when there is one; closed by ``stack``."""
    edge, cache = config.edge_role()
    memory = await stack.enter_async_context(
        memory_store(
            cache.max_bytes // edge.workers,
            purge_max_bytes=cache.purge_state_max_bytes // edge.workers,
        )
    )
    if cache.disk_path is None or cache_instance is None:
        return memory
    # Opened here, after the exec: an LMDB environment never crosses a fork (0030).
    tier = await asyncio.to_thread(
        SharedTier.open_member,
        cache.disk_path,
        max_bytes=cache.disk_max_bytes,
        instance=cache_instance,
        purge_max_bytes=cache.purge_state_max_bytes,
    )
    return await stack.enter_async_context(tiered_store(memory, tier, sendfile=cache.sendfile))


async def _join(
    config: Config, local: MemoryStore | TieredStore, member: FleetMember, stack: AsyncExitStack
) -> None:
    """The member's first sync, from what the shared tier applied when there is one; left
    (and its applied state saved) by ``stack``."""
    if isinstance(local, TieredStore):
        # The shared tier's own record of what it applied: the first sync brings it only
        # what it missed (proxy/store/shared/applied.py), so a restart keeps it warm.
        applied = await _tier_applied(config, local, member)
        if applied is not None:
            member.adopt(applied)
    await member.start()  # a first sync that fails leaves it fenced, and it keeps trying
    stack.push_async_callback(member.close)
    if isinstance(local, TieredStore):
        saver = asyncio.create_task(_save_applied(member, local), name="save-applied")
        stack.push_async_callback(_stop_saver, saver, member, local)


async def _tier_applied(config: Config, store: TieredStore, member: FleetMember) -> Applied | None:
    """Where the member starts from: what the shared tier applied. With the node's own
    embedded Valkey, which starts empty with the node (a new epoch), the tier's purge state
    holds every purge the node ever answered (process/control_purger.py), so the member
    starts at the new epoch's beginning and applies only what the new Valkey has seen;
    with a Valkey of its own, a new epoch means purges may have been lost, and the first
    sync distrusts the tier (revalidated before it is served: decision 0040)."""
    applied = load_applied(store.tier.directory)
    assert config.fleet is not None
    if applied is None or config.fleet.url is not None:
        return applied
    scripts = FleetScripts.of(member.settings)
    try:
        epoch = (await scripts.pending()).epoch
    except (FleetUnavailable, WireError):
        return applied
    finally:
        await scripts.aclose()
    if epoch == applied.epoch:
        return applied
    return Applied(epoch=epoch, seq=0, generations={})


APPLIED_SAVE_INTERVAL = 0.2  # seconds between checks of the member's applied state


async def _save_applied(member: FleetMember, store: TieredStore) -> None:
    """Record what the member has applied to the shared tier whenever it moves."""
    saved = None
    while True:
        applied = member.applied
        if applied is not saved and not store.tier.health.stuck:
            try:
                await asyncio.to_thread(save_applied, store.tier.directory, applied)
                saved = applied
            except OSError as error:
                store.tier.health.fault("fleet record", error)
        await asyncio.sleep(APPLIED_SAVE_INTERVAL)


async def _stop_saver(saver: asyncio.Task[None], member: FleetMember, store: TieredStore) -> None:
    saver.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await saver
    if not store.tier.health.stuck:
        with contextlib.suppress(OSError):
            save_applied(store.tier.directory, member.applied)


def _member(
    config: Config,
    memory: MemoryStore | TieredStore,
    telemetry: Telemetry,
    args: WorkerArgs,
    index: int,
) -> FleetMember:
    """The worker's membership of the fleet, reporting its figures; not yet started."""
    assert config.fleet is not None  # a worker is only started for a fleet
    listen = config.edge_role()[0].listen
    # Where the other nodes reach this node's edge for peer fills (decision 0047).
    advertise = config.fleet.advertise or f"http://{Listen(listen.host, args.port)}"
    member = FleetMember(
        settings=fleet_settings(config.fleet, args.fleet_url),
        store=memory,
        domains=[domain.name for domain in config.domains],
        node=config.fleet.node,
        worker=index,
        address=f"{config.edge_role()[0].listen.host}:{args.port}",
        # member.domains: the domains served now, after any reload
        report=lambda: edge_report(telemetry, memory, member.domains, time.time()),
        advertise=advertise,
    )
    return member


def _tell_node(outcome: Outcome) -> None:
    """One line on standard output, which the node's supervisor reads."""
    said = Reloaded(ok=outcome.ok, digest=outcome.digest or None, message=outcome.message)
    print(pack_worker_line(said), flush=True)
