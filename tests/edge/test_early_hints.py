"""Interim answers (RFC 9110 §15.2, RFC 8297 Early Hints) from the origin: relayed to the
client before the final answer, on the fill and forwarded paths, over HTTP/1.1 and HTTP/2;
never stored, never merged into the final answer, never sent to an HTTP/1.0 client
(proxy/edge/interim.py, decision 0049). The origin is a raw one that writes the 103 itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import cast

import aiohttp
import pytest
from aiohttp import web
from h2.events import Event, InformationalResponseReceived, ResponseReceived

from proxy.edge.aiohttp_adapter import INTERIM, InterimResponse
from proxy.edge.interim import interim_fields, relayed_to, status_line
from proxy.process.service import running
from tests.conftest import EdgeFactory, EdgeUnderTest
from tests.edge.h2_support import RawH2
from tests.edge.tls_support import Certificates, pair_keys, tls_config
from tests.security.support import OriginRequest, RawOrigin, exchange, ok

HINT = b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
HOST = b"Host: example.com\r\n"

RawOriginFactory = Callable[[Callable[[OriginRequest], bytes | None]], Awaitable[RawOrigin]]


@pytest.fixture
async def raw_origin() -> AsyncIterator[RawOriginFactory]:
    started: list[RawOrigin] = []

    async def start(respond: Callable[[OriginRequest], bytes | None]) -> RawOrigin:
        server = RawOrigin(respond)
        await server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop()


def hinted(body: bytes = b"page", *, hint: bytes = HINT, cache: str = "max-age=60") -> bytes:
    return hint + ok(body, cache)


async def edge_for(make_edge: EdgeFactory, server: RawOrigin, **domain: object) -> EdgeUnderTest:
    return await make_edge(domains=[{"name": "example.com", "origin": server.url, **domain}])


def get(path: str, version: bytes = b"1.1", method: bytes = b"GET", extra: bytes = b"") -> bytes:
    return b"%s %s HTTP/%s\r\n%sConnection: close\r\n%s\r\n" % (
        method,
        path.encode(),
        version,
        HOST,
        extra,
    )


async def test_a_103_reaches_the_client_first_and_is_never_stored(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    server = await raw_origin(lambda request: hinted())
    edge = await edge_for(make_edge, server)
    first = await exchange(edge.url, get("/page"))
    assert first.statuses == [103, 200]
    hint, final = first.responses
    assert hint.header("Link") == "</s.css>; rel=preload"
    assert hint.header("Via") is not None
    assert (final.body, final.header("Link")) == (b"page", None)  # nothing of the 103 merged
    stored = (await edge.store.lookup("example.com", "/page")).variants
    assert stored and all(entry.status == 200 for entry in stored)
    assert all("link" not in (n.lower() for n, _ in entry.headers) for entry in stored)
    # A hit: the 200 as stored, and no 103 from the store (interim-not-cached).
    second = await exchange(edge.url, get("/page"))
    assert second.statuses == [200]
    assert "hit" in (second.responses[0].header("Cache-Status") or "")
    assert second.responses[0].header("Link") is None
    assert len(server.requests) == 1


async def test_the_forwarded_path_relays_every_interim_answer_but_100(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    interims = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n" + HINT
    server = await raw_origin(lambda request: hinted(hint=interims, cache="no-store"))
    edge = await edge_for(make_edge, server)
    answer = await exchange(edge.url, get("/form", method=b"POST", extra=b"Content-Length: 0\r\n"))
    assert answer.statuses == [102, 103, 200]


async def test_hop_by_hop_and_tag_fields_stay_behind(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    hint = (
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.js>; rel=preload; as=script\r\n"
        b"Connection: X-Secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\n"
        b"Surrogate-Key: page\r\nVia: 1.1 inner\r\n\r\n"
    )
    server = await raw_origin(lambda request: hinted(hint=hint))
    edge = await edge_for(make_edge, server, tag_headers=["Surrogate-Key"])
    answer = await exchange(edge.url, get("/page"))
    relayed = answer.responses[0]
    names = {name.lower() for name, _ in relayed.headers}
    assert names == {"link", "via"}
    assert (relayed.header("Via") or "").startswith("1.1 inner, 1.1 ")


async def test_an_http10_client_gets_no_interim_answer(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    server = await raw_origin(lambda request: hinted())
    edge = await edge_for(make_edge, server)
    answer = await exchange(edge.url, get("/page", version=b"1.0"))
    assert answer.statuses == [200]


async def test_a_background_revalidation_relays_nothing(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    cache = "max-age=1, stale-while-revalidate=60"
    server = await raw_origin(lambda request: hinted(cache=cache))
    edge = await edge_for(make_edge, server)
    assert (await exchange(edge.url, get("/page"))).statuses == [103, 200]
    edge.clock.advance(5)
    stale = await exchange(edge.url, get("/page"))
    assert stale.statuses == [200]  # the 103 of the revalidation is for no one
    assert "stale-while-revalidate" in (stale.responses[0].header("Cache-Status") or "")


async def test_over_http2_a_103_is_a_headers_frame_before_the_answer(
    tmp_path: Path, raw_origin: RawOriginFactory
) -> None:
    server = await raw_origin(lambda request: hinted())
    certs = Certificates(tmp_path)
    config = tls_config(
        tmp_path, server.url, edge={**pair_keys(certs.issue("example.com")), "h2c": True}
    )
    async with running(config) as service:
        client = await RawH2.open(service.edge_url)
        stream = client.request("/page")
        events: list[Event] = []
        while not client.answers[stream].ended:
            events += await client.read_events()
        kinds = [type(event) for event in events if getattr(event, "stream_id", 0) == stream]
        assert kinds.index(InformationalResponseReceived) < kinds.index(ResponseReceived)
        interim = [
            {str(k): str(v) for k, v in event.headers or []}
            for event in events
            if isinstance(event, InformationalResponseReceived)
        ]
        answer = client.answers[stream]
        assert [fields[":status"] for fields in interim] == ["103"]
        assert interim[0]["link"] == "</s.css>; rel=preload"
        assert (answer.status, answer.body, "link" in answer.headers) == (200, b"page", False)
        # The hit sends no 103.
        again = client.request("/page")
        hit = await client.answer(again)
        assert hit.status == 200 and "hit" in hit.headers["cache-status"]
        await client.close()
    assert len(server.requests) == 1


# -- the pieces ------------------------------------------------------------------------------


async def test_aiohttp_reads_interim_answers_through_the_protocol_read(
    raw_origin: RawOriginFactory,
) -> None:
    """The adapter's assumption (aiohttp_adapter.InterimResponse): ``ClientResponse.start``
    reads each message, 1xx included, through ``_protocol.read()``; without the hook aiohttp
    drops them, with it each is told in order, and the final answer is unchanged."""
    server = await raw_origin(
        lambda request: hinted(hint=b"HTTP/1.1 102 Processing\r\n\r\n" + HINT)
    )
    told: list[tuple[int, tuple[tuple[str, str], ...]]] = []

    async def hook(status: int, fields: tuple[tuple[str, str], ...]) -> None:
        told.append((status, fields))

    async with aiohttp.ClientSession(response_class=InterimResponse) as session:
        async with session.get(server.url + "/") as response:
            assert (response.status, await response.read()) == (200, b"page")
        assert told == []
        token = INTERIM.set(hook)
        try:
            async with session.get(server.url + "/") as response:
                assert (response.status, await response.read()) == (200, b"page")
                assert "Link" not in response.headers
        finally:
            INTERIM.reset(token)
    assert told == [(102, ()), (103, (("Link", "</s.css>; rel=preload"),))]


def test_interim_fields_and_status_lines() -> None:
    fields = (("Link", "</a>"), ("Connection", "close"), ("Cache-Tag", "x"), ("Via", "1.1 o"))
    assert interim_fields(fields, via="edge", tag_headers=frozenset({"cache-tag"})) == (
        ("Link", "</a>"),
        ("Via", "1.1 o, 1.1 edge"),
    )
    assert status_line(103) == b"HTTP/1.1 103 Early Hints\r\n"
    assert status_line(199) == b"HTTP/1.1 199 Informational\r\n"


def test_the_relay_closes_when_its_scope_ends() -> None:
    """A task started within ``relayed_to`` keeps the hook in its context, closed after."""

    class Request:
        version = aiohttp.HttpVersion11
        writer = object()

    request = cast(web.BaseRequest, Request())
    with relayed_to(request, via="edge") as relay:
        assert relay is not None and INTERIM.get() is relay
    assert INTERIM.get() is None and not relay.open
    Request.version = aiohttp.HttpVersion10
    with relayed_to(request, via="edge") as none:
        assert none is None and INTERIM.get() is None
