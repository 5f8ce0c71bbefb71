"""Peer fills' figures as Prometheus metric families (decision 0047), in a node's control
process: each edge process reports the requests it sent to each owner node and their
failures (proxy/wire/reports.py ``peer_requests``, ``peer_errors``); they are summed here by
asking node and peer.

- ``peer_requests_total{node, peer}``: misses this node sent to the key's owner ``peer``;
- ``peer_errors_total{node, peer, kind}``: those whose answer was not used: the owner
  could not be reached (``unreachable``), gave no head within ``peer_timeout``
  (``timeout``), broke its answer (``protocol``), or answered without a usable purge label
  (``label``). Each went to the origin instead.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, Metric

from proxy.wire.reports import MemberInfo


class PeerCounts(Protocol):
    """An edge process's own counts (proxy/edge/peer_fill.py ``PeerFills``)."""

    @property
    def requests(self) -> collections.Counter[str]: ...

    @property
    def errors(self) -> collections.Counter[tuple[str, str]]: ...


def peer_metrics(reports: Iterable[tuple[MemberInfo, bool]], prefix: str) -> list[Metric]:
    """The families, summed over the edge processes of each node (dead ones included, so
    that a counter does not go back while their reports are listed)."""
    requests: collections.Counter[tuple[str, str]] = collections.Counter()
    errors: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for info, _live in reports:
        for peer, count in info.peer_requests.items():
            requests[info.node, peer] += count
        for peer, kinds in info.peer_errors.items():
            for kind, count in kinds.items():
                errors[info.node, peer, kind] += count
    if not requests:
        return []  # a fleet without peer fills lists none
    sent = CounterMetricFamily(
        prefix + "peer_requests",
        "Misses sent to the key's owner node (peer fills).",
        labels=["node", "peer"],
    )
    for (node, peer), count in sorted(requests.items()):
        sent.add_metric([node, peer], count)
    failed = CounterMetricFamily(
        prefix + "peer_errors",
        "Peer fills whose answer was not used (then the origin was asked), by kind.",
        labels=["node", "peer", "kind"],
    )
    for (node, peer, kind), count in sorted(errors.items()):
        failed.add_metric([node, peer, kind], count)
    return [sent, failed]


class PeerCollector:
    """The families, read when /metrics is scraped."""

    def __init__(self, reports: Callable[[], list[tuple[MemberInfo, bool]]], prefix: str) -> None:
        self._reports = reports
        self._prefix = prefix

    def collect(self) -> Iterable[Metric]:
        return peer_metrics(self._reports(), self._prefix)
