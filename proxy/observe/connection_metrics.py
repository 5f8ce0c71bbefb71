"""Client connections' figures as Prometheus metric families, at scrape time.

Each listener's ``ConnectionGuard`` (proxy/edge/connections.py) keeps its figures; a process
reports them to its node as a list (proxy/fleet/figures.py), and /metrics reads them here. The
guard lives on the edge, above this module: what is read of it is the ``ListenerFigures``
shape, so the metrics need not import the edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class ListenerFigures(Protocol):
    """A listener's connection figures: ``ConnectionGuard`` (proxy/edge/connections.py)."""

    @property
    def listener(self) -> str: ...

    def figures(self) -> list[int]:
        """open, limit, refused, header_timeouts, bad_requests, tunnels_open, tunnels,
        refused_per_client, per_client, the request bodies' four figures (held, budget,
        over_budget, too_slow), HTTP/2's four (connections open, connections opened,
        streams, error GOAWAYs), send timeouts, the answers' budget's four (held, per
        connection, per client, refused), the origin's slots' four (in flight, per
        connection, per client, waited), and HTTP/2 streams' three (open, the per-client
        cap, refused for it)."""
        ...


def connection_metrics(rows: Iterable[tuple[str, Sequence[int]]], prefix: str) -> Iterable[Metric]:
    """/metrics from (listener, ``ConnectionGuard.figures()``) rows."""
    rows = list(rows)

    def figure(figures: Sequence[int], index: int) -> int:
        # A report from an older process has fewer figures: the missing ones count 0.
        return figures[index] if index < len(figures) else 0

    refused = CounterMetricFamily(
        prefix + "connections_refused",
        "Client connections refused (503, or closed before a TLS handshake), by reason: the "
        "listener's limit, or the per-client-address limit.",
        labels=["listener", "reason"],
    )
    reasons = [(index, row) for index, row in enumerate(_FIGURES) if isinstance(row, str)]
    for listener, figures in rows:
        for index, reason in reasons:
            refused.add_metric([listener, reason], figure(figures, index))
    yield refused
    for index, row in enumerate(_FIGURES):
        if isinstance(row, str):
            continue  # connections_refused, above
        kind, name, text = row
        family = kind(prefix + name, text, labels=["listener"])
        for listener, figures in rows:
            family.add_metric([listener], figure(figures, index))
        yield family


