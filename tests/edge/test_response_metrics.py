"""/metrics gains responses by status class, bytes sent and the time of each request
(issue 14 §8): ``cdn_proxy_responses_total{domain,class}``, ``cdn_proxy_response_bytes_total``,
``cdn_proxy_request_duration_seconds``. Right with one process and with two workers, whose
figures the control process sums. Real processes and a real origin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Origin
from tests.edge.access_support import get, keep_alive_get, node_config
from tests.nodes import WORKER_COUNTS, Node
from tests.polling import until

CACHEABLE = {"Cache-Control": "max-age=600"}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def samples(node: Node) -> Samples:
    async with aiohttp.ClientSession() as client, client.get(node.api + "/metrics") as response:
        text = await response.text()
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def until_counted(node: Node, name: str, expected: float, **labels: str) -> Samples:
    """/metrics once ``name`` has reached ``expected`` (workers report every fleet.renew)."""

    async def counted() -> Samples | None:
        found = await samples(node)
        return found if value(found, name, **labels) >= expected else None

    # Another process's report: polled, every 0.1 s, within a bound (it comes in a second
    # or two).
    found = await until(counted, within=20.0, every=0.1)
    assert found is not None
    return found


@pytest.fixture(params=WORKER_COUNTS)
async def node(
    request: pytest.FixtureRequest, tmp_path: Path, origin: Origin
) -> AsyncIterator[Node]:
    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/missing":
            return web.Response(status=404, body=b"no", headers=CACHEABLE)
        return web.Response(body=b"y" * 500, headers=CACHEABLE)

    origin.default = handler
    started = await Node.start(node_config(tmp_path, origin.url, workers=request.param))
    yield started
    await started.kill()


@pytest.mark.slow
async def test_responses_bytes_and_durations(node: Node) -> None:
    answers: list[bytes] = []  # every answer for example.com, head and body, as received
    for index in range(20):  # misses: new connections, spread over the workers
        answers += await keep_alive_get(node.edge, f"/p{index}")
    answers += await keep_alive_get(node.edge, "/p0", 5)  # hits (fast ones where stored)
    answers += await keep_alive_get(node.edge, "/missing")
    assert [answer[9:12] for answer in answers] == [b"200"] * 25 + [b"404"]
    assert (await get(node.edge + "/x", host="other.example"))[0] == 421

    found = await until_counted(
        node, "cdn_proxy_request_duration_seconds_count", 26, domain="example.com"
    )
    found = await until_counted(
        node, "cdn_proxy_responses_total", 1, domain="-", **{"class": "4xx"}
    )
    responses = "cdn_proxy_responses_total"
    assert value(found, responses, domain="example.com", **{"class": "2xx"}) == 25
    assert value(found, responses, domain="example.com", **{"class": "4xx"}) == 1
    assert value(found, responses, domain="example.com", **{"class": "5xx"}) == 0
    assert value(found, responses, domain="-", **{"class": "4xx"}) == 1
    assert value(found, "cdn_proxy_request_duration_seconds_count", domain="example.com") == 26
    buckets = "cdn_proxy_request_duration_seconds_bucket"
    assert value(found, buckets, domain="example.com", le="+Inf") == 26
    assert value(found, "cdn_proxy_request_duration_seconds_sum", domain="example.com") > 0
    assert value(found, "cdn_proxy_response_bytes_total", domain="example.com") == sum(
        len(answer) for answer in answers
    )
    assert value(found, "cdn_proxy_access_log_lost_total") == 0
