"""The hit lane (issue 35, decision 0050): fresh, whole-object HTTP/1.1 hits answered from the
connection protocol's ``data_received``, before aiohttp makes a request, a task or a writer.

``GuardedRequestHandler`` (proxy/edge/aiohttp_server.py) reads each request head that comes
on a connection with ``proxy.core.http.lane.read_head`` while aiohttp's parser has been fed
only whole heads of that strict subset (its state is then known: between messages). When
aiohttp is idle (waiting for a request, none queued, its writer not paused), it asks
``HitLane.answer``; a head the lane does not answer is fed to aiohttp's parser as it came,
and so is everything after a head the lane cannot read (from then on, the connection is
aiohttp's alone). Pipelined requests keep their order: once aiohttp holds a request, the
ones behind it go to aiohttp too.

``answer`` is the handler's fast path (``Edge.lane_hit``) for a request that has no aiohttp
request: the TLS listener's Host-vs-SNI check first (a misdirected request is the full
path's, which answers 421), then the stored head with this edge's Via, Cache-Status and
Age, and the body, in one write (a HEAD: the head as the full path orders it, no body;
decision 0055). It is counted as a fast hit is (the domain's response
figures, the traffic counts, its access-log line).
"""

from __future__ import annotations

from time import perf_counter

from proxy.core.http.lane import LaneHead
from proxy.core.http.sni import misdirected
from proxy.core.observe.responses import record as record_response
from proxy.edge.access_log import EdgeAccess, LaneRequest, log_lane_hit
from proxy.edge.aiohttp_adapter import _STATUSES, JOINED_BODY_MAX, Prewritten, _status_of
from proxy.edge.handler import Edge
from proxy.edge.tls import EdgeTls


class HitLane:
    """One listener's lane: its edge, its access log and figures, and (on the TLS listener)
    the TLS contexts whose SNI a Host is checked against."""

    __slots__ = ("_access", "_edge", "_tls", "_tls_listener")

    def __init__(self, edge: Edge, access: EdgeAccess, *, tls: EdgeTls | None = None) -> None:
        self._edge = edge
        self._access = access
        self._tls = tls
        self._tls_listener = tls is not None

    def answer(
        self, transport: object, peer: str | None, head: LaneHead
    ) -> tuple[bytes, ...] | None:
        """The whole answer to ``head`` if the lane gives it (counted and logged here, to be
        written by the caller at once, with ``writelines``), else None: the full path
        answers. A large body is handed over as it is, not copied behind its head."""
        started = perf_counter()
        tls = self._tls
        if tls is not None and misdirected(tls.sni_of(transport), head.host):
            return None
        method, target, fields = head.method, head.target, head.fields
        hit = self._edge.lane_hit(
            method, target, fields, head.host, tls=self._tls_listener, peer=peer
        )
        if hit is None:
            return None
        parts, counts = hit
        body = parts[-1]
        if len(body) > JOINED_BODY_MAX:
            head_bytes = b"".join(parts[:-1])
            message: tuple[bytes, ...] = (head_bytes, body)
            size = len(head_bytes) + len(body)
        else:
            joined = b"".join(parts)
            message, size = (joined,), len(joined)
        status = _STATUSES.get(parts[0])
        if status is None:
            status = _status_of(parts[0])
        record_response(counts, status, size, perf_counter() - started)
        access = self._access
        if access.writer is not None:
            response = Prewritten(parts, None, started)  # what the log reads of a fast hit
            response._body_length = response.body_length = size
            log_lane_hit(access, LaneRequest(peer, method, target, fields), response)
        return message
