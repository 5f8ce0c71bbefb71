"""Issue 33's fleet benchmarks: a fleet of real ``cdn-proxy serve`` nodes on loopback
(benchmarks/fleet_cluster.py: one Valkey, a control plane, edge nodes of one worker, one
origin that counts what it is asked) behind a round-robin client.

    PYTHONPATH=. python -m benchmarks.peer_fleet reads [--objects 1000] [--no-peer-fill]
    PYTHONPATH=. python -m benchmarks.peer_fleet kill  [--objects 1000]
    PYTHONPATH=. python -m benchmarks.peer_fleet join  [--objects 1000]
    PYTHONPATH=. python -m benchmarks.peer_fleet hot   [--requests 4000]

- ``reads``: 4 nodes, each object read through every node (request i goes to node i mod 4,
  ``--concurrency`` requests in flight): origin requests, and whether every answer is
  byte-exact (the origin's body for the object);
- ``kill``: the same, and kill -9 of one node when half the objects have been read; the
  client then round-robins over the nodes left, as a load balancer that health-checks
  would: client errors, and origin requests for the keys the dead node owned;
- ``join``: 4 nodes hold every object, then a fifth joins: the share of keys whose owner
  changed (from the live member lists in Valkey), and the origin requests it costs to read
  every object through the new node;
- ``hot``: one key at half the requests, the other half over ``--objects`` keys: each
  node's load (client requests it answered, plus peers' requests it answered as owner),
  against the mean.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from benchmarks.fleet_cluster import Cluster, Edge
from benchmarks.peer_fill_latency import D, PeerCluster, peers_ready
from proxy.core.peer import moved_share, owner_of
from proxy.fleet.peers import live_peers
from proxy.fleet.scripts import FleetScripts
from proxy.fleet.settings import FleetSettings

NODES4 = ("edge0", "edge1", "edge2", "edge3")


def key_of(page: str) -> bytes:
    """What owners are chosen by for ``/D/page`` (the domain, then the target)."""
    return f"{D}\0/{D}/{page}".encode()


async def start(directory: Path, nodes: int, *, peer_fill: bool, wait: float) -> Cluster:
    cluster: Cluster
    if peer_fill:
        cluster = PeerCluster(directory, domains=(D,), workers=(1,) * nodes)
        cluster.peer_timeout = wait
    else:
        cluster = Cluster(directory, domains=(D,), workers=(1,) * nodes)
    await cluster.start()
    if peer_fill:
        names = tuple(edge.node.name for edge in cluster.edges)
        await peers_ready(cluster, names, cluster.edges)
    return cluster


class Client:
    """Round-robin over ``edges`` (those still up), ``concurrency`` requests in flight."""

    def __init__(self, edges: Sequence[Edge], concurrency: int) -> None:
        self.edges = list(edges)
        self._turn = itertools.count()
        self._slots = asyncio.Semaphore(concurrency)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency * 2),
            timeout=aiohttp.ClientTimeout(total=30),
        )
        self.errors: list[str] = []
        self.wrong = 0  # answers not byte-exact
        self.served: collections.Counter[str] = collections.Counter()  # node -> answers

    async def get(self, page: str, expected: bytes = b"1") -> str:
        """One GET through the next node: its Cache-Status."""
        async with self._slots:
            edge = self.edges[next(self._turn) % len(self.edges)]
            try:
                async with self._session.get(
                    f"{edge.url}/{D}/{page}", headers={"Host": D}
                ) as response:
                    body = await response.read()
                    if response.status != 200:
                        self.errors.append(f"{edge.node.name} {page} {response.status}")
                    elif body != expected:
                        self.wrong += 1
                    self.served[edge.node.name] += 1
                    return response.headers.get("Cache-Status", "")
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.errors.append(f"{edge.node.name} {page} {type(exc).__name__}")
                return ""

    async def close(self) -> None:
        await self._session.close()


def asks(cluster: Cluster, pages: Sequence[str]) -> collections.Counter[str]:
    """Origin requests per page of ``pages``."""
    wanted = {f"{D}/{page}": page for page in pages}
    counts: collections.Counter[str] = collections.Counter()
    for seen, _, _ in cluster.origin.seen:
        if seen in wanted:
            counts[wanted[seen]] += 1
    return counts


async def read_all(client: Client, pages: Sequence[str], times: int) -> None:
    """Each page read ``times`` times in a row (round-robin: through every node)."""
    await asyncio.gather(*(client.get(page) for page in pages for _ in range(times)))


async def reads(args: argparse.Namespace, directory: Path) -> None:
    cluster = await start(directory, 4, peer_fill=args.peer_fill, wait=args.peer_timeout)
    client = Client(cluster.edges, args.concurrency)
    try:
        pages = [f"r{i}" for i in range(args.objects)]
        await read_all(client, pages, 4)
        counted = asks(cluster, pages)
        print(f"peer_fill {args.peer_fill}: {args.objects} objects x 4 nodes")
        print(
            f"origin requests {sum(counted.values())} (most for one object {max(counted.values())})"
        )
        print(f"client errors {len(client.errors)}, answers not byte-exact {client.wrong}")
        if args.peer_fill:
            print(await peer_figures(cluster))
    finally:
        await client.close()
        await cluster.close()


async def kill(args: argparse.Namespace, directory: Path) -> None:
    cluster = await start(directory, 4, peer_fill=True, wait=args.peer_timeout)
    client = Client(cluster.edges, args.concurrency)
    try:
        pages = [f"k{i}" for i in range(args.objects)]
        half = len(pages) // 2
        await read_all(client, pages[:half], 4)
        dead = cluster.edges[3]
        client.edges.remove(dead)  # the balancer's health check
        await dead.node.kill()
        await read_all(client, pages[half:], 4)
        counted = asks(cluster, pages)
        owned = [page for page in pages[half:] if owner_of(key_of(page), NODES4) == "edge3"]
        over = [page for page in owned if counted[page] > 1]
        print(
            f"kill -9 edge3 after {half} of {len(pages)} objects;"
            f" client errors {len(client.errors)}"
        )
        print(f"origin requests {sum(counted.values())}, answers not byte-exact {client.wrong}")
        print(
            f"edge3's keys read after the kill: {len(owned)}, origin requests for them"
            f" {sum(counted[p] for p in owned)}, keys asked more than once {len(over)}"
            f" (most {max((counted[p] for p in owned), default=0)})"
        )
        for name, part in (("before", pages[:half]), ("after", pages[half:])):
            others = [p for p in part if p not in owned]
            extra = [p for p in others if counted[p] > 1]
            print(
                f"other keys read {name} the kill: {len(others)}, origin requests"
                f" {sum(counted[p] for p in others)}, asked more than once {len(extra)}"
            )
        print(await peer_figures(cluster))
    finally:
        await client.close()
        await cluster.close()


async def members(cluster: Cluster) -> dict[str, str]:
    url = f"redis://127.0.0.1:{cluster.valkey_port}/0"
    scripts = FleetScripts.of(FleetSettings(url=url, lease=0.6, renew=0.15, timeout=0.2))
    try:
        return live_peers(await scripts.members())
    finally:
        await scripts.aclose()


async def join(args: argparse.Namespace, directory: Path) -> None:
    cluster = await start(directory, 4, peer_fill=True, wait=args.peer_timeout)
    client = Client(cluster.edges, args.concurrency)
    try:
        pages = [f"j{i}" for i in range(args.objects)]
        await read_all(client, pages, 4)
        before = tuple(await members(cluster))
        new = await cluster.add_edge()
        names = (*before, new.node.name)
        await peers_ready(cluster, names, cluster.edges)
        after = tuple(await members(cluster))
        share = moved_share(before, after, [key_of(p) for p in pages])
        moved_to_new = sum(
            1
            for p in pages
            if owner_of(key_of(p), after) != owner_of(key_of(p), before)
            and owner_of(key_of(p), after) == new.node.name
        )
        was = sum(asks(cluster, pages).values())
        only_new = Client([new], args.concurrency)
        try:
            await read_all(only_new, pages, 1)
        finally:
            await only_new.close()
        cost = sum(asks(cluster, pages).values()) - was
        print(f"members {len(before)} -> {len(after)}: keys whose owner changed {share:.1%}")
        print(f"  of them moved to the new node: {moved_to_new} of {len(pages)}")
        print(
            f"every object read through the new node: origin requests {cost}"
            f" ({cost / len(pages):.1%}), client errors {len(only_new.errors)}"
        )
        print(await peer_figures(cluster))
    finally:
        await client.close()
        await cluster.close()


async def metric(cluster: Cluster, name: str) -> dict[str, float]:
    """The samples of ``cdn_proxy_<name>`` on the control plane's /metrics: labels -> value."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{cluster.api_url}/metrics") as response,
    ):
        text = await response.text()
    found = {}
    for line in text.splitlines():
        if line.startswith(f"cdn_proxy_{name}{{") or line.startswith(f"cdn_proxy_{name} "):
            labels, _, value = line.rpartition(" ")
            found[labels.removeprefix(f"cdn_proxy_{name}")] = float(value)
    return found


