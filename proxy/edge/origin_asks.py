"""Requests the origin is asked for at once, per connection and per client address (issue 32
§2, decision 0057).

The answers' budget (edge/answer_budget.py, decision 0051) charges an answer once its head
has come from the origin: a client that sends 128 requests on one HTTP/2 connection at once,
before any answer is charged, has the origin asked 128 times however little it reads. So a
request that would ask the origin (a miss, before it leads or joins a flight, or a forward)
first takes a *slot* of its connection (edge.origin_requests_per_connection) and of its
client address (edge.origin_requests_per_client, per node: each worker its share). Past
either, it waits, first come first served, for a slot of that connection or address to come
back; it costs the origin nothing while it waits, and a stream reset or a closed connection
ends its wait. A slot comes back when the origin's answer has been charged to the answers'
budget (a relayed answer: ``answered``) or when the request's handling ends, whichever is
first. So what a client that never reads makes the origin do is its answers' budget's worth
of answers plus its slots, not one per stream it opens.

Hits take no slot. A request that asks the origin twice (a miss sent on as a range)
takes one. A fleet peer's request proven by the peer key takes its connection's slot only,
none of its address's (``peer_mark.counted_client``, decision 0060). ``figures()`` is what
/metrics shows (proxy/observe/connection_metrics.py): the slots taken in this process, the
two caps, and the requests that waited.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import web

from proxy.edge.aiohttp_server import GuardedRequestHandler
from proxy.edge.h2.stream import StreamProtocol
from proxy.edge.peer_mark import counted_client

# The length of ``OriginAsks.figures()``: in flight, per connection, per client, waited.
ASK_FIGURES: Final = 4


class Slot:
    """One request's slot, given back once (``give_back``)."""

    __slots__ = ("_asks", "client", "connection")

    def __init__(self, asks: OriginAsks, connection: object, client: str | None) -> None:
        self._asks: OriginAsks | None = asks
        self.connection = connection
        self.client = client

    def give_back(self) -> None:
        asks, self._asks = self._asks, None
        if asks is not None:
            asks.give_back(self.connection, self.client)


class OriginAsks:
    """The slots each connection and client address of one listener hold, and who waits."""

    __slots__ = (
        "_by_client",
        "_by_connection",
        "_waiting",
        "in_flight",
        "per_client",
        "per_connection",
        "waited",
    )

    def __init__(self, *, per_connection: int, per_client: int) -> None:
        self.per_connection = per_connection  # 0: no limit
        self.per_client = per_client  # this process's share; 0: no limit
        self.in_flight = 0
        self.waited = 0
        self._by_connection: dict[object, int] = {}
        self._by_client: dict[object, int] = {}
        # Who waits for a slot, in arrival order: its connection, address, and future.
        self._waiting: deque[tuple[object, str | None, asyncio.Future[None]]] = deque()

    def fits(self, connection: object, client: str | None) -> bool:
        if self.per_connection and self._by_connection.get(connection, 0) >= self.per_connection:
            return False
        return not (
            self.per_client
            and client is not None
            and self._by_client.get(client, 0) >= self.per_client
        )

    def _take(self, connection: object, client: str | None) -> None:
        self._by_connection[connection] = self._by_connection.get(connection, 0) + 1
        if client is not None:
            self._by_client[client] = self._by_client.get(client, 0) + 1
        self.in_flight += 1

    async def take(self, connection: object, client: str | None) -> Slot:
        """A slot of ``connection`` and ``client``, once one is free (counted if it waits)."""
        if self.fits(connection, client):
            self._take(connection, client)
            return Slot(self, connection, client)
        self.waited += 1
        waiter = (connection, client, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        try:
            await waiter[2]
        except BaseException:
            if waiter[2].done() and not waiter[2].cancelled():
                self.give_back(connection, client)  # granted as it was cancelled
            else:
                self._waiting.remove(waiter)
            raise
        return Slot(self, connection, client)

    def give_back(self, connection: object, client: str | None) -> None:
        self.in_flight -= 1
        _less(self._by_connection, connection)
        if client is not None:
            _less(self._by_client, client)
        if self._waiting:
            self._grant()

    def _grant(self) -> None:
        """Slots to the waiters that fit now, oldest first (one held back by its own
        connection or address does not hold back the others)."""
        for waiter in list(self._waiting):
            connection, client, future = waiter
            if self.fits(connection, client):
                self._waiting.remove(waiter)
                self._take(connection, client)
                future.set_result(None)

    def figures(self) -> list[int]:
        return [self.in_flight, self.per_connection, self.per_client, self.waited]


# The request's slot, once it has taken one.
_SLOT: Final = web.RequestKey("origin_slot", Slot)


def _less(counts: dict[object, int], key: object) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _asks_of(request: web.BaseRequest) -> tuple[OriginAsks, object, str | None] | None:
    protocol = request.protocol
    if isinstance(protocol, GuardedRequestHandler):
        connection: object = protocol
    elif isinstance(protocol, StreamProtocol):
        connection = protocol.connection
    else:
        return None
    asks = protocol.guard.asks
    if not isinstance(asks, OriginAsks):
        return None
    return asks, connection, counted_client(protocol.peer_address)


@contextlib.asynccontextmanager
async def asking(request: web.BaseRequest) -> AsyncIterator[None]:
    """Hold a slot of the request's connection and client address while the origin is
    asked (waiting for one if need be), unless the request holds one already."""
    found = _asks_of(request)
    if found is None or _SLOT in request:
        yield
        return
    asks, connection, client = found
    slot = await asks.take(connection, client)
    request[_SLOT] = slot
    try:
        yield
    finally:
        slot.give_back()


def answered(request: web.BaseRequest) -> None:
    """The origin's answer to the request is charged to the answers' budget (or refused by
    it): its slot comes back now, not when the answer has been sent."""
    slot = request.get(_SLOT)
    if slot is not None:
        slot.give_back()
