"""Telemetry: what the edge, the origin client and the clear-cache API report, and /metrics.

One ``Telemetry`` per service, passed explicitly to the edge and kept in the API app under
``TELEMETRY``. It owns its own ``prometheus_client.CollectorRegistry``: nothing is registered
in prometheus-client's process-wide default registry, so two services in one process (as in
the tests) never share or clash over a metric.

The per-request hook (``request``) is on the hit path, so it only bumps plain ints in
``proxy.core.observe.traffic.Traffic``; a collector turns them into Prometheus samples when /metrics
is scraped. Origin requests and clears are rare beside the I/O they measure, so they use
prometheus-client's Histogram and Counter directly. Store gauges are read from the store at
scrape time (decision 0005).

Metrics (all prefixed ``cdn_proxy_``):

- ``requests_total{domain, cache_status}``: edge responses; cache_status is one of
  hit, miss, stale, bypass, error (see proxy/core/observe/traffic.py).
- ``origin_request_duration_seconds{domain}``: time to the origin's response headers, or to
  the failure when none came.
- ``origin_errors_total{domain, kind}``: kind is timeout, unreachable or protocol.
- ``origin_busy_total{domain, reason}``: requests answered 503 without asking the origin
  (decision 0015); reason is queue_timeout (no origin connection free within
  origin_queue_timeout), uploads (the domain's or client's share for streamed uploads
  was taken) or tunnels (the domain's max_tunnels, decision 0032).
- ``request_body_timeouts_total{domain}``: request bodies that stopped arriving for
  edge.body_timeout seconds (answered 408, or cut off on the way to the origin).
- ``clears_total{outcome}``, ``clear_duration_seconds``: every clear-cache attempt, with its
  audit outcome (cleared, unauthorized, forbidden, not_found, ...).
- ``purges_total{kind, outcome}``, ``purge_duration_seconds``: every purge attempt
  (POST /api/v1/cdn/purge and the dashboard's), by kind (url, prefix, tag, all; unknown
  when the body named none) and audit outcome (purged, dry_run, bad_request, ...).
- ``store_entries``, ``store_bytes``, ``store_max_bytes``, ``store_pending_reclaim_entries``,
  ``store_evictions_total``; and ``domain_entries{domain}``, ``domain_bytes{domain}``.
- ``purge_state_bytes``, ``purge_state_max_bytes``: what the store's purge state (purges
  remembered for fills in flight, outstanding bans and tags) costs, against its budget
  (cache.purge_state_max_bytes, decision 0037); ``purge_state_folded_total{fold}``: what
  folding it has done: ``forgotten`` (remembered purges), ``retired`` (outstanding
  prefixes and tags that covered nothing), ``cleared`` (domains whose outstanding purges
  were folded into a clear). With workers or a fleet, every edge process's summed.
- With ``cache.disk_path``: ``tier_hits_total{tier}`` and ``shared_tier_*``, among them
  ``shared_tier_collapsed_total`` (proxy/observe/store_metrics.py); with workers, summed from
  their reports (proxy/observe/worker_figures.py).
- ``origin_server_up``, ``origin_server_requests_total``, ``origin_server_errors_total``
  (each ``{domain, origin}``): the edge's (proxy/edge/upstreams.py); with workers, theirs
  merged (up while every live one sees the server up); both from
  proxy/observe/origin_metrics.py.
- ``worker_restarts_total{worker}``: edge worker processes the node started again.
- ``connections_open{listener}``, ``connections_max{listener}``,
  ``connections_refused_total{listener, reason}`` (limit, per_client),
  ``connections_per_client_max{listener}``, ``header_timeouts_total{listener}`` and
  ``bad_requests_total{listener}``: this process's client connections on the edge and API
  listeners (proxy/edge/connections.py); with workers, the edge's summed from their reports.
- ``tunnels_open{listener}``, ``tunnels_total{listener}``: upgraded connections (WebSocket and
  other tunnels, decision 0022) open now and opened since the start, counted the same way.
- ``request_buffer_bytes``, ``request_buffer_max_bytes``, ``request_bodies_over_budget_total``
  and ``request_bodies_too_slow_total`` (each with ``listener``): what request bodies being
  buffered hold against edge.request_buffer_total_bytes, the bodies streamed for want of it,
  and those cut off under edge.body_min_rate (decision 0032), counted the same way.
- ``hit_lane_answers_total``: hits the HTTP/1.1 hit lane answered (decision 0050; a plain
  count on the edge, read at scrape time); with workers, summed from their reports.
- ``send_timeouts_total``, ``answers_held_bytes``, ``answers_held_connection_max_bytes``,
  ``answers_held_client_max_bytes`` and ``answers_refused_total`` (each with ``listener``):
  answers cut by edge.send_timeout, and the budget of answers not yet sent per connection
  and per client address (decision 0051), counted the same way.
- ``fill_buffer_*`` and ``compress_*`` (proxy/edge/fill_budget.py), and with workers the
  origin counters above, summed from their reports (proxy/observe/worker_edge.py).
- With workers or a fleet (the control process serves no edge traffic itself), requests and
  store figures are those every edge process reports (proxy/fleet/figures.py), and:
  ``purge_ack_duration_seconds`` (from a clear to the last live edge process's
  acknowledgement), ``fleet_live_processes``, ``fleet_fenced_processes`` and
  ``fleet_lease_renew_failures_total``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from proxy.core.observe.responses import BUCKETS, Responses
from proxy.core.observe.traffic import (
    BYPASS,
    CLEARED,
    ERROR,
    HIT,
    MISS,
    OUTCOMES,
    STALE,
    DomainCounts,
    MinuteCounts,
    Traffic,
)
from proxy.core.purge.purges import KINDS as PURGE_KINDS
from proxy.errors import OriginError, OriginProtocolError, OriginTimeout, OriginUnreachable
from proxy.observe.connection_metrics import ListenerFigures, connection_metrics
from proxy.observe.origin_metrics import origin_server_metrics
from proxy.observe.peer_metrics import PeerCounts
from proxy.observe.response_metrics import response_metrics
from proxy.observe.store_metrics import StoreSnapshot, store_metrics, tier_metrics
from proxy.observe.worker_figures import OriginRows
from proxy.store.base import DomainStats, StoreStats
from proxy.store.shared import SharedStats

__all__ = [
    "METRICS_PATH",
    "TELEMETRY",
    "DomainCounts",
    "MinuteCounts",
    "Telemetry",
    "error_kind",
    "metrics",
]

METRICS_PATH = "/metrics"
PREFIX = "cdn_proxy_"

# The label values known in advance, each exported at zero from the start (issue 34): a
# counter with no sample reads as "no data" to rate() and to alerts, not as 0.
ORIGIN_ERROR_KINDS = ("timeout", "unreachable", "protocol")
BUSY_REASONS = ("queue_timeout", "uploads", "tunnels")
PURGE_OUTCOMES_AT_ZERO = ("purged", "dry_run")  # the others are errors, rare and many

# Origin answers take milliseconds to seconds (the response buckets from a millisecond up);
# clears take tens of microseconds in the store plus a SQLite round trip or two for the token
# and the audit record.
ORIGIN_BUCKETS = tuple(bound for bound in BUCKETS if bound >= 0.001)
CLEAR_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def error_kind(exc: OriginError) -> str:
    """The ``kind`` label of an origin error."""
    if isinstance(exc, OriginTimeout):
        return "timeout"
    if isinstance(exc, OriginUnreachable):
        return "unreachable"
    if isinstance(exc, OriginProtocolError):
        return "protocol"
    return "other"


class RemoteFigures(Protocol):
    """The figures of edge processes other than this one (a fleet: proxy/fleet/figures.py)."""

    def outcomes(self) -> Mapping[str, Mapping[str, int]]: ...

    def timeline(self, minutes: Sequence[MinuteCounts]) -> list[MinuteCounts]: ...

    def live_and_fenced(self) -> tuple[int, int]: ...

    @property
    def renew_failures(self) -> int: ...

    def connections(self) -> Mapping[str, Sequence[int]]:
        """Listener -> its ``ConnectionGuard.figures()`` summed over the edge processes."""
        ...

    def responses(self) -> Responses:
        """The edge processes' response figures, summed."""
        ...


