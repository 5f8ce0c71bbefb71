"""Peer fills' added latency on loopback (issue 33, decision 0047): three edge nodes with
``[fleet] peer_fill = true`` (benchmarks/fleet_cluster.py), one GET at a time through the
first, timed for three kinds of fill:

- from the origin (a key the first node owns itself);
- from the owner, which holds the object (read through it first);
- from the owner, which fills it from the origin (two hops).

    PYTHONPATH=. python -m benchmarks.peer_fill_latency [--reads 300]

``PeerCluster``, ``fresh_page`` and ``read`` are shared with the tests
(tests/fleet/test_peer_nodes.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from benchmarks.fleet_cluster import Cluster, Edge
from proxy.core.peer import owner_of
from proxy.fleet.peers import live_peers
from proxy.fleet.scripts import FleetScripts
from proxy.fleet.settings import FleetSettings

D = "d0.test"
NODES = ("edge0", "edge1", "edge2")
_pages = itertools.count()


class PeerCluster(Cluster):
    """A Cluster whose nodes take peer fills. ``peer_timeout``: the default 0.3 s here; the
    tests give more, so that a loaded machine never turns a peer's answer into an origin
    fill they did not expect."""

    peer_timeout = 0.3

    def _common(self, fleet_url: str, node: str) -> str:
        common = super()._common(fleet_url, node)
        return common + f"peer_fill = true\npeer_timeout = {self.peer_timeout}\n"


def owner(page: str, nodes: tuple[str, ...] = NODES) -> str | None:
    """The owner of ``/D/page`` among ``nodes`` (the key: domain, then target)."""
    return owner_of(f"{D}\0/{D}/{page}".encode(), nodes)


def fresh_page(*, owned_by: str, nodes: tuple[str, ...] = NODES) -> str:
    """A page never read before whose owner among ``nodes`` is ``owned_by``."""
    while True:
        page = f"p{next(_pages)}"
        if owner(page, nodes) == owned_by:
            return page


async def read(edge: Edge, page: str, **headers: str) -> tuple[int, str, str]:
    """One GET: status, body, Cache-Status."""
    async with (
        aiohttp.ClientSession() as client,
        client.get(f"{edge.url}/{D}/{page}", headers={"Host": D, **headers}) as response,
    ):
        body = await response.text()
        return response.status, body, response.headers.get("Cache-Status", "")


async def peers_ready(
    cluster: Cluster, nodes: tuple[str, ...], edges: list[Edge], *, within: float = 30.0
) -> None:
    """Valkey lists ``nodes`` as the live peer nodes, and each of ``edges`` has had a fill
    from another node (its own list has been read since)."""
    url = f"redis://127.0.0.1:{cluster.valkey_port}/0"
    scripts = FleetScripts.of(FleetSettings(url=url, lease=0.6, renew=0.15, timeout=0.2))
    async with asyncio.timeout(within):
        try:
            while True:
                if set(live_peers(await scripts.members())) == set(nodes):
                    break
                await asyncio.sleep(0.05)
        finally:
            await scripts.aclose()
        for edge in edges:
            other = next(n for n in nodes if n != edge.node.name)
            while True:
                said = (await read(edge, fresh_page(owned_by=other, nodes=nodes)))[2]
                if f"peer={other}" in said:
                    break
                await asyncio.sleep(0.05)


async def measure(reads: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as directory:
        cluster = PeerCluster(Path(directory), domains=(D,), workers=(1, 1, 1))
        await cluster.start()
        try:
            await peers_ready(cluster, NODES, cluster.edges)
            first, owner_edge = cluster.edges[0], cluster.edges[1]
            times: dict[str, list[float]] = {"origin": [], "owner hit": [], "owner miss": []}
            async with aiohttp.ClientSession() as client:

                async def timed(edge: Edge, page: str, *, peer: bool) -> float:
                    started = time.perf_counter()
                    async with client.get(f"{edge.url}/{D}/{page}", headers={"Host": D}) as r:
                        await r.read()
                        said = r.headers.get("Cache-Status", "")
                    assert ("peer=" in said) == peer, said
                    return (time.perf_counter() - started) * 1000

                for _ in range(reads):
                    times["origin"].append(
                        await timed(first, fresh_page(owned_by="edge0"), peer=False)
                    )
                    warm = fresh_page(owned_by="edge1")
                    await timed(owner_edge, warm, peer=False)
                    times["owner hit"].append(await timed(first, warm, peer=True))
                    cold = fresh_page(owned_by="edge1")
                    times["owner miss"].append(await timed(first, cold, peer=True))
            return times
        finally:
            await cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    for name, values in asyncio.run(measure(args.reads)).items():
        values.sort()
        p99 = values[max(0, int(len(values) * 0.99) - 1)]
        print(f"{name:12s} p50 {statistics.median(values):7.2f} ms  p99 {p99:7.2f} ms")


if __name__ == "__main__":
    main()
