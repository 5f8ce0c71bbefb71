"""GET /metrics: the whole service, real edge traffic, real origin failures, real clears, and
the scrape parsed back into samples whose values are checked exactly."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import prometheus_client
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from proxy.core.auth.tokens import Scope
from proxy.core.observe.traffic import DomainCounts
from proxy.observe.telemetry import Telemetry
from proxy.process.service import Service, running
from tests.conftest import Origin, make_config
from tests.polling import until

CACHEABLE = {"Cache-Control": "max-age=60"}
CLEAR = "/api/v1/cdn/clear-cache"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
RawOrigin = Callable[[bytes], Awaitable[str]]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def raw_origin() -> AsyncIterator[RawOrigin]:
    """An origin that answers every connection with the given raw bytes, then closes."""
    servers: list[asyncio.Server] = []

    async def start(answer: bytes) -> str:
        async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(reply, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def scrape(client: aiohttp.ClientSession, service: Service) -> Samples:
    async with client.get(service.api_url + "/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == prometheus_client.CONTENT_TYPE_LATEST
        text = await response.text()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in samples, key
            samples[key] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def by_label(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


async def get(
    client: aiohttp.ClientSession, service: Service, host: str, path: str, method: str = "GET"
) -> tuple[int, str]:
    async with client.request(method, service.edge_url + path, headers={"Host": host}) as r:
        await r.read()
        return r.status, r.headers.get("Cache-Status", "")


async def clear(
    client: aiohttp.ClientSession, service: Service, token: str, domain: str
) -> tuple[int, str]:
    async with client.post(
        service.api_url + CLEAR,
        json={"domain": domain},
        headers={"Authorization": f"Bearer {token}"},
    ) as r:
        return r.status, await r.text()


@pytest.fixture
async def service(tmp_path: Path, origin: Origin, raw_origin: RawOrigin) -> AsyncIterator[Service]:
    # Headers, then 5 of the 100 promised body bytes, then the connection closes.
    cut = await raw_origin(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    domains: list[dict[str, Any]] = [
        {"name": "example.com", "origin": origin.url, "read_timeout": 5},
        {"name": "down.test", "origin": f"http://127.0.0.1:{closed_port()}"},
        {"name": "slow.test", "origin": origin.url, "read_timeout": 0.2},
        {"name": "cut.test", "origin": cut},
    ]
    async with running(make_config(tmp_path, origin.url, domains=domains)) as running_service:
        yield running_service


async def test_metrics_count_what_the_edge_origin_and_api_did(
    service: Service, origin: Origin, client: aiohttp.ClientSession
) -> None:
    origin.reply("/page", b"page", headers=CACHEABLE)
    origin.reply("/doc", b"doc", headers={"Cache-Control": "no-cache, max-age=60", "ETag": '"1"'})
    origin.reply("/form", b"ok")
    never = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await never.wait()
        return web.Response(text="too late")

    origin.route("/slow", slow)

    assert await get(client, service, "example.com", "/page") == (
        200,
        "cdn-proxy; fwd=uri-miss; stored",
    )
    assert (await get(client, service, "example.com", "/page"))[1].startswith("cdn-proxy; hit")
    assert (await get(client, service, "example.com", "/doc"))[1].endswith("stored")
    assert (await get(client, service, "example.com", "/doc"))[1].startswith("cdn-proxy; fwd=stale")
    assert await get(client, service, "example.com", "/form", "POST") == (
        200,
        "cdn-proxy; fwd=method",
    )
    assert (await get(client, service, "down.test", "/x"))[0] == 502
    assert (await get(client, service, "slow.test", "/slow"))[0] == 504
    assert (await get(client, service, "cut.test", "/cut"))[0] == 502
    never.set()

    samples = await scrape(client, service)

    def requests(domain: str, hit: int, miss: int, stale: int, bypass: int, error: int) -> Samples:
        counts = {"hit": hit, "miss": miss, "stale": stale, "bypass": bypass, "error": error}
        return {
            (
                "cdn_proxy_requests_total",
                (("cache_status", status), ("domain", domain)),
            ): float(count)
            for status, count in counts.items()
        }

    assert by_label(samples, "cdn_proxy_requests_total") == {
        key[1]: v
        for part in (
            requests("example.com", 1, 2, 1, 1, 0),
            requests("down.test", 0, 0, 0, 0, 1),
            requests("slow.test", 0, 0, 0, 0, 1),
            requests("cut.test", 0, 0, 0, 0, 1),
        )
        for key, v in part.items()
    }

    # Origin requests: example.com asked 4 times (page, doc twice, form), each timed once;
    # down.test and slow.test failed before any headers, cut.test after them.
    assert origin.count("/page") + origin.count("/doc") + origin.count("/form") == 4
    latency = "cdn_proxy_origin_request_duration_seconds"
    for domain, count in [("example.com", 4), ("down.test", 1), ("slow.test", 1), ("cut.test", 1)]:
        assert value(samples, latency + "_count", domain=domain) == count
        assert value(samples, latency + "_bucket", domain=domain, le="+Inf") == count
        assert value(samples, latency + "_sum", domain=domain) > 0
    assert value(samples, latency + "_sum", domain="slow.test") >= 0.2  # read_timeout
    errors = by_label(samples, "cdn_proxy_origin_errors_total")
    assert {labels: count for labels, count in errors.items() if count} == {
        (("domain", "down.test"), ("kind", "unreachable")): 1.0,
        (("domain", "slow.test"), ("kind", "timeout")): 1.0,
        (("domain", "cut.test"), ("kind", "protocol")): 1.0,
    }

    # The store: /page and /doc of example.com, nothing else.
    stats = await service.store.stats()
    example = await service.store.domain_stats("example.com")
    assert stats.entries == example.entries == 2
    assert value(samples, "cdn_proxy_store_entries") == 2
    assert value(samples, "cdn_proxy_store_bytes") == stats.bytes > 0
    assert value(samples, "cdn_proxy_store_max_bytes") == 16 * 1024**2
    assert value(samples, "cdn_proxy_store_evictions_total") == 0
    assert value(samples, "cdn_proxy_store_pending_reclaim_entries") == 0
    assert value(samples, "cdn_proxy_domain_entries", domain="example.com") == 2
    assert value(samples, "cdn_proxy_domain_bytes", domain="example.com") == example.bytes > 0
    assert value(samples, "cdn_proxy_domain_entries", domain="down.test") == 0
    assert by_label(samples, "cdn_proxy_clears_total") == {}
    assert value(samples, "cdn_proxy_clear_duration_seconds_count") == 0

    # Clears: one that works, one with a wrong token, one for a domain that is not ours.
    token = await service.state.create_token("deploy", Scope.everything(), 0.0)
    assert await clear(client, service, token, "example.com") == (200, "Cache cleared")
    assert (await clear(client, service, "not-a-token", "example.com"))[0] == 401
    assert (await clear(client, service, token, "elsewhere.test"))[0] == 404

    samples = await scrape(client, service)
    assert by_label(samples, "cdn_proxy_clears_total") == {
        (("outcome", "cleared"),): 1.0,
        (("outcome", "unauthorized"),): 1.0,
        (("outcome", "not_found"),): 1.0,
    }
    assert value(samples, "cdn_proxy_clear_duration_seconds_count") == 3
    assert value(samples, "cdn_proxy_clear_duration_seconds_bucket", le="+Inf") == 3
    assert value(samples, "cdn_proxy_domain_entries", domain="example.com") == 0
    assert value(samples, "cdn_proxy_domain_bytes", domain="example.com") == 0
    # The scrapes and the clears are not edge traffic.
    assert value(samples, "cdn_proxy_requests_total", domain="example.com", cache_status="hit") == 1

    # What the dashboard reads agrees with the scrape.
    counts = service.telemetry.domain_counts("example.com")
    assert counts == DomainCounts(hits=1, misses=3, stale=1, bypassed=1, errors=0, clears=1)
    assert counts.hit_ratio == 0.25  # hits / (hits + misses), a revalidation is a miss
    timeline = service.telemetry.timeline(time.time())
    assert len(timeline) == 60
    assert sum(m.hits for m in timeline) == 1
    assert sum(m.misses for m in timeline) == 3
    assert sum(m.clears for m in timeline) == 1


async def test_collapsed_requests_count_as_misses(
    service: Service, origin: Origin, client: aiohttp.ClientSession
) -> None:
    gate = asyncio.Event()
    arrived: list[None] = []

    async def held(request: web.Request) -> web.StreamResponse:
        arrived.append(None)
        await gate.wait()
        return web.Response(body=b"hot", headers=CACHEABLE)

    origin.route("/hot", held)
    requests = [asyncio.create_task(get(client, service, "example.com", "/hot")) for _ in range(5)]
    await until(lambda: len(arrived) == 1)
    flight = service.edge.flights.get(("example.com", 0, "/hot"))
    assert flight is not None
    await until(lambda: flight.waiters == 4)
    gate.set()
    statuses = sorted(status for _, status in await asyncio.gather(*requests))
    assert statuses.count("cdn-proxy; fwd=uri-miss; collapsed") == 4
    assert origin.count("/hot") == 1

    samples = await scrape(client, service)
    assert (
        value(samples, "cdn_proxy_requests_total", domain="example.com", cache_status="miss") == 5
    )
    assert (
        value(samples, "cdn_proxy_origin_request_duration_seconds_count", domain="example.com") == 1
    )


async def test_metrics_are_not_served_through_the_edge(
    service: Service, origin: Origin, client: aiohttp.ClientSession
) -> None:
    api_host = service.api_url.removeprefix("http://")
    for host in ("example.com", api_host, "localhost", "127.0.0.1"):
        async with client.get(service.edge_url + "/metrics", headers={"Host": host}) as r:
            body = await r.text()
            assert "cdn_proxy_" not in body
            assert r.headers["Content-Type"] != prometheus_client.CONTENT_TYPE_LATEST
            if host == "example.com":
                # A proxied path like any other: the origin's own /metrics was asked.
                assert r.status == 404
                assert r.headers["Cache-Status"].startswith("cdn-proxy; fwd=uri-miss")
            else:
                assert r.status == 421
    assert origin.count("/metrics") == 1
    async with client.get(service.api_url + "/metrics") as r:
        assert r.status == 200
        assert r.headers["Cache-Control"] == "no-store"
        assert "cdn_proxy_requests_total" in await r.text()


async def test_evictions_are_the_stores(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession
) -> None:
    config = make_config(tmp_path, origin.url, cache={"max_bytes": "8KiB"})
    for n in range(3):
        origin.reply(f"/big{n}", b"x" * 3000, headers=CACHEABLE)
    async with running(config) as service:
        for n in range(3):
            assert (await get(client, service, "example.com", f"/big{n}"))[1].endswith("stored")
        stats = await service.store.stats()
        assert stats.evictions >= 1
        samples = await scrape(client, service)
        assert value(samples, "cdn_proxy_store_evictions_total") == stats.evictions
        assert value(samples, "cdn_proxy_store_entries") == stats.entries == 3 - stats.evictions
        assert value(samples, "cdn_proxy_store_max_bytes") == 8 * 1024


def test_each_telemetry_has_its_own_registry() -> None:
    first, second = Telemetry(), Telemetry()  # a shared registry would refuse the second
    first.origin("example.com", 0.01, "timeout")
    assert first.registry is not second.registry
    assert (
        first.registry.get_sample_value(
            "cdn_proxy_origin_errors_total", {"domain": "example.com", "kind": "timeout"}
        )
        == 1
    )
    assert (
        second.registry.get_sample_value(
            "cdn_proxy_origin_errors_total", {"domain": "example.com", "kind": "timeout"}
        )
        is None
    )
    default = {metric.name for metric in prometheus_client.REGISTRY.collect()}
    assert not any(name.startswith("cdn_proxy") for name in default)


@pytest.mark.slow
async def test_the_counters_the_readme_names_are_at_zero_before_their_first_event(
    tmp_path: Path, origin: Origin, client: aiohttp.ClientSession
) -> None:
    """Issue 34: origin_errors_total, origin_busy_total, request_body_timeouts_total and
    purges_total had no sample until their first event, so a dashboard's rate() or an alert
    on them saw "no data" instead of 0. Each known series is exported at zero from the start,
    and a domain added by a reload gets its own."""
    domains: list[dict[str, Any]] = [{"name": "example.com", "origin": origin.url}]
    async with running(make_config(tmp_path, origin.url, domains=domains)) as service:
        samples = await scrape(client, service)
        for kind in ("timeout", "unreachable", "protocol"):
            assert (
                value(samples, "cdn_proxy_origin_errors_total", domain="example.com", kind=kind)
                == 0
            )
        for reason in ("queue_timeout", "uploads", "tunnels"):
            busy = value(
                samples, "cdn_proxy_origin_busy_total", domain="example.com", reason=reason
            )
            assert busy == 0
        assert value(samples, "cdn_proxy_request_body_timeouts_total", domain="example.com") == 0
        for kind in ("url", "prefix", "tag", "all"):
            for outcome in ("purged", "dry_run"):
                purges = value(samples, "cdn_proxy_purges_total", kind=kind, outcome=outcome)
                assert purges == 0
        service.telemetry.set_domains(["example.com", "new.test"])
        samples = await scrape(client, service)
        assert value(samples, "cdn_proxy_request_body_timeouts_total", domain="new.test") == 0
