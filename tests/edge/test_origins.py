"""Several origin servers per domain (issue 25 §2, decision 0034), against real origin servers
that the tests kill and bring back: failover under load, recovery, backups, hash, probes that
hang, the retry rules, and what /metrics shows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from proxy.core.http.balance import OriginPool, ServerState
from tests.conftest import EdgeFactory, EdgeUnderTest
from tests.edge.origins_support import Killable, Refusing
from tests.polling import until


@pytest.fixture
async def servers() -> AsyncIterator[list[Killable]]:
    """Three started origin servers, a, b and c, killed after the test."""
    made = [Killable(name) for name in "abc"]
    for server in made:
        await server.start()
    yield made
    for server in made:
        await server.kill()


def domain(origins: list[str], **keys: Any) -> list[dict[str, Any]]:
    return [{"name": "example.com", "origins": origins, "read_timeout": 5, **keys}]


def health(**keys: Any) -> dict[str, Any]:
    return {"path": "/healthz", "interval": "100ms", "timeout": "50ms", **keys}


def state(edge: EdgeUnderTest, server: Killable | Refusing) -> ServerState:
    return next(s for s in pool(edge).servers if s.url == server.url)


def pool(edge: EdgeUnderTest) -> OriginPool:
    return edge.edge.upstreams.pools["example.com"]


async def load(edge: EdgeUnderTest, clients: int, each: int, prefix: str) -> list[int]:
    """``clients`` concurrent clients, each asking ``each`` distinct URLs in turn."""

    async def client(number: int) -> list[int]:
        statuses = []
        for i in range(each):
            response, _ = await edge.get(f"/{prefix}/{number}/{i}")
            statuses.append(response.status)
        return statuses

    results = await asyncio.gather(*(client(n) for n in range(clients)))
    return [status for statuses in results for status in statuses]


@pytest.mark.slow
async def test_killing_one_of_two_origins_under_load_costs_no_client_error(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, _ = servers
    edge = await make_edge(domains=domain([a.url, b.url]))
    running = asyncio.create_task(load(edge, clients=20, each=30, prefix="load"))
    await until(lambda: a.requests >= 50 and b.requests >= 50)
    await a.kill()
    killed_at = a.requests
    statuses = await running
    assert len(statuses) == 600
    assert [s for s in statuses if s != 200] == []  # every failed try was retried on b
    assert a.requests <= killed_at + 20  # at most the requests in flight when it died
    assert not state(edge, a).up and state(edge, a).last_failure is not None
    assert b.requests == 600 - a.requests
    after, _ = await edge.get("/after")
    assert after.status == 200 and b.seen["/after"] == 1


async def test_a_killed_origin_comes_back_when_its_probes_pass(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, _ = servers
    edge = await make_edge(domains=domain([a.url, b.url], health_check=health(fails=1, passes=2)))
    await a.kill()
    await until(lambda: not state(edge, a).up)
    down = a.requests
    assert set(await load(edge, clients=4, each=5, prefix="down")) == {200}
    assert a.requests == down  # nothing was sent to the dead server
    await a.start()
    await until(lambda: state(edge, a).up)
    assert a.seen["/healthz"] >= 2  # brought back by passes = 2 probes
    assert set(await load(edge, clients=4, each=5, prefix="back")) == {200}
    assert a.requests >= 5 and b.requests >= 5  # traffic returned to a


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_probes_use_the_method_the_health_check_names(
    make_edge: EdgeFactory, servers: list[Killable], method: str
) -> None:
    """Issue 34 §4: probes GET the path by default (the body is not read); ``method = "HEAD"``
    asks for the headers only, as /readyz's own checks do."""
    a, b, _ = servers
    keys = {} if method == "GET" else {"method": method}
    await make_edge(domains=domain([a.url, b.url], health_check=health(**keys)))
    await until(lambda: a.seen["/healthz"] >= 2 and b.seen["/healthz"] >= 2)
    assert set(a.health_methods) == set(b.health_methods) == {method}


