"""Response figures of the edge: responses by status class, bytes sent, and the time each
request took, per domain (issue 14 §8; ``cdn_proxy_responses_total``,
``cdn_proxy_response_bytes_total``, ``cdn_proxy_request_duration_seconds``).

Recorded once per response after it was sent (the access log's hook, proxy/edge/access_log.py),
so on the hit path: plain ints in lists, a bisect for the histogram bucket, no lock (it lives
on the event loop), as ``Traffic`` does (decision 0005). Responses to a Host the edge does not
serve are counted under the domain ``UNROUTED``, so labels stay bounded.

A report (``report``) is plain JSON for an edge worker's member info; ``summed`` adds reports
on the control plane (proxy/fleet/figures.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping

UNROUTED = "-"
# Seconds from the request's head to the answer's last byte: a hit takes tens of microseconds
# in the process, a miss what the origin takes.
BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")


# One flat list per domain, so that recording a response is a few list operations
# (decision 0019 has the cost): statuses by class (index i counts i00-i99; aiohttp allows
# 100-999, so ten), bytes sent, the histogram's buckets (the last above every bound), and the
# sum of seconds.
SENT = 10
FIRST_BUCKET = 11
SECONDS = FIRST_BUCKET + len(BUCKETS) + 1
SIZE = SECONDS + 1
# Bucket index by whole microseconds, for the times below the first millisecond (most hits):
# a list index instead of a bisect. Every bound is a whole number of microseconds, so all of
# [us, us + 1) falls in one bucket but for a time exactly on a bound, which is counted in the
# bucket above it (a float exactly on a bound is rare, and a microsecond off).
FAST_MICROSECONDS = 1000
FAST_BUCKET = [FIRST_BUCKET + bisect_left(BUCKETS, (us + 0.5) / 1e6) for us in range(1000)]


def bucket_of(seconds: float) -> int:
    """The index in a domain's counts of the histogram bucket ``seconds`` falls in."""
    us = int(seconds * 1e6)
    if 0 <= us < FAST_MICROSECONDS:
        return FAST_BUCKET[us]
    return FIRST_BUCKET + bisect_left(BUCKETS, seconds)


def record(counts: list[float], status: int, sent: int, seconds: float) -> None:
    """Count one response in a domain's ``counts``: its status class, the bytes sent, and its
    time in the histogram. The one copy of the rule: the edge's fast writer
    (proxy/edge/aiohttp_adapter.py) and its access-log hook call it with a domain's list."""
    counts[status // 100 % 10] += 1
    counts[SENT] += sent
    us = int(seconds * 1e6)
    counts[FAST_BUCKET[us] if 0 <= us < FAST_MICROSECONDS else bucket_of(seconds)] += 1
    counts[SECONDS] += seconds


class DomainResponses:
    """One domain's figures, in the flat list ``counts`` (indices above)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: list[float] = [0] * SIZE
        self.counts[SECONDS] = 0.0

    def record(self, status: int, sent: int, seconds: float) -> None:
        record(self.counts, status, sent, seconds)

    @property
    def classes(self) -> list[int]:
        return [int(count) for count in self.counts[:SENT]]

    @property
    def sent(self) -> int:
        return int(self.counts[SENT])

    @property
    def buckets(self) -> list[int]:
        return [int(count) for count in self.counts[FIRST_BUCKET:SECONDS]]

    @property
    def seconds(self) -> float:
        return float(self.counts[SECONDS])

    def report(self) -> list[object]:
        return [self.classes[1:6], self.sent, self.buckets, self.seconds]

    def add(self, report: object) -> None:
        """Add another process's ``report`` of the same domain; anything malformed is skipped."""
        if not isinstance(report, list) or len(report) != 4:
            return
        classes, sent, buckets, seconds = report
        counts = self.counts
        if isinstance(classes, list) and len(classes) == 5:
            for index, count in enumerate(classes, start=1):
                counts[index] += _int(count)
        counts[SENT] += _int(sent)
        if isinstance(buckets, list) and len(buckets) == SECONDS - FIRST_BUCKET:
            for index, count in enumerate(buckets, start=FIRST_BUCKET):
                counts[index] += _int(count)
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            counts[SECONDS] += float(seconds)


class Responses:
    """Every domain's figures, by domain name."""

    __slots__ = ("domains", "log_dropped", "log_failed")

    def __init__(self) -> None:
        self.domains: dict[str, DomainResponses] = {}
        # Access log lines lost: no room in the queue (counted on the event loop), and write
        # errors (counted by the writer thread): two counters, one writer each.
        self.log_dropped = 0
        self.log_failed = 0

    def of(self, domain: str) -> DomainResponses:
        figures = self.domains.get(domain)
        if figures is None:
            figures = self.domains[domain] = DomainResponses()
        return figures

    def report(self) -> dict[str, object]:
        """Plain JSON: {"domains": {domain: figures}, "log_lost": lines}."""
        return {
            "domains": {domain: figures.report() for domain, figures in self.domains.items()},
            "log_lost": self.log_dropped + self.log_failed,
        }

    @property
    def log_lost(self) -> int:
        return self.log_dropped + self.log_failed

    @classmethod
    def summed(cls, parts: Iterable[object]) -> Responses:
        """The figures of several reports (anything malformed in one is skipped)."""
        total = cls()
        for report in parts:
            if not isinstance(report, Mapping):
                continue
            domains = report.get("domains")
            for domain, figures in domains.items() if isinstance(domains, Mapping) else ():
                total.of(str(domain)).add(figures)
            total.log_dropped += _int(report.get("log_lost"))
        return total

    def plus(self, other: Responses) -> Responses:
        """These figures and ``other``'s, added into a new one."""
        return Responses.summed([self.report(), other.report()])


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