class AnswerFigures(Protocol):
    """An edge's fill budget and compression queue (proxy/edge/fill_budget.py)."""

    def figures(self) -> list[int]: ...


class StoreFigures(Protocol):
    """What /metrics and the dashboard read of a store (or of a whole fleet's stores)."""

    async def stats(self) -> StoreStats: ...

    async def domain_stats(self, domain: str) -> DomainStats: ...


class TierFigures(Protocol):
    """What /metrics and /readyz read of the node's shared tier (proxy/store/tiered.py's
    TieredStore in a process that serves, the node's own hold on it in a node's control
    process). Its entries, bytes and evictions are the node's (one LMDB for all processes);
    its faults and disk hits are this process's."""

    def shared_stats(self) -> SharedStats: ...

    @property
    def disk_hits(self) -> int | None:
        """Hits served from the shared tier: this process's, or in a node's control process
        its edge processes' summed (proxy/observe/worker_figures.py)."""
        ...

    @property
    def collapsed(self) -> int:
        """Misses answered by another worker's fill, waited for on its marker."""
        ...


@runtime_checkable
class NodeHits(Protocol):
    """A node's control process's tier (process/node_figures.py ``NodeTier``): the node's hits
    answered by the memory tiers, from its edge processes' reports (the hits /metrics counts
    may be a whole fleet's)."""

    @property
    def memory_hits(self) -> int: ...


