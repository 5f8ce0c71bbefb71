"""The checker of issue 12: is ``200 Cache cleared`` true on every edge process, while they fail?

Run: python -m benchmarks.fleet_checker [--clears 2000] [--seed N] [--dir PATH] [--disk]
     [--peer-fill]

It starts a fleet of real processes (benchmarks/fleet_cluster.py: Valkey, one control plane,
three edge nodes, one of them with two workers), then at the same time:

- readers GET from every edge node, each request on a fresh connection so that every worker
  is reached, and record the version number in the body;
- one clearer per domain bumps the origin's version of its domain and then clears the
  domain through the control plane's API, again and again; with ``purges`` (the default),
  half of its turns are instead a purge by URL, prefix or tag, hard or soft (decision
  0026): it bumps the versions of the pages the purge covers, then purges them through the
  control plane's ``POST /api/v1/cdn/purge``;
- the faults of issue 12 are injected one after another (``FAULTS``), each healed before
  the next: kill -9 an edge node and restart it; SIGSTOP an edge node and SIGCONT it; drop
  or black-hole an edge node's traffic to Valkey and heal it; kill -9 Valkey and start it
  without its data; kill -9 the control plane in the middle of a clear and restart it.

Every operation is recorded with its start and end (this process's monotonic clock) and its
result, and the whole history is checked at the end for the property of decision 0014:
**no read that starts after a clear's 200 returns a version older than that clear**, and
no read of a page that starts after the 200 of a purge covering it returns a version older
than that purge (for a soft purge: the page was not served without revalidation). A read
that fails, or gets a 5xx, while a node is down is counted apart and is no violation; a
clear answered 503 (or not at all) is not a 200 and constrains nothing.

With ``--disk`` every edge node has a shared tier (``cache.disk_path``, decision 0040) that
outlives its processes: a node killed and restarted finds what it stored, and must apply the
purges it missed before serving it; after Valkey's restart the tier's entries are distrusted
and revalidated. The origin then gives ``page0`` an ETag (revalidated with a 304 when
unchanged) and ``page1`` none (dropped, a miss).

With ``--peer-fill`` every edge node has ``[fleet] peer_fill = true`` (decision 0047): a miss
asks the key's owner first, and an owner's answer is used only with a purge label that
covers every purge the asking node applied. The faults then hit owners too (killed,
stopped, cut off from Valkey, a new epoch), and the property must still hold with no
second purge.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import aiohttp
import valkey.asyncio

from benchmarks.fleet_cluster import Cluster, Edge
from benchmarks.fleet_history import Clear, Fault, History, Read
from benchmarks.peer_fill_latency import PeerCluster

KILL_EDGE, STOP_EDGE, DROP, BLACKHOLE = "kill-edge", "stop-edge", "drop", "blackhole"
RESTART_VALKEY, KILL_CONTROL = "restart-valkey", "kill-control"
FAULTS = (KILL_EDGE, STOP_EDGE, DROP, BLACKHOLE, RESTART_VALKEY, KILL_CONTROL)
READ_TIMEOUT = 3.0  # a read of a stopped node fails after this; it is no violation
PROBE_EVERY = 0.05  # seconds between the reads sent to a stopped node
PAUSE_AFTER_FAILURE = 0.05  # pacing, so a node that is down is not hammered in a loop
RECOVERY_TIMEOUT = 20.0  # after a fault is healed, a clear must be answered 200 within it
PURGE_SHARE = 0.5  # of a clearer's turns, with purges on
PAGES = ("page0", "page1")  # what the readers read of each domain


class Checker:
    """Readers, clearers and faults on ``cluster``; ``history`` records them all."""

    def __init__(
        self, cluster: Cluster, *, seed: int = 0, readers_per_node: int = 2, purges: bool = True
    ) -> None:
        self.cluster = cluster
        self.purges = purges
        self.history = History()
        self.rng = random.Random(seed)
        self.readers_per_node = readers_per_node
        self._stop = asyncio.Event()
        self._confirmed = asyncio.Event()  # set at each clear answered 200
        # Reads answered from a shared tier (Cache-Status detail="disk"): node, start.
        self.disk_hits: list[tuple[str, float]] = []
        # Reads filled through the key's owner (Cache-Status detail="peer=..."): node, start.
        self.peer_fills: list[tuple[str, float]] = []
        self._edge_turn = 0

    async def run(
        self, faults: Sequence[str] = FAULTS, *, rounds: int = 1, min_clears: int = 0
    ) -> History:
        """Inject ``faults`` in order, ``rounds`` times and then until ``min_clears`` clears
        have been answered 200, with reads and clears running throughout."""
        self._stop.clear()
        tasks = [
            asyncio.create_task(self._reader(edge))
            for edge in range(len(self.cluster.edges))
            for _ in range(self.readers_per_node)
        ]
        tasks += [asyncio.create_task(self._clearer(domain)) for domain in self.cluster.domains]
        try:
            done = 0
            while done < rounds or self.history.confirmed < min_clears:
                for kind in faults:
                    await self._quiet()
                    await self.inject(kind)
                done += 1
            await self._quiet()  # reads after the last fault is healed are checked too
        finally:
            self._stop.set()
            await asyncio.gather(*tasks)
        return self.history

    async def _quiet(self) -> None:
        await asyncio.sleep(self.rng.uniform(0.3, 0.8))  # pacing between faults

    async def inject(self, kind: str) -> None:
        """One fault of ``kind``, healed before it returns."""
        actions: dict[str, Callable[[], Awaitable[str]]] = {
            KILL_EDGE: self._kill_edge,
            STOP_EDGE: self._stop_edge,
            DROP: lambda: self._partition(DROP),
            BLACKHOLE: lambda: self._partition(BLACKHOLE),
            RESTART_VALKEY: self._restart_valkey,
            KILL_CONTROL: self._kill_control,
        }
        start = time.monotonic()
        target = await actions[kind]()
        healed = time.monotonic()
        self.history.faults.append(Fault(kind, target, start, healed))
        if not await self._recovered(healed):
            self.history.unrecovered.append(kind)

    async def _recovered(self, since: float) -> bool:
        """Whether a clear sent after ``since`` is answered 200 within RECOVERY_TIMEOUT:
        the fleet works again after the fault (liveness, beside the checked safety)."""
        try:
            async with asyncio.timeout(RECOVERY_TIMEOUT):
                while not any(c.status == 200 and c.start > since for c in self.history.clears):
                    self._confirmed.clear()
                    await self._confirmed.wait()
        except TimeoutError:
            return False
        return True

    def _next_edge(self) -> int:
        self._edge_turn += 1
        return self._edge_turn % len(self.cluster.edges)

    def _hold(self) -> float:
        """How long a fault lasts: sometimes shorter than a lease, sometimes longer."""
        return self.rng.uniform(0.1, 2.5 * self.cluster.timing.lease)

    async def _kill_edge(self) -> str:
        edge = self.cluster.edges[self._next_edge()]
        await edge.node.kill()
        await asyncio.sleep(self._hold())
        await edge.node.start()
        return edge.node.name

    async def _stop_edge(self) -> str:
        """SIGSTOP an edge node, then SIGCONT it. While it is stopped, a new read is sent to
        it every PROBE_EVERY seconds: the readers' own reads block on the stopped node, and
        these queue up after the clears answered 200 meanwhile, to be served when it wakes."""
        edge = self.cluster.edges[self._next_edge()]
        edge.node.signal(signal.SIGSTOP)
        until = time.monotonic() + self._hold()
        async with self._session() as session:
            probes = []
            while time.monotonic() < until:
                probes.append(asyncio.create_task(self._read(session, edge)))
                await asyncio.sleep(PROBE_EVERY)
            edge.node.signal(signal.SIGCONT)
            await asyncio.gather(*probes)
        return edge.node.name

    async def _partition(self, how: str) -> str:
        edge = self.cluster.edges[self._next_edge()]
        edge.relay.drop() if how == DROP else edge.relay.blackhole()
        await asyncio.sleep(self._hold())
        edge.relay.heal()
        return edge.node.name

    async def _restart_valkey(self) -> str:
        await self.cluster.restart_valkey()
        return "valkey"

    async def _kill_control(self) -> str:
        """kill -9 the control plane while a clear is waiting for the fleet. One edge is
        black-holed first, so the clear waits (for its lease) long enough to be killed in
        the middle: the kill follows the clear's hint, published once it is recorded."""
        cluster = self.cluster
        edge = cluster.edges[self._next_edge()]
        client = valkey.asyncio.Valkey(port=cluster.valkey_port)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe("{cdn}:clears")
            edge.relay.blackhole()
            domain = self.rng.choice(cluster.domains)
            async with aiohttp.ClientSession() as session:
                clearing = asyncio.create_task(self._clear(session, domain))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(cluster.timing.clear_timeout):
                        while not await pubsub.get_message(True, timeout=1.0):
                            pass
                await cluster.control.kill()
                await clearing
            edge.relay.heal()
            await asyncio.sleep(self.rng.uniform(0, cluster.timing.lease))
            await cluster.control.start()
        finally:
            edge.relay.heal()
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            await client.aclose()
        return "control"

    def _session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(force_close=True)  # a fresh connection per read
        timeout = aiohttp.ClientTimeout(total=READ_TIMEOUT)
        return aiohttp.ClientSession(connector=connector, timeout=timeout)

    async def _reader(self, index: int) -> None:
        edge = self.cluster.edges[index]
        async with self._session() as session:
            while not self._stop.is_set():
                read = await self._read(session, edge)
                if read.version is None:
                    await asyncio.sleep(PAUSE_AFTER_FAILURE)

    async def _read(self, session: aiohttp.ClientSession, edge: Edge) -> Read:
        """One GET of a random page of a random domain from ``edge``, recorded."""
        domain = self.rng.choice(self.cluster.domains)
        page = self.rng.choice(PAGES)
        url = f"{edge.url}/{domain}/{page}"
        start = time.monotonic()
        status, body, cache, error = None, "", "", ""
        try:
            async with session.get(url, headers={"Host": domain}) as response:
                status, body = response.status, await response.text()
                cache = response.headers.get("Cache-Status", "")
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = type(exc).__name__
        version = int(body) if status == 200 and body.isdigit() else None
        hit = "; hit" in cache
        if hit and 'detail="disk"' in cache:
            self.disk_hits.append((edge.node.name, start))
        if "peer=" in cache:
            self.peer_fills.append((edge.node.name, start))
        end = time.monotonic()
        read = Read(edge.node.name, domain, start, end, status, version, hit, error, page, cache)
        self.history.reads.append(read)
        return read

    async def _clearer(self, domain: str) -> None:
        async with aiohttp.ClientSession() as session:
            while not self._stop.is_set():
                if self.purges and self.rng.random() < PURGE_SHARE:
                    clear = await self._purge(session, domain)
                else:
                    clear = await self._clear(session, domain)
                if clear.status != 200:
                    await asyncio.sleep(PAUSE_AFTER_FAILURE)

    async def _clear(self, session: aiohttp.ClientSession, domain: str) -> Clear:
        """Bump the origin's version of ``domain``, then clear it through the API."""
        version = self.cluster.origin.bump(domain)
        start = time.monotonic()
        status, error = await self._post(session, "clear-cache", {"domain": domain})
        clear = Clear(domain, version, start, time.monotonic(), status, error)
        return self._record(clear)

    async def _purge(self, session: aiohttp.ClientSession, domain: str) -> Clear:
        """Bump the versions of the pages a random purge covers, then purge them through the
        API."""
        kind = self.rng.choice(("url", "prefix", "tag"))
        soft = self.rng.random() < 0.5
        page = self.rng.choice(PAGES)
        pages: tuple[str, ...] = (page,)
        items = [page] if kind == "tag" else [f"/{domain}/{page}"]
        if kind == "prefix" and self.rng.random() < 0.5:
            items, pages = [f"/{domain}/page"], PAGES
        version = self.cluster.origin.bump(domain, pages)
        field = {"url": "urls", "prefix": "prefixes", "tag": "tags"}[kind]
        start = time.monotonic()
        body = {"domain": domain, field: items, "soft": soft}
        status, error = await self._post(session, "purge", body)
        name = f"{kind} soft" if soft else kind
        clear = Clear(domain, version, start, time.monotonic(), status, error, name, pages)
        return self._record(clear)

    async def _post(
        self, session: aiohttp.ClientSession, endpoint: str, body: dict[str, object]
    ) -> tuple[int | None, str]:
        """POST ``body`` to ``/api/v1/cdn/<endpoint>``: the status (None if no answer came)
        and the error that took its place."""
        cluster = self.cluster
        try:
            async with session.post(
                f"{cluster.api_url}/api/v1/cdn/{endpoint}",
                json=body,
                headers={"Authorization": f"Bearer {cluster.token}"},
                timeout=aiohttp.ClientTimeout(total=cluster.timing.clear_timeout + 5),
            ) as response:
                await response.read()
                return response.status, ""
        except (aiohttp.ClientError, TimeoutError) as exc:
            return None, type(exc).__name__

    def _record(self, clear: Clear) -> Clear:
        self.history.clears.append(clear)
        if clear.status == 200:
            self._confirmed.set()
        return clear