# What each figure of ``ConnectionGuard.figures()`` counts: its metric family, by listener;
# or, for the two refusal counts, their reason label under connections_refused. Every
# family takes three lines (kind, name, help), short or long, so that the table reads as
# columns.
_Family = tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str]
_FIGURES: tuple[_Family | str, ...] = (
    # The guard's own: connections, tunnels, the per-client limit.
    (
        GaugeMetricFamily,
        "connections_open",
        "Client connections open, by listener.",
    ),
    (
        GaugeMetricFamily,
        "connections_max",
        "The limit on open client connections.",
    ),
    "limit",
    (
        CounterMetricFamily,
        "header_timeouts",
        "Connections closed because no whole request head came in time.",
    ),
    (
        CounterMetricFamily,
        "bad_requests",
        "Malformed requests answered 400 by the HTTP parser, by listener.",
    ),
    (
        GaugeMetricFamily,
        "tunnels_open",
        "Upgraded connections (tunnels) open, by listener.",
    ),
    (
        CounterMetricFamily,
        "tunnels",
        "Upgraded connections (tunnels) opened, by listener.",
    ),
    "per_client",
    (
        GaugeMetricFamily,
        "connections_per_client_max",
        "The limit on one client address's open connections (0: none), per process.",
    ),
    # The request bodies' (``BodyFigures.figures``, decision 0032).
    (
        GaugeMetricFamily,
        "request_buffer_bytes",
        "Bytes of request bodies held while they arrive, before the origin is asked.",
    ),
    (
        GaugeMetricFamily,
        "request_buffer_max_bytes",
        "The budget for request_buffer_bytes (edge.request_buffer_total_bytes).",
    ),
    (
        CounterMetricFamily,
        "request_bodies_over_budget",
        "Request bodies streamed to the origin because the buffer budget was spent.",
    ),
    (
        CounterMetricFamily,
        "request_bodies_too_slow",
        "Request bodies cut off (408) for arriving slower than edge.body_min_rate.",
    ),
    # HTTP/2's (decision 0036).
    (
        GaugeMetricFamily,
        "http2_connections_open",
        "HTTP/2 connections open, by listener.",
    ),
    (
        CounterMetricFamily,
        "http2_connections",
        "HTTP/2 connections opened, by listener.",
    ),
    (
        CounterMetricFamily,
        "http2_streams",
        "HTTP/2 requests (streams) taken, by listener; the rest of the requests are HTTP/1.x.",
    ),
    (
        CounterMetricFamily,
        "http2_goaways",
        "HTTP/2 connections closed with an error GOAWAY: a protocol error, or a limit crossed "
        "(Rapid Reset, floods, HPACK bombs).",
    ),
    # The send timeout's cuts and the answers' budget (decisions 0046 and 0051).
    (
        CounterMetricFamily,
        "send_timeouts",
        "Answers cut (HTTP/1.1 connection aborted, HTTP/2 stream reset) for sending too little "
        "in edge.send_timeout, by listener.",
    ),
    (
        GaugeMetricFamily,
        "answers_held_bytes",
        "Bytes charged to answers not yet sent (relayed: read ahead, or streaming), by listener.",
    ),
    (
        GaugeMetricFamily,
        "answers_held_connection_max_bytes",
        "The budget of answers not yet sent per connection (answers_held_per_connection_bytes).",
    ),
    (
        GaugeMetricFamily,
        "answers_held_client_max_bytes",
        "The budget of answers not yet sent per client address (answers_held_per_client_bytes).",
    ),
    (
        CounterMetricFamily,
        "answers_refused",
        "Answers refused 503 because their connection or client address held its budget.",
    ),
    # Requests the origin is asked for at once per connection and client (decision 0057).
    (
        GaugeMetricFamily,
        "origin_requests_in_flight",
        "Client requests (misses and forwards) the origin is asked for now, by listener.",
    ),
    (
        GaugeMetricFamily,
        "origin_requests_connection_max",
        "Requests one connection may have the origin asked for at once "
        "(origin_requests_per_connection).",
    ),
    (
        GaugeMetricFamily,
        "origin_requests_client_max",
        "Requests one client address may have the origin asked for at once "
        "(origin_requests_per_client).",
    ),
    (
        CounterMetricFamily,
        "origin_requests_waited",
        "Requests that waited before the origin was asked: their connection or client address "
        "had as many asked as its cap.",
    ),
    # HTTP/2 streams open at once per client address (decision 0060).
    (
        GaugeMetricFamily,
        "http2_streams_open",
        "HTTP/2 streams open (taken, not yet ended), by listener.",
    ),
    (
        GaugeMetricFamily,
        "http2_streams_client_max",
        "HTTP/2 streams one client address may have open at once over its connections "
        "(http2_streams_per_client; 0: none).",
    ),
    (
        CounterMetricFamily,
        "http2_streams_refused",
        "HTTP/2 streams refused (REFUSED_STREAM) because their client address had as many "
        "open as its cap.",
    ),
)

# The length of ``ListenerFigures.figures()``, as edge processes report it (fleet/figures.py).
CONNECTION_FIGURES = len(_FIGURES)
# The figures a node takes the largest of, not the sum, over its edge processes: a budget
# per connection is each process's whole one (a per-client one is each process's share).
NOT_SUMMED = frozenset(
    index
    for index, row in enumerate(_FIGURES)
    if not isinstance(row, str)
    and row[1] in ("answers_held_connection_max_bytes", "origin_requests_connection_max")
)


def merged(into: list[int], figures: Sequence[int]) -> None:
    """Add an edge process's ``figures`` to a node's (``into``)."""
    for index, value in enumerate(figures[:CONNECTION_FIGURES]):
        if index in NOT_SUMMED:
            into[index] = max(into[index], value)
        else:
            into[index] += value
