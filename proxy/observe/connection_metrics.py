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

# The length of ``ListenerFigures.figures()``, as edge processes report it (fleet/figures.py).
CONNECTION_FIGURES = 7


class ListenerFigures(Protocol):
    """A listener's connection figures: ``ConnectionGuard`` (proxy/edge/connections.py)."""

    @property
    def listener(self) -> str: ...

    def figures(self) -> list[int]:
        """open, limit, refused, header_timeouts, bad_requests, tunnels_open, tunnels."""
        ...


def connection_metrics(rows: Iterable[tuple[str, Sequence[int]]], prefix: str) -> Iterable[Metric]:
    """/metrics from (listener, ``ConnectionGuard.figures()``) rows."""
    rows = list(rows)
    families = (
        (GaugeMetricFamily, "connections_open", "Client connections open, by listener."),
        (GaugeMetricFamily, "connections_max", "The limit on open client connections."),
        (
            CounterMetricFamily,
            "connections_refused",
            "Client connections refused at the limit (503, or closed before a TLS handshake).",
        ),
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
        (GaugeMetricFamily, "tunnels_open", "Upgraded connections (tunnels) open, by listener."),
        (CounterMetricFamily, "tunnels", "Upgraded connections (tunnels) opened, by listener."),
    )
    for index, (kind, name, text) in enumerate(families):
        family = kind(prefix + name, text, labels=["listener"])
        for listener, figures in rows:
            # A report from an older process has fewer figures: the missing ones count 0.
            family.add_metric([listener], figures[index] if index < len(figures) else 0)
        yield family
