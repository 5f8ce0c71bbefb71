"""The response figures (proxy/core/observe/responses.py) as Prometheus metric families, at
scrape time.

- ``responses_total{domain, class}``: responses sent, by status class (1xx ... 5xx);
- ``response_bytes_total{domain}``: bytes sent, heads included;
- ``request_duration_seconds{domain}``: a histogram of the time from a request's head to the
  last byte of its answer, as the client's side of the socket sees it, near enough;
- ``access_log_lost_total``: access log lines dropped (the writer could not keep up) or not
  written (write errors).

``domain`` is a configured domain, or ``-`` for responses to a Host the edge does not serve.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from proxy.core.observe.responses import BUCKETS, CLASSES, DomainResponses, Responses

# The histogram's bucket bounds, as its samples' ``le`` label gives them.
_BOUNDS = (*map(str, BUCKETS), "+Inf")


def response_metrics(responses: Responses, prefix: str) -> Iterable[Metric]:
    domains = sorted(responses.domains.items())
    by_class = CounterMetricFamily(
        prefix + "responses",
        "Edge responses sent, by domain and status class.",
        labels=["domain", "class"],
    )
    sent = CounterMetricFamily(
        prefix + "response_bytes",
        "Bytes the edge sent in its responses, heads included, by domain.",
        labels=["domain"],
    )
    for domain, figures in domains:
        for index, name in enumerate(CLASSES, start=1):
            by_class.add_metric([domain, name], figures.classes[index])
        sent.add_metric([domain], figures.sent)
    yield by_class
    yield sent
    yield _durations(domains, prefix)
    yield CounterMetricFamily(
        prefix + "access_log_lost",
        "Access log lines dropped (the writer fell behind) or not written (write errors).",
        responses.log_lost,
    )


def _durations(
    domains: Iterable[tuple[str, DomainResponses]], prefix: str
) -> HistogramMetricFamily:
    """The request durations: the figures count each bucket's requests, a Prometheus
    histogram's buckets count those up to their bound (cumulative)."""
    seconds = HistogramMetricFamily(
        prefix + "request_duration_seconds",
        "Seconds from an edge request's head to the last byte of its answer, by domain.",
        labels=["domain"],
    )
    for domain, figures in domains:
        buckets = list(zip(_BOUNDS, accumulate(figures.buckets), strict=True))
        seconds.add_metric([domain], buckets, figures.seconds)
    return seconds
