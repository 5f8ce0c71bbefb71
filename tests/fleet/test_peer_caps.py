"""Fleet peers' requests and the per-client caps (issue 32, decision 0060), on real
processes: two ``cdn-proxy serve`` edge nodes with ``[fleet] peer_fill = true`` and
``origin_requests_per_client = 2``, one Valkey, a control plane and an origin whose
answers a test can hold (benchmarks/fleet_cluster.py).

Every process here is on 127.0.0.1: the asking node's peer requests come from the same
address as the test's own client, as behind one NAT address or on one host.

- a peer's request, proven by the fleet's peer key, is not held back by a client of its
  address that holds that address's slots for the origin: the owner answers it as owner;
- a request that names the fleet in CDN-Loop without the key is a client's: it waits for
  its address's slots like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from benchmarks.peer_fill_latency import D, PeerCluster, fresh_page, read
from tests.fleet.test_peer_nodes import origin_asks, peers_ready
from tests.polling import until

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

NODES = ("edge0", "edge1")
SLOTS = 2  # origin_requests_per_client, on each node of one worker


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PeerCluster]:
    cluster = PeerCluster(tmp_path_factory.mktemp("caps"), domains=(D,), workers=(1, 1))
    cluster.peer_timeout = 3.0  # a loaded machine is slow to answer: not what is tested
    cluster.edge_extra = f"origin_requests_per_client = {SLOTS}\n"
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.close()


async def waited(cluster: PeerCluster) -> float:
    """The nodes' requests that waited for an origin slot, from the control plane's
    /metrics (each node reports its figures at each renewal)."""
    async with (
        aiohttp.ClientSession() as client,
        client.get(f"{cluster.api_url}/metrics") as response,
    ):
        text = await response.text()
    for line in text.splitlines():
        if line.startswith('cdn_proxy_origin_requests_waited_total{listener="edge"}'):
            return float(line.rpartition(" ")[2])
    return 0.0


async def hold_the_slots(cluster: PeerCluster) -> tuple[asyncio.Event, list[asyncio.Task[object]]]:
    """The owner's (edge1's) two slots for 127.0.0.1 taken by a client's misses of pages it
    owns, held at the origin until the returned event is set."""
    owner = cluster.edges[1]
    go = asyncio.Event()
    pages = [fresh_page(owned_by="edge1", nodes=NODES) for _ in range(SLOTS)]
    for page in pages:
        cluster.origin.held[f"{D}/{page}"] = go
    readers: list[asyncio.Task[object]] = [asyncio.create_task(read(owner, page)) for page in pages]
    await until(lambda: all(origin_asks(cluster, page) == 1 for page in pages), every=0.05)
    return go, readers


async def test_a_peers_request_is_not_held_back_by_a_client_of_its_address(
    cluster: PeerCluster,
) -> None:
    """Before: the peer's request waited at the owner for a slot of 127.0.0.1 until the
    asking node's peer_timeout, which then asked the origin itself."""
    await peers_ready(cluster, NODES, cluster.edges)
    go, readers = await hold_the_slots(cluster)
    try:
        page = fresh_page(owned_by="edge1", nodes=NODES)
        status, body, cache = await asyncio.wait_for(read(cluster.edges[0], page), 10)
        assert status == 200 and body == str(cluster.origin.versions[D])
        assert 'detail="peer=edge1"' in cache, cache  # answered by its owner
        assert origin_asks(cluster, page) == 1
    finally:
        go.set()
        for status, _, _ in await asyncio.gather(*readers):  # type: ignore[misc]
            assert status == 200


async def test_a_forged_cdn_loop_still_waits_for_its_addresss_slots(
    cluster: PeerCluster,
) -> None:
    await peers_ready(cluster, NODES, cluster.edges)
    go, readers = await hold_the_slots(cluster)
    before = await waited(cluster)
    page = fresh_page(owned_by="edge1", nodes=NODES)
    forged = asyncio.create_task(read(cluster.edges[1], page, **{"CDN-Loop": "cdn-proxy"}))
    try:

        async def waiting() -> bool:
            return await waited(cluster) > before

        await until(waiting, within=10, every=0.1)
        assert origin_asks(cluster, page) == 0 and not forged.done()
    finally:
        go.set()
    status, _, _ = await asyncio.wait_for(forged, 10)
    assert status == 200 and origin_asks(cluster, page) == 1
    for status, _, _ in await asyncio.gather(*readers):  # type: ignore[misc]
        assert status == 200