async def check(
    directory: Path,
    *,
    faults: Sequence[str] = FAULTS,
    rounds: int = 1,
    min_clears: int = 0,
    seed: int = 0,
    disk: bool = False,
    peer_fill: bool = False,
) -> History:
    """Start a cluster under ``directory`` (``disk``: a shared tier on every edge node;
    ``peer_fill``: peer fills on), run the checker on it, stop everything."""
    cluster = checker_cluster(directory, disk=disk, peer_fill=peer_fill)
    try:
        await cluster.start()
        checker = Checker(cluster, seed=seed)
        history = await checker.run(faults, rounds=rounds, min_clears=min_clears)
        if disk:
            print(disk_report(checker))
        if peer_fill:
            print(f"reads filled through the key's owner {len(checker.peer_fills)}")
        return history
    finally:
        await cluster.close()


RETIRE_AFTER = 0.5  # seconds: cache.url_purge_keep on the checker's tiers (decision 0059)


def disk_cluster(directory: Path) -> Cluster:
    """The checker's cluster with a shared tier on every edge node; PAGES[0] carries an
    ETag, PAGES[1] none. URL purge records retire after RETIRE_AFTER, not 300 s, so that
    every fault meets retirements too."""
    cluster = Cluster(directory, disk=True, validated=PAGES[:1])
    cluster.cache_extra = f"url_purge_keep = {RETIRE_AFTER}\n"
    return cluster


