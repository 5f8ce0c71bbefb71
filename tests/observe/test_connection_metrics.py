"""Client connections' figures as metric families (proxy/observe/connection_metrics.py): each
figure of ``ConnectionGuard.figures()`` lands in its family by listener, the two refusal counts
in ``connections_refused`` by reason, and a shorter report from an older process counts 0 for
the figures it lacks."""

from __future__ import annotations

import pytest

from proxy.observe.connection_metrics import CONNECTION_FIGURES, connection_metrics, merged

Labels = tuple[tuple[str, str], ...]

# ConnectionGuard.figures(), in order (proxy/edge/connections.py): the sample each one gives.
FIGURES: list[tuple[str, Labels]] = [
    ("p_connections_open", ()),
    ("p_connections_max", ()),
    ("p_connections_refused_total", (("reason", "limit"),)),
    ("p_header_timeouts_total", ()),
    ("p_bad_requests_total", ()),
    ("p_tunnels_open", ()),
    ("p_tunnels_total", ()),
    ("p_connections_refused_total", (("reason", "per_client"),)),
    ("p_connections_per_client_max", ()),
    ("p_request_buffer_bytes", ()),
    ("p_request_buffer_max_bytes", ()),
    ("p_request_bodies_over_budget_total", ()),
    ("p_request_bodies_too_slow_total", ()),
    ("p_http2_connections_open", ()),
    ("p_http2_connections_total", ()),
    ("p_http2_streams_total", ()),
    ("p_http2_goaways_total", ()),
    ("p_send_timeouts_total", ()),
    ("p_answers_held_bytes", ()),
    ("p_answers_held_connection_max_bytes", ()),
    ("p_answers_held_client_max_bytes", ()),
    ("p_answers_refused_total", ()),
    ("p_origin_requests_in_flight", ()),
    ("p_origin_requests_connection_max", ()),
    ("p_origin_requests_client_max", ()),
    ("p_origin_requests_waited_total", ()),
    ("p_http2_streams_open", ()),
    ("p_http2_streams_client_max", ()),
    ("p_http2_streams_refused_total", ()),
]


def samples(rows: list[tuple[str, list[int]]]) -> dict[tuple[str, str, Labels], float]:
    """(sample name, listener, other labels) -> value."""
    found: dict[tuple[str, str, Labels], float] = {}
    for family in connection_metrics(rows, "p_"):
        for sample in family.samples:
            labels = dict(sample.labels)
            listener = labels.pop("listener")
            found[(sample.name, listener, tuple(sorted(labels.items())))] = sample.value
    return found


def test_every_figure_is_counted_once() -> None:
    assert len(FIGURES) == CONNECTION_FIGURES


@pytest.mark.parametrize("index", range(len(FIGURES)))
def test_each_figure_lands_in_its_family_by_listener(index: int) -> None:
    edge = [1000 + position for position in range(CONNECTION_FIGURES)]
    api = [2000 + position for position in range(CONNECTION_FIGURES)]
    found = samples([("edge", edge), ("api", api)])
    assert len(found) == 2 * CONNECTION_FIGURES
    name, labels = FIGURES[index]
    assert found[(name, "edge", labels)] == 1000 + index
    assert found[(name, "api", labels)] == 2000 + index


def test_an_older_report_counts_the_figures_it_lacks_as_zero() -> None:
    found = samples([("edge", [5, 6, 7, 8, 9, 10, 11, 12, 13])])  # no bodies, no HTTP/2
    assert found[("p_connections_refused_total", "edge", (("reason", "per_client"),))] == 12
    assert found[("p_connections_per_client_max", "edge", ())] == 13
    assert found[("p_request_buffer_bytes", "edge", ())] == 0
    assert found[("p_http2_goaways_total", "edge", ())] == 0


def test_a_node_takes_the_largest_per_connection_budget_and_sums_the_rest() -> None:
    """Decisions 0051 and 0057: a budget or cap per connection is each process's whole one,
    not a share."""
    node = [0] * CONNECTION_FIGURES
    for worker in ([5] * CONNECTION_FIGURES, [7] * CONNECTION_FIGURES):
        merged(node, worker)
    names = [name for name, _ in FIGURES]
    per_connection = {
        names.index("p_answers_held_connection_max_bytes"),
        names.index("p_origin_requests_connection_max"),
    }
    assert [node[i] for i in sorted(per_connection)] == [7, 7]
    assert [v for i, v in enumerate(node) if i not in per_connection] == [12] * (
        CONNECTION_FIGURES - 2
    )
