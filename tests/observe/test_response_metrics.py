"""The response figures as Prometheus families (proxy/observe/response_metrics.py): the
duration histogram's buckets are cumulative, as Prometheus reads them, where the figures count
each bucket's own requests; statuses by class and bytes by domain."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from proxy.core.observe.responses import Responses
from proxy.observe.response_metrics import response_metrics


class _Families:
    def __init__(self, responses: Responses) -> None:
        self._responses = responses

    def collect(self) -> list[Metric]:
        return list(response_metrics(self._responses, "p_"))


def samples(responses: Responses) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of ``responses`` as /metrics writes them, read back by a Prometheus parser."""
    registry = CollectorRegistry()
    registry.register(_Families(responses))
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.parametrize(
    ("durations", "expected"),
    [
        # seconds recorded -> requests at or under each bound (le), cumulative
        ((0.00005, 0.002, 0.002, 0.3), {"0.0001": 1, "0.001": 1, "0.0025": 3, "0.5": 4}),
        ((40.0,), {"0.0001": 0, "30.0": 0, "+Inf": 1}),
        ((0.00009, 0.01, 7.0), {"0.0001": 1, "0.01": 2, "5.0": 2, "10.0": 3, "+Inf": 3}),
    ],
)
def test_duration_buckets_are_cumulative(
    durations: tuple[float, ...], expected: dict[str, int]
) -> None:
    responses = Responses()
    for seconds in durations:
        responses.of("a.test").record(200, 10, seconds)
    found = samples(responses)
    for bound, count in expected.items():
        key = ("p_request_duration_seconds_bucket", (("domain", "a.test"), ("le", bound)))
        assert found[key] == count, bound
    domain = (("domain", "a.test"),)
    assert found[("p_request_duration_seconds_count", domain)] == len(durations)
    assert found[("p_request_duration_seconds_sum", domain)] == pytest.approx(sum(durations))


def test_classes_bytes_and_lost_lines_by_domain_in_name_order() -> None:
    responses = Responses()
    responses.of("b.test").record(503, 7, 0.01)
    responses.of("a.test").record(204, 5, 0.01)
    responses.of("a.test").record(404, 6, 0.01)
    responses.log_dropped, responses.log_failed = 2, 1
    found = samples(responses)
    by_class = {
        (labels[1][1], labels[0][1]): value
        for (name, labels), value in found.items()
        if name == "p_responses_total"
    }
    assert by_class[("a.test", "2xx")] == 1
    assert by_class[("a.test", "4xx")] == 1
    assert by_class[("b.test", "5xx")] == 1
    assert by_class[("b.test", "2xx")] == 0
    assert len(by_class) == 10  # five classes for each domain, zeros included
    assert found[("p_response_bytes_total", (("domain", "a.test"),))] == 11
    assert found[("p_response_bytes_total", (("domain", "b.test"),))] == 7
    assert found[("p_access_log_lost_total", ())] == 3
    domains = [labels for (name, labels) in found if name == "p_request_duration_seconds_count"]
    assert domains == [(("domain", "a.test"),), (("domain", "b.test"),)]
