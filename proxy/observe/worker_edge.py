"""The edge's budgets and origin counters in /metrics, of one process or of a node's edge
processes summed (issue 32, decision 0051).

An edge process shows its own fill budget and compression queue (``answer_metrics``, from
``AnswerCollector.figures`` in proxy/edge/fill_budget.py) and its origin counters (its
Telemetry's instruments). A node's control process serves no edge traffic: it read neither,
so its /metrics showed no fill or compression figures and never ``origin_errors_total``,
``origin_busy_total`` or ``request_body_timeouts_total``. Each edge process now puts them in
the report it writes at every sync (proxy/wire/reports.py ``answers`` and ``counters``), and
``WorkerEdgeCollector`` sums the reports at scrape time: counters and budgets are added (each
process has its own fill budget and queue: the node's is their sum), every configured
domain's counters shown at zero from the start (issue 34). Reports of processes gone still
count until Valkey drops them, as for requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.wire.reports import MemberInfo

# The length of ``AnswerCollector.figures()``: fill held, fill budget, fills over budget,
# compression queued, its bound, refused, and the hit lane's answers (decision 0050). A
# report of an older build, with fewer, is summed as far as it goes.
ANSWER_FIGURES = 7

# The counters a report carries (``Telemetry.edge_counters``): name, help, its second label
# and that label's values known in advance (exported at zero).
COUNTERS: tuple[tuple[str, str, str | None, tuple[str, ...]], ...] = (
    (
        "origin_errors",
        "Origin requests that failed, by kind: timeout, unreachable, protocol.",
        "kind",
        ("timeout", "unreachable", "protocol"),
    ),
    (
        "origin_busy",
        "Requests answered 503 without asking the origin: queue_timeout, uploads or tunnels.",
        "reason",
        ("queue_timeout", "uploads", "tunnels"),
    ),
    (
        "request_body_timeouts",
        "Request bodies that stopped arriving for edge.body_timeout seconds.",
        None,
        ("",),
    ),
)


def answer_metrics(figures: Sequence[int], prefix: str) -> Iterable[Metric]:
    """The fill budget's and compression queue's samples, and the hit lane's answers, from
    ``AnswerCollector.figures``."""
    held, limit, refused, pending, max_bytes, queue_refused, lane = figures
    yield _gauge(prefix + "fill_buffer_bytes", "Bytes fills hold reading bodies whole.", held)
    yield _gauge(
        prefix + "fill_buffer_max_bytes", "The fill budget (edge.fill_buffer_total_bytes).", limit
    )
    yield CounterMetricFamily(
        prefix + "fills_over_budget",
        "Fills relayed unstored for want of fill budget.",
        value=refused,
    )
    yield _gauge(
        prefix + "compress_queue_bytes", "Bytes of bodies queued for or in compression.", pending
    )
    yield _gauge(
        prefix + "compress_queue_max_bytes",
        "The compression queue's bound (edge.compress_queue_bytes).",
        max_bytes,
    )
    yield CounterMetricFamily(
        prefix + "compress_refused",
        "Bodies stored uncompressed for want of room in the compression queue.",
        value=queue_refused,
    )
    yield CounterMetricFamily(
        prefix + "hit_lane_answers",
        "Hits the HTTP/1.1 hit lane answered (edge.hit_lane, decision 0050).",
        value=lane,
    )


def _gauge(name: str, text: str, value: int) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


class WorkerEdgeCollector:
    """A node's edge processes' budgets and origin counters, summed from their reports (each
    with whether it is live: ``FleetFigures.reports``)."""

    def __init__(
        self,
        reports: Callable[[], list[tuple[MemberInfo, bool]]],
        domains: Callable[[], Sequence[str]],
        prefix: str,
    ) -> None:
        self._reports = reports
        self._domains = domains
        self._prefix = prefix

    def collect(self) -> Iterable[Metric]:
        reports = [report for report, _ in self._reports()]
        answers = [0] * ANSWER_FIGURES
        for report in reports:
            for index, value in enumerate(report.answers[:ANSWER_FIGURES]):
                answers[index] += value
        yield from answer_metrics(answers, self._prefix)
        for name, text, label, known in COUNTERS:
            totals: dict[tuple[str, str], int] = {
                (domain, what): 0 for domain in self._domains() for what in known
            }
            for report in reports:
                for domain, by in report.counters.get(name, {}).items():
                    for what, count in by.items():
                        totals[domain, what] = totals.get((domain, what), 0) + count
            labels = ["domain"] if label is None else ["domain", label]
            family = CounterMetricFamily(self._prefix + name, text, labels=labels)
            for (domain, what), total in sorted(totals.items()):
                family.add_metric([domain] if label is None else [domain, what], total)
            yield family
