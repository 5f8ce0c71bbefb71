"""The origin servers' states as Prometheus metric families, at scrape time.

One function for both places that have them, so the two give the same names, labels and
help: a one-process edge reads its own ``Upstreams.rows`` (proxy/edge/upstreams.py), a
node's control process the rows its edge processes reported, merged
(proxy/observe/worker_figures.py ``merged_servers``):

- ``origin_server_up{domain, origin}``: 1 while the server is up (on a node, while every live
  edge process sees it up);
- ``origin_server_requests_total``, ``origin_server_errors_total`` (same labels): requests
  sent to it and those that failed (on a node, summed over its edge processes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


def origin_server_metrics(rows: Iterable[Mapping[str, object]], prefix: str) -> list[Metric]:
    """The samples of ``rows``, each an origin server as ``Upstreams.rows`` gives it."""
    labels = ["domain", "origin"]
    up = GaugeMetricFamily(
        prefix + "origin_server_up",
        "1 while the origin server is up (on a node: in every live edge process).",
        labels=labels,
    )
    requests = CounterMetricFamily(
        prefix + "origin_server_requests",
        "Requests sent to the origin server (on a node: summed over its edge processes).",
        labels=labels,
    )
    errors = CounterMetricFamily(
        prefix + "origin_server_errors",
        "Requests to the origin server that failed (connection, timeout, broken answer; on a "
        "node: summed over its edge processes).",
        labels=labels,
    )
    for row in rows:
        names = [str(row["domain"]), str(row["origin"])]
        up.add_metric(names, 1.0 if row["up"] else 0.0)
        requests.add_metric(names, _count(row["requests"]))
        errors.add_metric(names, _count(row["errors"]))
    return [up, requests, errors]


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0
