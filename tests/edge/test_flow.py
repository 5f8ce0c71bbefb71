"""Collapsing, a fill racing a clear, streaming large bodies, and origin failures."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import EdgeFactory, EdgeUnderTest, Origin
from tests.polling import until


class Gate:
    """An origin handler that holds every response until the test opens it."""

    def __init__(self, body: Callable[[int], bytes], headers: dict[str, str]) -> None:
        self.open = asyncio.Event()
        self.arrived = 0
        self._body = body
        self._headers = headers

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.arrived += 1
        number = self.arrived
        await self.open.wait()
        return web.Response(body=self._body(number), headers=self._headers)


async def collapse(
    edge: EdgeUnderTest, gate: Gate, target: str, count: int
) -> list[tuple[aiohttp.ClientResponse, bytes]]:
    """Send ``count`` requests for ``target`` at once, wait until one is at the origin and the
    rest wait on its flight, then let the origin answer; return what every client got."""
    requests = [asyncio.create_task(edge.get(target)) for _ in range(count)]
    await until(lambda: gate.arrived == 1)
    flight = edge.edge.flights.get(("example.com", 0, target))
    assert flight is not None
    await until(lambda: flight.waiters == count - 1)
    gate.open.set()
    return await asyncio.gather(*requests)


async def test_concurrent_misses_make_one_origin_request(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    gate = Gate(lambda n: f"version {n}".encode(), {"Cache-Control": "max-age=60"})
    origin.route("/hot", gate)
    results = await collapse(edge, gate, "/hot", 100)
    assert origin.count("/hot") == 1
    assert {body for _, body in results} == {b"version 1"}
    statuses = sorted(response.headers["Cache-Status"] for response, _ in results)
    assert statuses.count("cdn-proxy; fwd=uri-miss; collapsed") == 99
    assert statuses.count("cdn-proxy; fwd=uri-miss; stored") == 1
    assert len(edge.edge.flights) == 0


async def test_waiters_go_to_origin_when_the_answer_is_not_storable(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    gate = Gate(lambda n: f"for client {n}".encode(), {"Cache-Control": "private"})
    origin.route("/me", gate)
    results = await collapse(edge, gate, "/me", 10)
    assert origin.count("/me") == 10
    assert len({body for _, body in results}) == 10  # each client got its own answer


async def test_collapsed_waiters_share_an_origin_error(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    edge = await make_edge()
    hold = asyncio.Event()

    async def failing(request: web.Request) -> web.StreamResponse:
        await hold.wait()
        assert request.transport is not None
        request.transport.abort()  # the origin drops the connection without answering
        return web.Response()

    origin.route("/down", failing)
    requests = [asyncio.create_task(edge.get("/down")) for _ in range(5)]
    await until(lambda: origin.count("/down") == 1)
    flight = edge.edge.flights.get(("example.com", 0, "/down"))
    assert flight is not None
    await until(lambda: flight.waiters == 4)
    hold.set()
    results = await asyncio.gather(*requests)
    assert [r.status for r, _ in results] == [502] * 5
    # Only the leader asked (aiohttp's client retries an idempotent request once when the
    # connection drops); the four waiters got the leader's error, not an origin request each.
    assert origin.count("/down") <= 2


async def test_fill_racing_a_clear_is_never_stored_or_shared(
    edge: EdgeUnderTest, origin: Origin
) -> None:
    gate = Gate(lambda n: f"version {n}".encode(), {"Cache-Control": "max-age=60"})
    origin.route("/race", gate)
    before = asyncio.create_task(edge.get("/race"))
    await until(lambda: gate.arrived == 1)

    result = await edge.store.clear_domain("example.com")
    assert result.generation == 1

    after = asyncio.create_task(edge.get("/race"))  # asked after the clear
    await until(lambda: gate.arrived == 2)  # did not join the old fill: it asked the origin
    gate.open.set()
    (_, old_body), (after_response, new_body) = await asyncio.gather(before, after)
    assert old_body == b"version 1"
    assert new_body == b"version 2"
    assert after_response.headers["Cache-Status"] == "cdn-proxy; fwd=uri-miss; stored"
    # The old fill was not stored under the new generation.
    assert edge.store.held(("example.com", 0, "/race")) is None
    response, body = await edge.get("/race")
    assert body == b"version 2"
    assert "hit" in response.headers["Cache-Status"]


async def test_large_body_streams_through_without_being_buffered(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    edge = await make_edge(cache={"max_bytes": "1MiB", "max_object_bytes": "64KiB"})
    first_part = b"a" * 200_000
    rest_released = asyncio.Event()

    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "max-age=60"})
        await response.prepare(request)
        await response.write(first_part)
        await rest_released.wait()  # only after the client has seen the first part
        await response.write(b"b" * 300_000)
        await response.write_eof()
        return response

    origin.route("/big", big)
    async with edge.client.get(edge.url + "/big", headers={"Host": "example.com"}) as response:
        assert response.status == 200
        assert response.headers["Cache-Status"] == 'cdn-proxy; fwd=uri-miss; detail="too-large"'
        received = await response.content.readexactly(len(first_part))
        assert received == first_part  # arrived while the origin was still holding the rest
        rest_released.set()
        rest = await response.read()
    assert rest == b"b" * 300_000
    assert (await edge.store.stats()).entries == 0


async def test_declared_large_body_is_not_stored(make_edge: EdgeFactory, origin: Origin) -> None:
    edge = await make_edge(cache={"max_bytes": "1MiB", "max_object_bytes": "64KiB"})
    origin.reply("/large", b"x" * 100_000, headers={"Cache-Control": "max-age=60"})
    response, body = await edge.get("/large")
    assert len(body) == 100_000
    assert response.headers["Content-Length"] == "100000"
    response, _ = await edge.get("/large")
    assert "hit" not in response.headers["Cache-Status"]
    assert origin.count("/large") == 2


async def test_origin_timeout_is_504(make_edge: EdgeFactory, origin: Origin) -> None:
    edge = await make_edge(
        domains=[{"name": "example.com", "origin": origin.url, "read_timeout": 0.2}]
    )
    never = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await never.wait()
        return web.Response(text="too late")

    origin.route("/slow", slow)
    response, body = await edge.get("/slow")
    assert response.status == 504
    assert body == b"504 Gateway Timeout: the origin did not answer in time\n"
    assert response.headers["Cache-Control"] == "no-store"
    never.set()


async def test_origin_unreachable_is_502(make_edge: EdgeFactory) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    edge = await make_edge(domains=[{"name": "example.com", "origin": f"http://127.0.0.1:{port}"}])
    response, body = await edge.get("/x")
    assert response.status == 502
    assert body == b"502 Bad Gateway: the origin is unreachable\n"


@pytest.fixture
async def raw_origin() -> AsyncIterator[Callable[[bytes], Awaitable[str]]]:
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


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nCache-Control: max-age=60\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        b"HTTP/1.1 2xx Broken\r\n\r\n",
        b"not http at all\r\n\r\n",
        b"",
    ],
)
async def test_broken_origin_framing_is_502(
    make_edge: EdgeFactory,
    raw_origin: Callable[[bytes], Awaitable[str]],
    answer: bytes,
) -> None:
    url = await raw_origin(answer)
    edge = await make_edge(domains=[{"name": "example.com", "origin": url}])
    response, body = await edge.get("/broken")
    assert response.status == 502
    assert body == b"502 Bad Gateway: the origin sent a broken response\n"
    assert (await edge.store.stats()).entries == 0


@pytest.mark.slow
async def test_broken_framing_after_streaming_started_aborts_the_connection(
    make_edge: EdgeFactory, raw_origin: Callable[[bytes], Awaitable[str]]
) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 500000\r\nCache-Control: max-age=60\r\n\r\n"
    url = await raw_origin(head + b"x" * 100_000)  # then closes, 400,000 bytes short
    edge = await make_edge(
        cache={"max_bytes": "1MiB", "max_object_bytes": "64KiB"},
        domains=[{"name": "example.com", "origin": url}],
    )
    with pytest.raises(aiohttp.ClientPayloadError):
        await edge.get("/cut")
    assert (await edge.store.stats()).entries == 0
