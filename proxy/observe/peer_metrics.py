"""Peer fills' figures as Prometheus metric families (decision 0047), in a node's control
process: each edge process reports the requests it sent to each owner node and their
failures (proxy/wire/reports.py ``peer_requests``, ``peer_errors``); they are summed here by
asking node and peer.

- ``peer_requests_total{node, peer}``: misses this node sent to the key's owner ``peer``;
- ``peer_errors_total{node, peer, kind}``: those whose answer was not used: the owner
  could not be reached (``unreachable``), gave no head within ``peer_timeout``
  (``timeout``), broke its answer (``protocol``), or answered without a usable purge label
  (``label``). Each went to the origin instead.
- ``origin_requests_avoided_total{node}``: the peer fills whose answer was used: each is an
  origin request this node did not make (without peer fills it would have);
- ``peer_answers_total{node}``, ``peer_answer_bytes_total{node}``: the owner's load, the
  peers' requests the node answered as the key's owner;
- ``served_bytes_total{node}``, ``origin_bytes_total{node}``: bytes sent to clients (as
  ``response_bytes_total`` counts them, heads included; answers to peers left out), and
  body bytes read from origin servers;
- ``origin_offload``: the fleet's share of the bytes served to clients that did not come
  from the origin, 1 - origin bytes / bytes served (Fastly's "origin offload": bytes
  served from any cache over bytes served); 1 when nothing was served.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.wire.reports import MemberInfo


class PeerCounts(Protocol):
    """An edge process's own counts (proxy/edge/peer_fill.py ``PeerFills``)."""

    @property
    def requests(self) -> collections.Counter[str]: ...

    @property
    def errors(self) -> collections.Counter[tuple[str, str]]: ...

    @property
    def answers(self) -> int: ...

    @property
    def answer_bytes(self) -> int: ...

    def origin_bytes(self) -> int: ...


def peer_metrics(reports: Iterable[tuple[MemberInfo, bool]], prefix: str) -> list[Metric]:
    """The families, summed over the edge processes of each node (dead ones included, so
    that a counter does not go back while their reports are listed)."""
    requests: collections.Counter[tuple[str, str]] = collections.Counter()
    errors: collections.Counter[tuple[str, str, str]] = collections.Counter()
    by_node: dict[str, collections.Counter[str]] = {}
    for info, _live in reports:
        if not info.peer_fill:
            continue
        for peer, count in info.peer_requests.items():
            requests[info.node, peer] += count
        for peer, kinds in info.peer_errors.items():
            for kind, count in kinds.items():
                errors[info.node, peer, kind] += count
        figures = by_node.setdefault(info.node, collections.Counter())
        figures["avoided"] += sum(info.peer_requests.values()) - sum(
            sum(kinds.values()) for kinds in info.peer_errors.values()
        )
        figures["answers"] += info.peer_answers
        figures["answer_bytes"] += info.peer_answer_bytes
        figures["served"] += info.served_bytes
        figures["origin"] += info.origin_bytes
    if not by_node:
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
    families: list[Metric] = [sent, failed]
    for key, name, text in _BY_NODE:
        family = CounterMetricFamily(prefix + name, text, labels=["node"])
        for node_name, counts in sorted(by_node.items()):
            family.add_metric([node_name], counts[key])
        families.append(family)
    served = sum(counts["served"] for counts in by_node.values())
    origin = sum(counts["origin"] for counts in by_node.values())
    families.append(
        GaugeMetricFamily(
            prefix + "origin_offload",
            "The share of bytes served to clients that did not come from the origin "
            "(1 - origin bytes / bytes served), over the fleet's nodes.",
            value=origin_offload(served, origin),
        )
    )
    return families


_BY_NODE = (
    (
        "avoided",
        "origin_requests_avoided",
        "Peer fills whose answer was used: origin requests avoided.",
    ),
    ("answers", "peer_answers", "Peers' requests this node answered as the key's owner."),
    (
        "answer_bytes",
        "peer_answer_bytes",
        "Bytes of the answers to peers' requests (their bodies; heads too once streamed).",
    ),
    (
        "served",
        "served_bytes",
        "Bytes sent to clients, heads included (answers to peers left out).",
    ),
    ("origin", "origin_bytes", "Body bytes read from origin servers."),
)


def origin_offload(served: int, origin: int) -> float:
    """1 - origin / served, within [0, 1] (1 when nothing was served)."""
    if served <= 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - origin / served))


class PeerCollector:
    """The families, read when /metrics is scraped."""

    def __init__(self, reports: Callable[[], list[tuple[MemberInfo, bool]]], prefix: str) -> None:
        self._reports = reports
        self._prefix = prefix

    def collect(self) -> Iterable[Metric]:
        return peer_metrics(self._reports(), self._prefix)
