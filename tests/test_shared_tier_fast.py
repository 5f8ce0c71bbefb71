"""Hits from the node's shared tier through the edge's fast path (issue 23, decision 0030 "Tier
numbers", edge/disk_hits.py): a URL the worker's memory tier does not hold is read from the
shared tier and written below aiohttp as a memory hit is, judged against the purges as the
full path judges it, labelled by this edge (its current Via, ``detail="disk"``), then kept
in the memory tier.

Two edges over one shared tier stand for two workers of a node (one process opens a
directory once); each answers on a real listener, spoken to over raw sockets, as
tests/edge/test_fast_path.py does. A restart with a new ``edge.via`` is a real process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import RawTestServer

from proxy.core.purge.purges import Purge
from proxy.edge import respond
from proxy.edge.handler import Edge
from proxy.edge.origin import new_session
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.tiered import TieredStore
from tests.conftest import Origin, make_config
from tests.edge.test_fast_path import Reply, read_reply
from tests.nodes import Node, write_config

DISK_HIT = 'cdn-proxy; hit; detail="disk"'
BODY = bytes(range(256)) * 4  # 1 KiB
CACHEABLE = {"Cache-Control": "max-age=600", "Content-Type": "text/css", "Surrogate-Key": "t"}


@dataclass
class Worker:
    """One edge of the node on a listener of its own, recording which kind of response
    object answered each request."""

    edge: Edge
    store: TieredStore
    port: int
    kinds: list[type[web.StreamResponse]]

    async def get(self, path: str, *extra: str) -> Reply:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            async with asyncio.timeout(10):
                lines = [f"GET {path} HTTP/1.1", "Host: example.com", *extra, "", ""]
                writer.write("\r\n".join(lines).encode())
                await writer.drain()
                return await read_reply(reader)
        finally:
            writer.close()
            await writer.wait_closed()


WorkerFactory = Callable[..., Awaitable[Worker]]


@pytest.fixture
async def worker(
    tmp_path: Path, origin: Origin, aiohttp_raw_server: Callable[..., Awaitable[RawTestServer]]
) -> AsyncIterator[WorkerFactory]:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    made: list[tuple[Edge, aiohttp.ClientSession]] = []

    async def make(
        *, memory_bytes: int = 16 << 20, via: str = "cdn-proxy", **tables: object
    ) -> Worker:
        edge_table = {"listen": "127.0.0.1:0", "shutdown_timeout": 5, "via": via}
        config = make_config(tmp_path, origin.url, edge=edge_table, **tables)
        store = TieredStore(MemoryStore(max_bytes=memory_bytes), tier)
        session = new_session()
        edge = Edge(config=config, store=store, session=session)
        made.append((edge, session))
        kinds: list[type[web.StreamResponse]] = []

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            response = await edge.handle(request)
            kinds.append(type(response))
            return response

        server = await aiohttp_raw_server(handle)
        return Worker(edge=edge, store=store, port=server.port or 0, kinds=kinds)

    yield make
    for edge, session in made:
        await edge.close()
        await session.close()
    tier.close()


async def test_a_disk_hit_takes_the_fast_path_and_sends_what_the_full_path_sends(
    worker: WorkerFactory, origin: Origin
) -> None:
    origin.reply("/a", BODY, headers=CACHEABLE)
    filler = await worker()
    assert (await filler.get("/a")).body == BODY  # the miss: stored in both tiers
    # A worker whose memory tier keeps objects up to 512 bytes: every hit is read from disk.
    reader = await worker(memory_bytes=4096)
    fast = await reader.get("/a")
    again = await reader.get("/a")
    # Request Cache-Control keeps a request off the fast path, to the full path's lookup.
    full = await reader.get("/a", "Cache-Control: max-age=3600")
    assert reader.kinds == [respond.Hit, respond.Hit, web.Response]
    assert fast.field("Cache-Status") == again.field("Cache-Status") == DISK_HIT
    assert fast.status_line == full.status_line == "HTTP/1.1 200 OK"
    assert fast.without("Date", "Age") == full.without("Date", "Age")
    assert fast.body == again.body == full.body == BODY
    assert origin.count("/a") == 1
    assert reader.store.hits == {"memory": 0, "disk": 3}  # two fast, one full: all from disk
    assert reader.store.peek("example.com", "/a") is None  # too large for its memory tier


@pytest.mark.slow
async def test_a_disk_hit_that_fits_is_kept_in_memory_and_its_next_hit_is_a_memory_hit(
    worker: WorkerFactory, origin: Origin
) -> None:
    origin.reply("/a", BODY, headers=CACHEABLE)
    await (await worker()).get("/a")
    reader = await worker()
    first, second = await reader.get("/a"), await reader.get("/a")
    assert reader.kinds == [respond.Hit, respond.Hit]
    assert first.field("Cache-Status") == DISK_HIT
    assert second.field("Cache-Status") == "cdn-proxy; hit"
    assert first.body == second.body == BODY
    assert reader.store.hits["disk"] == 1 and origin.count("/a") == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "purge",
    [Purge("url", ("/a",)), Purge("prefix", ("/",)), Purge("tag", ("t",)), Purge("all", ())],
    ids=lambda purge: purge.kind,
)
async def test_a_purge_by_another_worker_is_never_served_from_disk(
    worker: WorkerFactory, origin: Origin, purge: Purge
) -> None:
    origin.reply("/a", BODY, headers=CACHEABLE)
    origin.reply("/b", BODY, headers={**CACHEABLE, "Surrogate-Key": "other"})
    filler = await worker()
    await filler.get("/a")
    await filler.get("/b")
    reader = await worker(memory_bytes=4096)
    assert (await reader.get("/a")).field("Cache-Status") == DISK_HIT
    # The filling worker purges (its API's store): durable in the shared tier before it
    # returns; the reader's memory tier never held the object, so only the tier says so.
    if purge.kind == "all":
        await filler.store.clear_domain("example.com")
    else:
        await filler.store.purge("example.com", purge)
    after = await reader.get("/a")
    assert after.field("Cache-Status") == "cdn-proxy; fwd=uri-miss; stored"
    assert after.body == BODY and origin.count("/a") == 2
    other = await reader.get("/b")  # covered or not as the purge says, from disk either way
    covered = purge.kind in ("prefix", "all")
    assert origin.count("/b") == (2 if covered else 1)
    assert other.field("Cache-Status") == (
        "cdn-proxy; fwd=uri-miss; stored" if covered else DISK_HIT
    )


async def test_a_soft_purge_makes_the_disk_copy_stale_for_the_fast_path(
    worker: WorkerFactory, origin: Origin
) -> None:
    origin.reply("/a", BODY, headers={**CACHEABLE, "ETag": '"v1"'})
    filler = await worker()
    await filler.get("/a")
    await filler.store.purge("example.com", Purge("url", ("/a",), soft=True))
    reader = await worker(memory_bytes=4096)
    after = await reader.get("/a")
    assert reader.kinds == [web.Response]  # the full path: revalidated with the origin
    assert after.field("Cache-Status") == "cdn-proxy; fwd=stale; stored"
    assert origin.count("/a") == 2 and after.body == BODY


async def test_hits_read_from_disk_carry_this_edges_via_not_the_fills(
    worker: WorkerFactory, origin: Origin
) -> None:
    origin.reply("/a", BODY, headers=CACHEABLE)
    filler = await worker(via="old-via")
    assert (await filler.get("/a")).field("Via") == "1.1 old-via"
    reader = await worker(via="new-via")
    first, second = await reader.get("/a"), await reader.get("/a")
    assert reader.kinds == [respond.Hit, respond.Hit]  # from disk, then its memory copy
    assert first.field("Via") == second.field("Via") == "1.1 new-via"
    assert (first.field("Cache-Status"), second.field("Cache-Status")) == (
        DISK_HIT,
        "cdn-proxy; hit",
    )
    slow = await worker(via="new-via", memory_bytes=4096)  # the full path's disk hit, too
    full = await slow.get("/a", "Cache-Control: max-age=3600")
    assert slow.kinds == [web.Response] and full.field("Via") == "1.1 new-via"


async def test_a_rules_detail_is_said_as_the_full_path_says_it(
    worker: WorkerFactory, origin: Origin
) -> None:
    origin.reply("/o/a", BODY, headers=CACHEABLE)
    domain = {
        "name": "example.com",
        "origin": origin.url,
        "rules": [{"name": "objects", "paths": ["/o/*"], "edge_ttl": "1h"}],
    }
    filler = await worker(domains=[domain])
    await filler.get("/o/a")
    reader = await worker(memory_bytes=4096, domains=[domain])
    fast = await reader.get("/o/a")
    full = await reader.get("/o/a", "Cache-Control: max-age=3600")
    assert reader.kinds == [respond.Hit, web.Response]
    assert fast.field("Cache-Status") == full.field("Cache-Status")
    assert fast.field("Cache-Status") == 'cdn-proxy; hit; detail="disk; rules=objects"'


@pytest.mark.slow
async def test_a_restart_with_a_new_via_never_serves_the_old_line_from_disk(
    tmp_path: Path, origin: Origin
) -> None:
    """A real process, stopped and started again with ``edge.via`` changed: its first hit is
    read from the shared tier (the memory tier died with the process), its second from the
    memory tier's copy, both with the new Via, over one keep-alive connection (fast path)."""
    origin.reply("/a", BODY, headers=CACHEABLE)
    cache = f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "64MiB"'
    node = await Node.start(write_config(tmp_path, origin.url, edge='via = "old-via"', cache=cache))
    try:
        async with (
            aiohttp.ClientSession() as client,
            client.get(node.edge + "/a", headers={"Host": "example.com"}) as response,
        ):
            assert response.headers["Via"] == "1.1 old-via" and await response.read() == BODY
    finally:
        node.process.terminate()
        assert await node.process.wait() == 0
    node = await Node.start(write_config(tmp_path, origin.url, edge='via = "new-via"', cache=cache))
    try:
        seen = []
        async with aiohttp.ClientSession() as client:
            for _ in range(2):
                async with client.get(
                    node.edge + "/a", headers={"Host": "example.com"}
                ) as response:
                    assert await response.read() == BODY
                    seen.append((response.headers["Via"], response.headers["Cache-Status"]))
        assert seen == [("1.1 new-via", DISK_HIT), ("1.1 new-via", "cdn-proxy; hit")]
        assert origin.count("/a") == 1
    finally:
        await node.kill()
