"""The edge and the store meet in one call per lookup: the store applies the domain's generation
itself, in the same step as it reads the entry, so a clear cannot land between the two.

A remote store (Valkey, for a fleet) answers every call after a round trip, and other
clients' clears run in those gaps. ``RoundTripStore`` puts such a gap before every call the
edge makes, and lets a test run a clear in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import RawTestServer

from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.purge.purges import Purge, PurgeResult
from proxy.edge.handler import Edge
from proxy.edge.origin import new_session
from proxy.fleet.store import FleetStore
from proxy.store.base import ClearResult, DomainStats, Lookup, StoreStats
from proxy.store.memory import MemoryStore
from tests.conftest import Origin, make_config


class RoundTripStore:
    """The memory store behind a round trip: each call the edge makes yields to the event
    loop before the store runs it, and ``gap[n]`` (if set) runs in the gap before the n-th
    call. ``peek`` answers None, as a store that cannot answer without I/O does."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.gap: dict[int, Callable[[], Awaitable[object]]] = {}

    async def _round_trip(self, name: str) -> None:
        self.calls.append(name)
        await asyncio.sleep(0)
        action = self.gap.pop(len(self.calls), None)
        if action is not None:
            await action()

    def peek(self, domain: str, target: str) -> StoredResponse | None:
        return None

    async def lookup(self, domain: str, target: str) -> Lookup:
        await self._round_trip("lookup")
        return await self.inner.lookup(domain, target)

    async def put(self, key: CacheKey, response: StoredResponse) -> bool:
        await self._round_trip("put")
        return await self.inner.put(key, response)

    async def invalidate(self, domain: str, target: str) -> int:
        await self._round_trip("invalidate")
        return await self.inner.invalidate(domain, target)

    def clear_now(self, domain: str) -> ClearResult:
        return self.inner.clear_now(domain)

    def purge_now(self, domain: str, purge: Purge) -> PurgeResult:
        return self.inner.purge_now(domain, purge)

    async def clear_domain(self, domain: str) -> ClearResult:
        return await self.inner.clear_domain(domain)

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        return await self.inner.purge(domain, purge)

    async def domain_stats(self, domain: str) -> DomainStats:
        return await self.inner.domain_stats(domain)

    async def stats(self) -> StoreStats:
        return await self.inner.stats()


Remote = tuple[RoundTripStore, Callable[[str], Awaitable[tuple[str, bytes]]]]


@pytest.fixture
async def remote(
    tmp_path: Path,
    origin: Origin,
    aiohttp_raw_server: Callable[..., Awaitable[RawTestServer]],
) -> AsyncIterator[Remote]:
    config = make_config(tmp_path, origin.url)
    store = RoundTripStore(MemoryStore(max_bytes=config.edge_role()[1].max_bytes))
    session = new_session()
    edge = Edge(config=config, store=store, session=session)
    server = await aiohttp_raw_server(edge.handle)
    client = aiohttp.ClientSession()

    async def get(path: str) -> tuple[str, bytes]:
        async with client.get(server.make_url(path), headers={"Host": "example.com"}) as answer:
            return answer.headers["Cache-Status"], await answer.read()

    yield store, get
    await client.close()
    await edge.close()
    await session.close()


async def test_an_edge_needs_no_local_store(remote: Remote, origin: Origin) -> None:
    """With a store that cannot peek, every request takes the full path, and hits still
    come from the store: one lookup per request, one put per fill."""
    store, get = remote
    origin.reply("/a", b"one", headers={"Cache-Control": "max-age=60"})
    assert await get("/a") == ("cdn-proxy; fwd=uri-miss; stored", b"one")
    assert await get("/a") == ("cdn-proxy; hit", b"one")
    assert store.calls == ["lookup", "put", "lookup"]
    assert origin.count("/a") == 1


async def test_a_clear_in_the_gap_before_a_lookup_is_honoured(
    remote: Remote, origin: Origin
) -> None:
    """A clear that the store runs before it reads the entry is in force for that read,
    wherever it falls among the edge's calls: the edge makes one call per lookup, and the
    generation is applied inside it (a generation read in one call and used in the next
    would find the old entry, not yet reclaimed)."""
    store, get = remote
    versions = iter((b"v1", b"v2"))
    origin.reply("/a", next(versions), headers={"Cache-Control": "max-age=60"})
    assert await get("/a") == ("cdn-proxy; fwd=uri-miss; stored", b"v1")
    calls_before = len(store.calls)
    origin.reply("/a", next(versions), headers={"Cache-Control": "max-age=60"})
    store.gap[calls_before + 1] = lambda: store.clear_domain("example.com")

    status, body = await get("/a")
    assert not store.gap  # the clear ran, in the gap before the lookup
    assert (status, body) == ("cdn-proxy; fwd=uri-miss; stored", b"v2")
    assert origin.count("/a") == 2


async def test_a_fill_that_began_before_a_clear_is_not_stored(
    remote: Remote, origin: Origin
) -> None:
    """The key a lookup returns carries the generation it saw: a put under it after a clear
    is refused, so the next request asks the origin again."""
    store, get = remote
    origin.reply("/a", b"v1", headers={"Cache-Control": "max-age=60"})
    store.gap[2] = lambda: store.clear_domain("example.com")  # between the lookup and the put
    status, body = await get("/a")
    assert (status, body) == ("cdn-proxy; fwd=uri-miss", b"v1")
    assert await get("/a") == ("cdn-proxy; fwd=uri-miss; stored", b"v1")
    assert origin.count("/a") == 2


class Lease:
    """What a FleetStore reads of its fleet member: the deadline of its lease, and the clock
    that deadline is measured by (here one the test sets)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.now = 0.0

    def clock(self) -> float:
        return self.now


@pytest.mark.slow
async def test_a_fenced_store_sends_every_request_to_the_origin_and_says_why(
    tmp_path: Path,
    origin: Origin,
    aiohttp_raw_server: Callable[..., Awaitable[RawTestServer]],
) -> None:
    """Decision 0014: past its lease an edge process serves nothing from its cache and
    stores nothing; the origin answers, with Cache-Status saying why."""
    config = make_config(tmp_path, origin.url)
    memory = MemoryStore(max_bytes=config.edge_role()[1].max_bytes)
    lease = Lease(deadline=100.0)
    session = new_session()
    edge = Edge(config=config, store=FleetStore(memory, lease), session=session)
    server = await aiohttp_raw_server(edge.handle)
    origin.reply("/a", b"one", headers={"Cache-Control": "max-age=60"})
    try:
        async with aiohttp.ClientSession() as client:

            async def get() -> tuple[str, bytes]:
                url = server.make_url("/a")
                async with client.get(url, headers={"Host": "example.com"}) as answer:
                    return answer.headers["Cache-Status"], await answer.read()

            assert await get() == ("cdn-proxy; fwd=uri-miss; stored", b"one")
            assert await get() == ("cdn-proxy; hit", b"one")
            lease.now = 100.0  # the member's clock reaches its deadline: the lease has run out
            fenced = ('cdn-proxy; fwd=bypass; detail="fenced"', b"one")
            assert [await get(), await get()] == [fenced, fenced]
            assert origin.count("/a") == 3
            assert len(memory.items()) == 1  # the entry from before, not served, not replaced
    finally:
        await edge.close()
        await session.close()