async def test_backups_get_requests_only_while_every_origin_is_down(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, c = servers
    edge = await make_edge(
        domains=domain([a.url, b.url], backup_origins=[c.url], health_check=health(fails=1))
    )
    assert set(await load(edge, clients=4, each=5, prefix="up")) == {200}
    assert c.requests == 0 and a.requests > 0 and b.requests > 0
    await a.kill()
    await until(lambda: not state(edge, a).up)
    assert set(await load(edge, clients=4, each=5, prefix="one")) == {200}
    assert c.requests == 0  # b is still up
    await b.kill()
    await until(lambda: not state(edge, b).up)
    response, body = await edge.get("/all-down")
    assert (response.status, body) == (200, b"c")
    assert c.seen["/all-down"] == 1


@pytest.mark.slow
async def test_hash_sends_each_key_to_one_origin(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, c = servers
    edge = await make_edge(domains=domain([a.url, b.url, c.url], balance="hash"))
    paths = [f"/item/{n}?v={n * 7}" for n in range(60)]
    for _ in range(3):
        for path in paths:
            response, _ = await edge.get(path)
            assert response.status == 200
    for path in paths:
        counts = sorted(server.seen[path] for server in servers)
        assert counts == [0, 0, 3], path  # all three requests at one server
    assert all(server.requests >= 5 for server in servers)  # and the keys spread


async def test_a_health_path_that_hangs_is_bounded_by_its_timeout(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, _ = servers
    a.health_hangs = True
    edge = await make_edge(
        domains=domain([a.url, b.url], health_check=health(timeout="200ms", interval="1s"))
    )
    config = edge.edge.upstreams._domains["example.com"]
    started = time.monotonic()
    passed = await edge.edge.upstreams.probe(config, state(edge, a), pool(edge))
    took = time.monotonic() - started
    assert not passed and 0.15 <= took < 1.0
    assert state(edge, a).last_failure == "the health check took over 0.2 s"
    await until(lambda: not state(edge, a).up)  # fails = 2 of them, from the probe task
    assert state(edge, b).up


async def test_while_every_origin_is_down_the_answer_is_503_with_retry_after(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, _ = servers
    edge = await make_edge(domains=domain([a.url, b.url], health_check=health(fails=1)))
    await a.kill()
    await b.kill()
    await until(lambda: not state(edge, a).up and not state(edge, b).up)
    response, body = await edge.get("/nothing")
    assert response.status == 503
    assert response.headers["Retry-After"] == "1"
    assert b"no origin server is up" in body


async def test_while_every_origin_is_down_stale_content_is_served_within_stale_if_error(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, _ = servers
    edge = await make_edge(
        domains=domain([a.url, b.url], stale_if_error=60, health_check=health(fails=1))
    )
    first, body = await edge.get("/cached/page")
    assert first.status == 200
    await a.kill()
    await b.kill()
    await until(lambda: not state(edge, a).up and not state(edge, b).up)
    edge.clock.advance(10)  # max-age=1: stale, within stale_if_error
    response, again = await edge.get("/cached/page")
    assert (response.status, again) == (200, body)
    assert "stale-if-error" in response.headers["Cache-Status"]
    missing, _ = await edge.get("/cached/never-stored")
    assert missing.status == 503


async def test_a_post_whose_connect_failed_is_retried_on_another_origin(
    make_edge: EdgeFactory, servers: list[Killable], caplog: pytest.LogCaptureFixture
) -> None:
    a = servers[0]
    dead = Refusing()
    edge = await make_edge(domains=domain([dead.url, a.url]))
    for n in range(4):
        response, body = await edge.get(f"/post/{n}", method="POST", data=b"order")
        assert (response.status, body) == (200, b"a")
    assert a.methods["POST"] == 4  # each once: nothing of them reached the dead one
    assert not state(edge, dead).up
    retries = [r.getMessage() for r in caplog.records if "retrying on" in r.getMessage()]
    assert retries and all(f"({dead.url}); retrying on {a.url}" in message for message in retries)


async def test_a_post_that_may_have_reached_an_origin_is_not_retried(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, _ = servers
    edge = await make_edge(domains=domain([a.url, b.url]))
    response, _ = await edge.get("/hangup", method="POST", data=b"order")
    assert response.status == 502
    assert a.methods["POST"] + b.methods["POST"] == 1  # sent once, never twice
    retried, _ = await edge.get("/hangup/get")
    assert retried.status == 502
    # A GET is retried on the other server, once: the only retry (decision 0046).
    assert (a.seen["/hangup/get"], b.seen["/hangup/get"]) == (1, 1)


async def test_one_layer_of_retry_a_put_reaches_the_origins_at_most_twice(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    """Decision 0046: a PUT (idempotent) whose connection breaks after it was sent is tried
    once more, on the other server; aiohttp's own retry of a broken connection is off, so it
    is not sent twice to each (four deliveries were seen)."""
    a, b, _ = servers
    edge = await make_edge(domains=domain([a.url, b.url]))
    response, _ = await edge.get("/hangup/put", method="PUT", data=b"order")
    assert response.status == 502
    assert a.methods["PUT"] + b.methods["PUT"] == 2


async def test_a_single_origin_gets_a_broken_get_once_more(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    """With no other server, a GET whose connection broke after sending is tried again on
    the same one (a keep-alive connection the server was closing, RFC 9112 §9.3.1): once."""
    a = servers[0]
    edge = await make_edge(domains=domain([a.url]))
    response, _ = await edge.get("/hangup/one")
    assert response.status == 502
    assert a.seen["/hangup/one"] == 2


async def test_one_slow_url_does_not_take_the_domain_down(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    """Decision 0046: a read timeout does not count against a server, and is not retried.
    Four GETs of a URL slower than read_timeout get 504 each, cost the origins one request
    each, and every other request of the domain is still answered (before: both servers
    were marked down, and every other miss got 503)."""
    a, b, _ = servers
    edge = await make_edge(domains=domain([a.url, b.url], read_timeout=0.3))
    answers = await asyncio.gather(*(edge.get(f"/slow/{n}") for n in range(4)))
    assert [response.status for response, _ in answers] == [504] * 4
    assert sum(a.seen[f"/slow/{n}"] + b.seen[f"/slow/{n}"] for n in range(4)) == 4
    assert state(edge, a).up and state(edge, b).up
    response, body = await edge.get("/fast")
    assert response.status == 200 and body in (b"a", b"b")


async def test_metrics_show_each_origin_server(
    make_edge: EdgeFactory, servers: list[Killable]
) -> None:
    a, b, _ = servers
    edge = await make_edge(domains=domain([a.url, b.url]))
    for n in range(4):
        await edge.get(f"/m/{n}")
    await a.kill()
    for n in range(4):
        await edge.get(f"/k/{n}")
    text = generate_latest(edge.telemetry.registry).decode()
    labels_a = f'domain="example.com",origin="{a.url}"'
    labels_b = f'domain="example.com",origin="{b.url}"'
    assert f"cdn_proxy_origin_server_up{{{labels_a}}} 0.0" in text
    assert f"cdn_proxy_origin_server_up{{{labels_b}}} 1.0" in text
    assert f"cdn_proxy_origin_server_errors_total{{{labels_a}}} 1.0" in text
    assert f"cdn_proxy_origin_server_requests_total{{{labels_b}}} {b.requests}.0" in text
