"""Answers not yet sent: what one connection, and one client address, may hold of them
(issue 32 §2, decision 0051).

A relayed answer (edge/forward.py ``relay``) reads ahead at most edge.answer_buffer_bytes
and then streams at its client's pace, within send_timeout (decision 0046). That bounds one
answer, not a connection: an HTTP/2 connection carries up to 128 streams, each holding about
1 MiB for a client that opens no window, and one address may hold many connections. So each
answer the relay sends is charged, before its first byte goes out, against its connection's
budget (edge.answers_held_per_connection_bytes) and its client address's
(edge.answers_held_per_client_bytes, per node: each worker its share), on both protocols:

- an answer read whole within the read-ahead is charged its length;
- a streamed one is charged the read-ahead plus ``STREAM_HELD``, what the origin client's
  reader and the client socket's buffer hold besides it (measured in decision 0046: 0.9 MiB
  an HTTP/2 stream, 1.7 MiB an HTTP/1.1 answer at most);

until it is sent in full or given up. An answer that does not fit is answered 503 with
Retry-After before anything is sent (its origin response closed, its read-ahead dropped),
and counted (``refused``). After such a refusal the connection, or the client address,
whose budget it passed is *blocked* until one of its answers is sent or given up: its next
requests that would ask the origin are refused 503 before they do (``blocked``), so a
client that does not read cannot make the origin work for answers it will never get. Only
a key that holds something is blocked, so an answer ending always unblocks it. A
connection's figures live in a dict keyed by the connection's protocol object (the HTTP/1.1
handler, or the HTTP/2 connection), a client's by its address; both drop their key at
zero, so they are only as large as what is held. A fleet peer's request proven by the peer
key is charged to its connection only, not its address (``peer_mark.counted_client``,
decision 0060).

``figures()`` is what /metrics shows (proxy/observe/connection_metrics.py): the bytes held
in this process, the two budgets, and the refusals.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.edge.aiohttp_server import GuardedRequestHandler
from proxy.edge.h2.stream import StreamProtocol
from proxy.edge.peer_mark import counted_client

STREAM_HELD = 1 << 20  # beside the read-ahead, a streamed answer's sockets' buffers

# The length of ``AnswerBudget.figures()``: held, per_connection, per_client, refused.
ANSWER_FIGURES = 4


class Held:
    """One answer's charge, given back once (``give_back``), whatever happens to it."""

    __slots__ = ("_budget", "client", "connection", "size")

    def __init__(self, budget: AnswerBudget, connection: object, client: str | None) -> None:
        self._budget = budget
        self.connection = connection
        self.client = client
        self.size = 0

    def grow(self, size: int) -> bool:
        """Charge ``size`` bytes more; False (counted, nothing charged) if that does not fit."""
        if not self._budget.take(self.connection, self.client, size):
            return False
        self.size += size
        return True

    def blocked(self) -> bool:
        return self._budget.blocked(self.connection, self.client)

    def give_back(self) -> None:
        size, self.size = self.size, 0
        if size:
            self._budget.give_back(self.connection, self.client, size)


class AnswerBudget:
    """What the answers of each connection and client address of one listener hold."""

    __slots__ = (
        "_blocked",
        "_by_client",
        "_by_connection",
        "held",
        "per_client",
        "per_connection",
        "refused",
    )

    def __init__(self, *, per_connection: int, per_client: int) -> None:
        self.per_connection = per_connection  # 0: no limit
        self.per_client = per_client  # this process's share; 0: no limit
        self.held = 0
        self.refused = 0
        self._by_connection: dict[object, int] = {}
        self._by_client: dict[object, int] = {}
        # Connections and client addresses refused since one of their answers last ended.
        self._blocked: set[object] = set()

    def take(self, connection: object, client: str | None, size: int) -> bool:
        """Charge ``size`` bytes to ``connection`` and ``client``; False (and counted) when
        either would pass its budget."""
        mine = self._by_connection.get(connection, 0) + size
        theirs = self._by_client.get(client, 0) + size if client is not None else 0
        over_connection = bool(self.per_connection) and mine > self.per_connection
        over_client = bool(self.per_client) and theirs > self.per_client
        if over_connection or over_client:
            self.refused += 1
            if over_connection and connection in self._by_connection:
                self._blocked.add(connection)
            if over_client and client in self._by_client:
                self._blocked.add(("client", client))
            return False
        self._by_connection[connection] = mine
        if client is not None:
            self._by_client[client] = theirs
        self.held += size
        return True

    def give_back(self, connection: object, client: str | None, size: int) -> None:
        self.held -= size
        _less(self._by_connection, connection, size)
        if self._blocked:
            self._blocked.discard(connection)
        if client is not None:
            _less(self._by_client, client, size)
            if self._blocked:
                self._blocked.discard(("client", client))

    def blocked(self, connection: object, client: str | None) -> bool:
        """True (and counted as a refusal) when an answer of ``connection`` or ``client``
        was refused and none of theirs has ended since: a request that would ask the origin
        is refused before it does."""
        if not self._blocked:
            return False
        if connection in self._blocked or (
            client is not None and ("client", client) in self._blocked
        ):
            self.refused += 1
            return True
        return False

    def figures(self) -> list[int]:
        return [self.held, self.per_connection, self.per_client, self.refused]


def _less(counts: dict[object, int], key: object, size: int) -> None:
    left = counts.get(key, 0) - size
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def charge(request: web.BaseRequest) -> Held | None:
    """An empty charge on the request's connection and client address, in its listener's
    budget, whatever its protocol; None where there is none (a server without a guard)."""
    protocol = request.protocol
    if isinstance(protocol, GuardedRequestHandler):
        connection: object = protocol
    elif isinstance(protocol, StreamProtocol):
        connection = protocol.connection
    else:
        return None
    budget = protocol.guard.answers
    if not isinstance(budget, AnswerBudget):
        return None
    return Held(budget, connection, counted_client(protocol.peer_address))


def blocked(request: web.BaseRequest) -> bool:
    """Whether the request's connection or client address is blocked (``AnswerBudget``):
    its answer would be refused, so the origin is not asked for it."""
    held = charge(request)
    return held is not None and held.blocked()


class HeldResponse(web.Response):
    """A relayed answer read whole: its charge is given back once it is sent, or failed to
    be (``prepare`` or ``write_eof`` raising), or dropped unsent."""

    def __init__(self, held: Held, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._held = held

    async def prepare(self, request: web.BaseRequest) -> Any:
        try:
            return await super().prepare(request)
        except BaseException:
            self._held.give_back()
            raise

    async def write_eof(self, data: bytes = b"") -> None:
        try:
            await super().write_eof(data)
        finally:
            self._held.give_back()

    def __del__(self) -> None:
        self._held.give_back()
