"""Client connections: how many a listener holds, how long one may take, and what is logged.

Each listener (the edge, the API) has a ``ConnectionGuard``: its limit on open connections,
its header timeout, its figures for /metrics, and the few log lines its troubles earn. The
aiohttp side (``GuardedServer`` in proxy/edge/aiohttp_server.py) asks it to admit each new
connection and reports timeouts and malformed requests to it.

Open files. Every client connection, origin connection and listening socket is a file
descriptor, and a process out of them can accept nothing, not even on the API listener. So:

- at start every process raises its soft ``RLIMIT_NOFILE`` to the hard limit
  (``raise_open_files_limit``), and logs the result once;
- the API listener may hold ``api_share(limit)`` connections, reserved: the edge's default
  ``max_connections`` leaves them free, with room for origin connections (at most one per
  edge connection in flight, and at most ``ORIGIN_CONNECTIONS`` in all) and for the
  process's own files (``OWN_FILES``: listeners, the state database, Valkey, pipes, logs).

A connection refused at the limit gets a 503 with ``Retry-After`` and is closed at once, so
it frees its descriptor (a TLS connection is admitted before its handshake, and closed
without a word at the limit: there is no TLS yet to answer over); one line is logged per
``LOG_EVERY`` seconds, however many there were, and each is counted. Malformed requests
(answered 400 by aiohttp) are logged the same way: one line per ``LOG_EVERY`` seconds saying
how many, never a traceback each.

One client address may hold at most ``per_client`` of a listener's connections (nginx's
``limit_conn``, decision 0032), counted per TCP peer address at accept, before a TLS
handshake, so that one address cannot take every connection; past it a connection is refused
as at the limit, and counted apart (``reason="per_client"``). Behind a load balancer every
connection has the balancer's address: raise the limit there, or turn it off (0).

A tunnel (an upgraded connection, decision 0022) stays one open connection for its whole
life, and holds one more file for its origin connection, outside the origin pool: when files
run out, opening it fails and the client gets a 502. The guard counts tunnels open and opened.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("proxy.connections")

LOG_EVERY = 10.0  # seconds between two lines about the same trouble
ORIGIN_CONNECTIONS = 1024  # the origin session's pool limit (proxy/edge/origin.py)
OWN_FILES = 64
API_CONNECTIONS = 256  # at most; fewer under a low open-files limit (api_share)
PER_CLIENT_DEFAULT = 1024  # at most: "auto" is a quarter of the listener's limit below 4,096

# The length of ``BodyFigures.figures()``: held, budget, over_budget, too_slow.
BODY_FIGURES = 4
# The length of ``AnswerBudget.figures()`` (proxy/edge/answer_budget.py): held, the budget
# per connection, the budget per client address, refused.
ANSWER_FIGURES = 4
# The length of ``OriginAsks.figures()`` (proxy/edge/origin_asks.py): requests the origin
# is asked for now, the cap per connection, the cap per client address, requests that waited.
ASK_FIGURES = 4
# The length of ``ClientStreams.figures()`` (proxy/edge/h2/client_streams.py): HTTP/2 streams
# open, the cap per client address, streams refused for it.
STREAM_FIGURES = 3


class BodyFigures(Protocol):
    """What request bodies being read hold in a process (``BodyBudget``, proxy/edge/bodies.py)."""

    def figures(self) -> list[int]: ...


class StreamFigures(BodyFigures, Protocol):
    """HTTP/2 streams per client (``ClientStreams``, proxy/edge/h2/client_streams.py)."""

    def close(self) -> None: ...


def raise_open_files_limit() -> int:
    """Raise this process's soft open-files limit to its hard limit; log it; return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        log.info("open files limit: %s", "unlimited" if soft == resource.RLIM_INFINITY else soft)
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("open files limit stays at %d: cannot raise it to %d (%s)", soft, hard, exc)
        return soft
    log.info("open files limit raised from %d to %d (the hard limit)", soft, hard)
    return hard