async def answered(cluster: Cluster) -> dict[str, float]:
    """Each node's peer answers (``peer_answers_total``), from the control plane."""
    found = await metric(cluster, "peer_answers_total")
    return {labels.split('"')[1]: value for labels, value in found.items()}


async def peer_figures(cluster: Cluster) -> str:
    """Peer errors by kind, origin requests avoided and the origin offload, once settled."""
    await settled(cluster)
    kinds: collections.Counter[str] = collections.Counter()
    for labels, value in (await metric(cluster, "peer_errors_total")).items():
        kinds[labels.split('kind="')[1].split('"')[0]] += int(value)
    avoided = sum((await metric(cluster, "origin_requests_avoided_total")).values())
    offload = (await metric(cluster, "origin_offload")).get("", 0.0)
    return (
        f"peer errors {dict(kinds) or 0}; origin requests avoided {avoided:.0f};"
        f" origin offload {offload:.3f}"
    )


async def settled(cluster: Cluster) -> dict[str, float]:
    """Peer answers once two scrapes agree (reports arrive each renewal)."""
    last = await answered(cluster)
    while True:
        await asyncio.sleep(0.5)  # reports are sent each renewal (0.15 s)
        now = await answered(cluster)
        if now == last:
            return now
        last = now


async def hot(args: argparse.Namespace, directory: Path) -> None:
    cluster = await start(directory, 4, peer_fill=True, wait=args.peer_timeout)
    client = Client(cluster.edges, args.concurrency)
    try:
        before = await settled(cluster)
        cold = [f"c{i}" for i in range(args.objects)]
        requests = [
            "hot" if i % 2 == 0 else cold[(i // 2) % len(cold)] for i in range(args.requests)
        ]
        await asyncio.gather(*(client.get(page) for page in requests))
        after = await settled(cluster)
        load = {
            edge.node.name: client.served[edge.node.name]
            + after.get(edge.node.name, 0)
            - before.get(edge.node.name, 0)
            for edge in cluster.edges
        }
        mean = statistics.mean(load.values())
        hot_owner = owner_of(key_of("hot"), NODES4)
        counted = asks(cluster, ["hot", *cold])
        print(
            f"{args.requests} requests, half to one key (owned by {hot_owner}),"
            f" client errors {len(client.errors)}"
        )
        for node, value in sorted(load.items()):
            extra = value - client.served[node]
            print(f"  {node}: {value:.0f} ({value / mean:.2f} x mean; peers' requests {extra:.0f})")
        print(
            f"origin requests for the hot key {counted['hot']},"
            f" for the others {sum(counted.values()) - counted['hot']}"
        )
        print(await peer_figures(cluster))
    finally:
        await client.close()
        await cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=("reads", "kill", "join", "hot"))
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--peer-timeout", type=float, default=1.0)
    parser.add_argument("--no-peer-fill", dest="peer_fill", action="store_false")
    args = parser.parse_args()
    scenario = {"reads": reads, "kill": kill, "join": join, "hot": hot}[args.scenario]
    with tempfile.TemporaryDirectory(prefix="peer-fleet-") as directory:
        asyncio.run(scenario(args, Path(directory)))


if __name__ == "__main__":
    main()
