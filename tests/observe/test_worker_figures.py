"""The node's sums of its edge processes' reports (proxy/observe/worker_figures.py): tiers
and origin servers, with processes gone still counted in the counters but not in the
up/down and degraded views."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from proxy.core.http.balance import ServerState
from proxy.observe.origin_metrics import origin_server_metrics
from proxy.observe.worker_figures import merged_servers, node_tier_totals
from proxy.store.shared import TierStatus
from proxy.wire.reports import MemberInfo, ServerReport, TierReport

HEALTHY = TierStatus(degraded=None, stuck=False, faults=1, corrupt=0, dropped_fills=0)


def info(worker: int, *, node: str = "n1", hits: int = 0, **tier: object) -> MemberInfo:
    return MemberInfo(
        node=node,
        worker=worker,
        counts={"example.com": {"hit": hits, "miss": 3}},
        tier=TierReport(**tier),  # type: ignore[arg-type]
    )


def test_tier_figures_are_summed_over_the_nodes_processes_only() -> None:
    reports = [
        (info(0, hits=10, disk_hits=4, collapsed=1, dropped_fills=2, faults=2), True),
        (info(1, hits=5, disk_hits=1, collapsed=2, degraded="fill: disk full"), True),
        (info(0, node="n2", hits=100, disk_hits=50, degraded="elsewhere"), True),
    ]
    totals = node_tier_totals(reports, "n1")
    assert (totals.hits, totals.disk_hits, totals.memory_hits) == (15, 5, 10)
    assert (totals.collapsed, totals.faults, totals.dropped_fills) == (3, 2, 2)
    status = totals.status(HEALTHY)
    assert status.degraded == "worker 1: fill: disk full"
    assert (status.faults, status.dropped_fills, status.stuck) == (3, 2, False)


def test_a_gone_process_counts_but_does_not_say_degraded() -> None:
    totals = node_tier_totals([(info(0, disk_hits=7, degraded="x", stopped=True), False)])
    assert totals.disk_hits == 7
    assert totals.status(HEALTHY).degraded is None and not totals.stopped


def server(origin: str, *, up: bool, requests: int, errors: int = 0, ago: float | None = None):  # type: ignore[no-untyped-def]
    return ServerReport(
        domain="example.com",
        origin=origin,
        up=up,
        requests=requests,
        errors=errors,
        last_failure=None if ago is None else f"failed {ago}",
        last_failure_seconds_ago=ago,
        since_seconds=5.0 if up else 1.0,
    )


def test_servers_are_summed_and_up_only_while_every_live_process_sees_them_up() -> None:
    a, b = "http://a", "http://b"
    reports = [
        (
            MemberInfo(
                origins=[
                    server(a, up=True, requests=3),
                    server(b, up=False, requests=2, errors=2, ago=4.0),
                ]
            ),
            True,
        ),
        (
            MemberInfo(
                origins=[
                    server(a, up=True, requests=4),
                    server(b, up=True, requests=1, errors=1, ago=9.0),
                ]
            ),
            True,
        ),
        (MemberInfo(origins=[server(a, up=False, requests=10, errors=10, ago=0.5)]), False),
    ]
    rows = {row["origin"]: row for row in merged_servers(reports)}
    assert (rows[a]["requests"], rows[a]["errors"], rows[a]["up"]) == (17, 10, True)
    assert rows[a]["last_failure"] is None  # the gone process's failure is not a live view
    assert (rows[b]["requests"], rows[b]["errors"], rows[b]["up"]) == (3, 3, False)
    assert (rows[b]["up_in"], rows[b]["processes"]) == (1, 2)
    assert rows[b]["last_failure"] == "failed 4.0" and rows[b]["since_seconds"] == 1.0


class Rows:
    """A collector of origin rows, as a registry reads the edge's at scrape."""

    def __init__(self, rows: list[dict[str, object]]) -> None:
        self.rows = rows

    def collect(self) -> list[Metric]:
        return origin_server_metrics(self.rows, "cdn_proxy_")


def exposed(rows: list[dict[str, object]]) -> list[str]:
    registry = CollectorRegistry()
    registry.register(Rows(rows))
    return generate_latest(registry).decode().splitlines()


def test_a_node_and_a_one_process_edge_expose_origin_servers_alike() -> None:
    """The node's merged rows and an edge's own (``Upstreams.rows``, from core's server
    state) give the same lines for the same figures: names, help, labels and values."""
    a = ServerState("http://a", backup=False, since=0.0)
    a.requests, a.errors = 7, 2
    edge = exposed([{"domain": "example.com", **a.row(5.0)}])
    node = exposed(
        merged_servers(
            [
                (MemberInfo(origins=[server("http://a", up=True, requests=3, errors=2)]), True),
                (MemberInfo(origins=[server("http://a", up=True, requests=4)]), True),
            ]
        )
    )
    assert node == edge
    labels = 'domain="example.com",origin="http://a"'
    assert f"cdn_proxy_origin_server_requests_total{{{labels}}} 7.0" in edge
    assert f"cdn_proxy_origin_server_errors_total{{{labels}}} 2.0" in edge
    assert f"cdn_proxy_origin_server_up{{{labels}}} 1.0" in edge