class Telemetry:
    def __init__(
        self,
        *,
        store: StoreFigures | None = None,
        domains: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
        remote: RemoteFigures | None = None,
    ) -> None:
        """``store`` and ``domains`` are read at scrape time; ``clock`` gives wall-clock
        seconds for the timeline; ``remote`` adds the edge processes of a fleet (the control
        plane of a node with workers, or of a fleet, serves no edge traffic itself)."""
        self.registry = CollectorRegistry()
        self._store = store
        self._remote = remote
        self._domains = tuple(domains)
        self._clock = clock
        self._traffic = Traffic()
        # ``request`` for a caller that has just read the clock (the hit path): Traffic's own
        # method, not a method calling it, which would be one more Python call per hit.
        self.request_at: Callable[[str, str, float], None] = self._traffic.record
        self._snapshot: StoreSnapshot | None = None
        # Responses by status class, bytes and time: recorded by the edge's access-log hook.
        self.responses = Responses()
        # The listeners of this process, each adding itself when it starts.
        self.connections: list[ListenerFigures] = []
        self.tier: TierFigures | None = None  # the shared tier, when cache.disk_path is set
        # Each origin server's state: this process's edge's (an edge worker, for its report),
        # or its edge processes' merged (a node's control process, for /metrics).
        self.origin_servers: OriginRows | None = None
        self.peer_fills: PeerCounts | None = None  # an edge worker's, with peer fills (0047)
        # The fill budget's and compression queue's figures (edge/fill_budget.py), for an
        # edge worker's report (decision 0051).
        self.answers: AnswerFigures | None = None
        self._register_origin_metrics()
        self._register_control_metrics()
        self._at_zero(self._domains)
        for kind in PURGE_KINDS:
            for outcome in PURGE_OUTCOMES_AT_ZERO:
                self._purges.labels(kind, outcome)
        self.registry.register(_ScrapeCollector(self))

    def _at_zero(self, domains: Iterable[str]) -> None:
        """Each domain's edge counters at zero, where this process serves the edge: with
        ``remote``, the edge processes count them, not this one."""
        if self._remote is not None:
            return
        for domain in domains:
            for kind in ORIGIN_ERROR_KINDS:
                self._origin_errors.labels(domain, kind)
            for reason in BUSY_REASONS:
                self._origin_busy.labels(domain, reason)
            self._body_timeouts.labels(domain)

    def _register_origin_metrics(self) -> None:
        """The edge's requests to its origins: their time, failures and refusals. A node's
        control process, which serves no edge traffic, shows its edge processes' counters
        instead (proxy/observe/worker_edge.py): its own are kept out of its registry."""
        counted = self.registry if self._remote is None else CollectorRegistry()
        self._origin_seconds = self._histogram(
            "origin_request_duration_seconds",
            "Time to the origin's response headers, or to the failure when none came.",
            ORIGIN_BUCKETS,
            ["domain"],
        )
        self._origin_errors = self._counter(
            "origin_errors",
            "Origin requests that failed, by kind: timeout, unreachable, protocol.",
            ["domain", "kind"],
            counted,
        )
        self._origin_busy = self._counter(
            "origin_busy",
            "Requests answered 503 without asking the origin: queue_timeout, uploads or tunnels.",
            ["domain", "reason"],
            counted,
        )
        self._body_timeouts = self._counter(
            "request_body_timeouts",
            "Request bodies that stopped arriving for edge.body_timeout seconds.",
            ["domain"],
            counted,
        )

    def _register_control_metrics(self) -> None:
        """The control plane's clears and purges, and the node's worker restarts."""
        self._clears = self._counter(
            "clears", "Clear-cache attempts, by audit outcome.", ["outcome"]
        )
        self._clear_seconds = self._histogram(
            "clear_duration_seconds",
            "Duration of clear-cache attempts, as written to the audit log.",
            CLEAR_BUCKETS,
        )
        self._purges = self._counter(
            "purges", "Purge attempts, by kind and audit outcome.", ["kind", "outcome"]
        )
        self._purge_seconds = self._histogram(
            "purge_duration_seconds",
            "Duration of purge attempts, as written to the audit log.",
            CLEAR_BUCKETS,
        )
        self._ack_seconds = self._histogram(
            "purge_ack_duration_seconds",
            "From a fleet clear to the last live edge process's acknowledgement.",
            CLEAR_BUCKETS,
        )
        self._worker_restarts = self._counter(
            "worker_restarts",
            "Edge worker processes started again after they exited, by worker index.",
            ["worker"],
        )

    # The rare events' instruments, in this Telemetry's own registry (never the default one).

    def _counter(
        self,
        name: str,
        text: str,
        labels: Sequence[str] = (),
        registry: CollectorRegistry | None = None,
    ) -> Counter:
        return Counter(PREFIX + name, text, labels, registry=registry or self.registry)

    def _histogram(
        self, name: str, text: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> Histogram:
        return Histogram(PREFIX + name, text, labels, buckets=buckets, registry=self.registry)

    # -- what the edge, the origin client and the API report ---------------------------------

    def request(self, domain: str, outcome: str) -> None:
        """One edge response for a configured domain; ``outcome`` is one of OUTCOMES."""
        self._traffic.record(domain, outcome, self._clock())

    def origin(self, domain: str, seconds: float, error: str | None) -> None:
        """One origin request: its time to headers (or to failure), and the failure's kind."""
        self._origin_seconds.labels(domain).observe(seconds)
        if error is not None:
            self._origin_errors.labels(domain, error).inc()

    def origin_error(self, domain: str, error: str) -> None:
        """A failure after the origin's headers came (reading the body): counted, not timed."""
        self._origin_errors.labels(domain, error).inc()

    def origin_busy(self, domain: str, reason: str) -> None:
        """A request answered 503 for want of an origin connection or an upload share."""
        self._origin_busy.labels(domain, reason).inc()

    def body_timeout(self, domain: str) -> None:
        """A request body stopped arriving for edge.body_timeout seconds."""
        self._body_timeouts.labels(domain).inc()

    def clear(self, domain: str | None, outcome: str, seconds: float) -> None:
        """One clear-cache attempt. ``domain`` is what it named (None if it named none)."""
        self._clears.labels(outcome).inc()
        self._clear_seconds.observe(seconds)
        if outcome == CLEARED and domain is not None:
            self._traffic.record_clear(domain, self._clock())

    def purge(self, kind: str, outcome: str, seconds: float) -> None:
        """One purge attempt (proxy/api/purge.py), dry runs included."""
        self._purges.labels(kind, outcome).inc()
        self._purge_seconds.observe(seconds)

    def purge_acknowledged(self, seconds: float) -> None:
        """A fleet clear was confirmed by every live edge process after ``seconds``."""
        self._ack_seconds.observe(seconds)

    def worker_restarted(self, index: int) -> None:
        """The node's supervisor started edge worker ``index`` again after it exited."""
        self._worker_restarts.labels(str(index)).inc()

    @property
    def domains(self) -> tuple[str, ...]:
        """The configured domains, whose series a scrape shows."""
        return self._domains

    def set_domains(self, domains: Sequence[str]) -> None:
        """The domains whose series a scrape shows, after a config reload (proxy/process/reload.py).
        A removed domain's counters stay in the registry but are no longer listed."""
        self._domains = tuple(domains)
        self._at_zero(self._domains)

    def expect_workers(self, count: int) -> None:
        """``worker_restarts_total`` at zero for each of a node's ``count`` edge workers."""
        for index in range(count):
            self._worker_restarts.labels(str(index))

    # -- what the dashboard reads --------------------------------------------------------------

    def domain_counts(self, domain: str) -> DomainCounts:
        mine = self._traffic.domain_counts(domain)
        if self._remote is None:
            return mine
        theirs = self._remote.outcomes().get(domain, {})
        return DomainCounts(
            hits=mine.hits + theirs.get(HIT, 0),
            misses=mine.misses + theirs.get(MISS, 0) + theirs.get(STALE, 0),
            stale=mine.stale + theirs.get(STALE, 0),
            bypassed=mine.bypassed + theirs.get(BYPASS, 0),
            errors=mine.errors + theirs.get(ERROR, 0),
            clears=mine.clears,
        )

    def edge_counters(self) -> dict[str, dict[str, dict[str, int]]]:
        """This process's origin_errors (domain -> kind -> count), origin_busy (domain ->
        reason -> count) and request_body_timeouts (domain -> {"": count}): an edge process's
        report (proxy/fleet/figures.py), which its node sums (decision 0051)."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for name, counter in (
            ("origin_errors", self._origin_errors),
            ("origin_busy", self._origin_busy),
            ("request_body_timeouts", self._body_timeouts),
        ):
            into = out[name] = {}
            for family in counter.collect():
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        labels = sample.labels
                        by = into.setdefault(labels["domain"], {})
                        by[labels.get("kind", labels.get("reason", ""))] = int(sample.value)
        return out

    def outcomes(self) -> Mapping[str, Mapping[str, int]]:
        """This process's responses: domain → outcome → count (an edge process's report)."""
        return self._traffic.outcomes()

    def timeline(self, now: float, minutes: int = 60) -> list[MinuteCounts]:
        """The last ``minutes`` minutes (at most 60), oldest first, all domains together."""
        mine = self._traffic.timeline(now, minutes)
        return mine if self._remote is None else self._remote.timeline(mine)

    # -- scraping --------------------------------------------------------------------------------

    async def exposition(self) -> bytes:
        """The Prometheus text exposition, with the store read now."""
        snapshot = None
        if self._store is not None:
            stats = await self._store.stats()
            per_domain = [(name, await self._store.domain_stats(name)) for name in self._domains]
            tier = self.tier
            shared = None if tier is None else tier.shared_stats()
            hits = None if tier is None else tier.disk_hits
            memory = tier.memory_hits if isinstance(tier, NodeHits) else None
            collapsed = None if tier is None else tier.collapsed
            snapshot = StoreSnapshot(
                stats, tuple(per_domain), shared, hits, memory_hits=memory, collapsed=collapsed
            )
        # No await between taking the snapshot and generating: concurrent scrapes each
        # render the snapshot they took.
        self._snapshot = snapshot
        return generate_latest(self.registry)

    def _collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            PREFIX + "requests",
            "Edge responses, by domain and cache status (hit, miss, stale, bypass, error).",
            labels=["domain", "cache_status"],
        )
        counts = _summed(self._traffic.outcomes(), self._remote)
        for domain in self._domains:
            if domain not in counts:
                for outcome in OUTCOMES:
                    requests.add_metric([domain, outcome], 0)
        for domain, by_outcome in counts.items():
            for outcome, count in by_outcome.items():
                requests.add_metric([domain, outcome], count)
        yield requests
        rows: list[tuple[str, Sequence[int]]] = [
            (guard.listener, guard.figures()) for guard in self.connections
        ]
        if self._remote is not None:  # the edge workers' connections, summed
            rows.extend(self._remote.connections().items())
        yield from connection_metrics(rows, PREFIX)
        responses = self.responses
        if self._remote is not None:  # the edge workers' responses, summed
            responses = responses.plus(self._remote.responses())
        yield from response_metrics(responses, PREFIX)
        if self._remote is not None:
            yield from _fleet_metrics(self._remote)
            if self.origin_servers is not None:  # the edge processes' origin servers, merged
                yield from origin_server_metrics(self.origin_servers(), PREFIX)

        if self._snapshot is not None:
            yield from store_metrics(self._snapshot, PREFIX)
            if self._snapshot.shared is not None:
                hits = sum(by.get(HIT, 0) for by in counts.values())
                yield from tier_metrics(self._snapshot, hits, PREFIX)


def _summed(
    mine: Mapping[str, Mapping[str, int]], remote: RemoteFigures | None
) -> Mapping[str, Mapping[str, int]]:
    if remote is None:
        return mine
    total = {domain: dict(counts) for domain, counts in mine.items()}
    for domain, counts in remote.outcomes().items():
        into = total.setdefault(domain, dict.fromkeys(OUTCOMES, 0))
        for outcome, count in counts.items():
            into[outcome] = into.get(outcome, 0) + count
    return total


def _fleet_metrics(remote: RemoteFigures) -> Iterable[Metric]:
    live, fenced = remote.live_and_fenced()
    yield GaugeMetricFamily(
        PREFIX + "fleet_live_processes",
        "Edge processes whose lease is live and which may serve from their cache.",
        live,
    )
    yield GaugeMetricFamily(
        PREFIX + "fleet_fenced_processes",
        "Edge processes still listed in Valkey that may not serve from their cache.",
        fenced,
    )
    yield CounterMetricFamily(
        PREFIX + "fleet_lease_renew_failures",
        "Lease renewals (syncs) that failed, summed over the listed edge processes.",
        remote.renew_failures,
    )


class _ScrapeCollector:
    """Turns the plain counters and the store snapshot into samples at scrape time."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    def collect(self) -> Iterable[Metric]:
        return self._telemetry._collect()


TELEMETRY = web.AppKey("telemetry", Telemetry)


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics, on the API listener only."""
    body = await request.app[TELEMETRY].exposition()
    response = web.Response(body=body)
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    response.headers["Cache-Control"] = "no-store"
    return response