def open_files_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def api_share(files: int) -> int:
    """Connections the API listener may hold, reserved out of ``files`` open files."""
    return max(8, min(API_CONNECTIONS, files // 8))


def per_client_share(configured: int | None, limit: int, workers: int = 1) -> int:
    """The connections one client address may hold in a process whose limit is ``limit``:
    its share of ``configured`` (per node, each of ``workers`` taking its share; 0: no
    limit), or, for "auto" (None), a quarter of the process's limit, at most 1,024."""
    if configured is None:
        return max(1, min(PER_CLIENT_DEFAULT, limit // 4))
    return -(-configured // workers)


def edge_share(files: int) -> int:
    """The edge's default max_connections in a process allowed ``files`` open files: what is
    left after the API's share and the process's own files, less one origin connection per
    client connection up to the origin pool's limit."""
    left = files - api_share(files) - OWN_FILES
    return max(1, left - ORIGIN_CONNECTIONS, left // 2)


class ThrottledLine:
    """At most one warning per ``every`` seconds about one kind of trouble: the first at
    once, the ones after it counted and summarised in one line when the quiet time ends."""

    def __init__(self, what: str, *, every: float = LOG_EVERY) -> None:
        self._what = what
        self._every = every
        self._count = 0
        self._latest = ""
        self._quiet_until = 0.0
        self._flush: asyncio.TimerHandle | None = None

    def note(self, detail: str) -> None:
        self._count += 1
        self._latest = detail
        if self._flush is not None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self._quiet_until:
            self._write()
        else:
            self._flush = loop.call_at(self._quiet_until, self._write)

    def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._write()

    def _write(self) -> None:
        self._flush = None
        if self._count:
            log.warning(
                "%s (%d since the last such line, at most one per %.0f s; latest: %s)",
                self._what,
                self._count,
                self._every,
                self._latest,
            )
        self._count = 0
        self._quiet_until = asyncio.get_running_loop().time() + self._every


class ConnectionGuard:
    """One listener's connections: admitted up to ``limit``, counted, and closed on demand."""

    def __init__(
        self,
        listener: str,
        *,
        limit: int,
        header_timeout: float,
        keepalive_timeout: float,
        per_client: int = 0,
    ) -> None:
        self.listener = listener
        self.limit = limit
        self.per_client = per_client  # connections one peer address may hold; 0: no limit
        self._by_client: dict[str, int] = {}  # peer address -> its connections open
        self.header_timeout = header_timeout
        self.keepalive_timeout = keepalive_timeout
        self.open = 0
        # Refused connections read from until they close (a lingering close), oldest first:
        # each one's close, by its key.
        self._lingering: dict[object, Callable[[], None]] = {}
        self.linger_max = max(16, limit // 16)
        self.refused = 0
        self.refused_per_client = 0
        self.header_timeouts = 0
        self.bad_requests = 0
        self.tunnels_open = 0
        self.tunnels = 0  # opened since the start
        # HTTP/2 (decision 0036): connections open and opened, streams taken, and connections
        # closed for breaking a rule or a limit (a GOAWAY with an error).
        self.http2_open = 0
        self.http2_connections = 0
        self.http2_streams = 0
        self.http2_goaways = 0
        self._none_open = asyncio.Event()
        self._none_open.set()
        self._refusals = ThrottledLine(
            f"{listener} connection limit ({limit}) reached: new connections refused with 503"
        )
        self._malformed = ThrottledLine(f"malformed requests on the {listener} listener (400)")
        self._client_refusals = ThrottledLine(
            f"{listener} per-client connection limit ({per_client}) reached: "
            "that address's new connections refused"
        )
        # What request bodies being read hold (proxy/edge/bodies.py), for the edge's figures.
        self.bodies: BodyFigures | None = None
        # Seconds an answer may wait on a client that takes too little of it (decision 0046:
        # GuardedRequestHandler's send timeout); the edge's listener sets edge.send_timeout.
        self.send_timeout = 60.0
        self.send_timeouts = 0  # answers cut for it, on either protocol (decision 0051)
        # What answers not yet sent hold per connection and client (decision 0051).
        self.answers: BodyFigures | None = None
        # Requests the origin is asked for at once per connection and client (decision 0057).
        self.asks: BodyFigures | None = None
        # HTTP/2 streams open per client address, over both listeners (decision 0060).
        self.streams: StreamFigures | None = None

    def admit(self, peer: str | None = None) -> bool:
        """Whether a new connection from ``peer`` (its address; None: unknown, as on a Unix
        socket) may open; if so, it counts until ``release(peer)``."""
        if self.open >= self.limit:
            self.refused += 1
            self._refusals.note(f"{self.open} open")
            return False
        if peer is not None and self.per_client:
            held = self._by_client.get(peer, 0)
            if held >= self.per_client:
                self.refused_per_client += 1
                self._client_refusals.note(f"{peer} holds {held}")
                return False
            self._by_client[peer] = held + 1
        self.open += 1
        self._none_open.clear()
        return True

    def held_by(self, peer: str) -> int:
        """Connections ``peer`` holds now."""
        return self._by_client.get(peer, 0)

    def linger(self, key: object, close: Callable[[], None]) -> None:
        """A refused connection lingers; past linger_max, the one lingering longest is closed
        (everything it sent has been read, so its close is clean)."""
        if len(self._lingering) >= self.linger_max:
            oldest = next(iter(self._lingering))
            self._lingering.pop(oldest)()
        self._lingering[key] = close

    def lingered(self, key: object) -> None:
        self._lingering.pop(key, None)

    def release(self, peer: str | None = None) -> None:
        if peer is not None and self.per_client:
            held = self._by_client.get(peer, 0)
            if held <= 1:
                self._by_client.pop(peer, None)  # only addresses with connections are kept
            else:
                self._by_client[peer] = held - 1
        self.open -= 1
        if not self.open:
            self._none_open.set()

    def tunnel_opened(self) -> None:
        self.tunnels_open += 1
        self.tunnels += 1

    def tunnel_closed(self) -> None:
        self.tunnels_open -= 1

    def header_timed_out(self) -> None:
        self.header_timeouts += 1

    def bad_request(self, remote: str | None, reason: str) -> None:
        self.bad_requests += 1
        # The parser's message quotes the bad bytes over several lines: one line, bounded.
        what = " ".join(reason.split())[:120] or "bad request"
        self._malformed.note(f"{what} from {remote}")

    def figures(self) -> list[int]:
        """open, limit, refused, header_timeouts, bad_requests, tunnels_open, tunnels,
        refused_per_client, per_client, the request bodies' (``BodyFigures.figures``), and
        HTTP/2's connections open and opened, streams and error GOAWAYs (decision 0036),
        answers cut by the send timeout and the answers' budget's figures (decision 0051),
        the origin's slots' (decision 0057), and HTTP/2 streams per client (decision 0060):
        as an edge process reports them to its node (proxy/fleet/figures.py), and as
        proxy/observe/connection_metrics.py reads them."""
        bodies = self.bodies.figures() if self.bodies is not None else [0] * BODY_FIGURES
        answers = self.answers.figures() if self.answers is not None else [0] * ANSWER_FIGURES
        asks = self.asks.figures() if self.asks is not None else [0] * ASK_FIGURES
        streams = self.streams.figures() if self.streams is not None else [0] * STREAM_FIGURES
        return [
            self.open,
            self.limit,
            self.refused,
            self.header_timeouts,
            self.bad_requests,
            self.tunnels_open,
            self.tunnels,
            self.refused_per_client,
            self.per_client,
            *bodies,
            self.http2_open,
            self.http2_connections,
            self.http2_streams,
            self.http2_goaways,
            self.send_timeouts,
            *answers,
            *asks,
            *streams,
        ]

    async def none_open(self) -> None:
        """Return once no admitted connection is open."""
        await self._none_open.wait()

    def close(self) -> None:
        """Write the lines still held back (at shutdown)."""
        self._refusals.close()
        self._malformed.close()
        self._client_refusals.close()
        if self.streams is not None:
            self.streams.close()