def checker_cluster(directory: Path, *, disk: bool = False, peer_fill: bool = False) -> Cluster:
    """The checker's cluster: ``disk`` as ``disk_cluster``; with ``peer_fill``, every edge
    node takes peer fills (benchmarks/peer_fill_latency.py ``PeerCluster``, at its default
    peer_timeout of 0.3 s: a stopped owner costs a read that long, then the origin)."""
    if not peer_fill:
        return disk_cluster(directory) if disk else Cluster(directory)
    validated = PAGES[:1] if disk else ()
    return PeerCluster(directory, disk=disk, validated=validated)


def disk_report(checker: Checker) -> str:
    """What the shared tiers did: reads they answered, and the origin's revalidations (a 304
    comes only from a distrusted entry whose page did not change: every purge moves the
    versions of the pages it covers)."""
    seen = checker.cluster.origin.seen
    conditional = sum(1 for _, asked, _ in seen if asked is not None)
    not_modified = sum(1 for _, _, status in seen if status == 304)
    return (
        f"reads answered from a shared tier {len(checker.disk_hits)}; origin requests"
        f" {len(seen)}, conditional {conditional}, answered 304 {not_modified}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clears", type=int, default=2000, help="clears answered 200, at least")
    parser.add_argument("--rounds", type=int, default=3, help="times each fault is injected")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, help="where the nodes' configs and logs go")
    parser.add_argument("--disk", action="store_true", help="a shared tier on every edge node")
    parser.add_argument("--peer-fill", action="store_true", help="[fleet] peer_fill = true")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fleet-checker-") as scratch:
        directory = args.dir or Path(scratch)
        history = asyncio.run(
            check(
                directory,
                rounds=args.rounds,
                min_clears=args.clears,
                seed=args.seed,
                disk=args.disk,
                peer_fill=args.peer_fill,
            )
        )
    print(history.report())
    print(f"time {time.monotonic() - started:.0f} s")
    return 1 if history.violations() or history.unrecovered else 0


if __name__ == "__main__":
    sys.exit(main())
