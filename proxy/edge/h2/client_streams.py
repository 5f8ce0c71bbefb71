"""HTTP/2 streams open at once per client address, over all its connections in a process
(issue 32 §1, decision 0060).

A connection may have ``http2_max_concurrent_streams`` (128) streams open, and one address
``max_connections_per_client`` connections (up to 1,024 a process): 131,072 streams, each
holding its state, its request and a handler task (0.9 MiB for 128 zero-window streams).
The answers' budget (decision 0051) and the origin's slots (decision 0057) bound what those
streams make the edge hold and ask, per client; this bounds the streams themselves.

A stream is counted from the moment the connection takes it (``H2Connection._request``,
before a task or a request is made for it) until the connection lets it go
(``_finished``), however it ends: answered, reset by either side, its connection lost or
gone away. Past the address's share (``edge.http2_streams_per_client``, per node: each
worker its share; 0: no limit) a new stream is refused with RST_STREAM REFUSED_STREAM (RFC
9113 §8.7: the client knows it was not processed, and may retry it), which spends the
connection's reset budget as a stream refused past the concurrent limit does. Refusals
are counted and logged at most once per ``LOG_EVERY`` seconds.

Behind a load balancer every client has the balancer's address, as for the connection
cap: raise the cap there, or turn it off (0).

``figures()`` is what /metrics shows (proxy/observe/connection_metrics.py): the streams
open in this process, the per-client cap, and the streams refused for it.
"""

from __future__ import annotations

from typing import Final

from proxy.edge.connections import ThrottledLine

# The length of ``ClientStreams.figures()``: open, per_client, refused.
STREAM_FIGURES: Final = 3


class ClientStreams:
    """The HTTP/2 streams each client address holds open in one process (every listener)."""

    __slots__ = ("_by_client", "_refusals", "open", "per_client", "refused")

    def __init__(self, *, per_client: int, listener: str = "edge") -> None:
        self.per_client = per_client  # this process's share; 0: no limit
        self.open = 0
        self.refused = 0
        self._by_client: dict[str, int] = {}  # only addresses with streams open are kept
        self._refusals = ThrottledLine(
            f"{listener} per-client HTTP/2 stream limit ({per_client}) reached: "
            "that address's new streams refused (REFUSED_STREAM)"
        )

    def admit(self, client: str | None) -> bool:
        """Whether a new stream of ``client`` (None: unknown, not counted per client) may
        open; if so it counts until ``release(client)``."""
        if client is not None:
            held = self._by_client.get(client, 0)
            if self.per_client and held >= self.per_client:
                self.refused += 1
                self._refusals.note(f"{client} holds {held}")
                return False
            self._by_client[client] = held + 1
        self.open += 1
        return True

    def release(self, client: str | None) -> None:
        self.open -= 1
        if client is not None:
            held = self._by_client.get(client, 0)
            if held <= 1:
                self._by_client.pop(client, None)
            else:
                self._by_client[client] = held - 1

    def held_by(self, client: str) -> int:
        return self._by_client.get(client, 0)

    def figures(self) -> list[int]:
        return [self.open, self.per_client, self.refused]

    def close(self) -> None:
        """Write the line still held back (at shutdown)."""
        self._refusals.close()
