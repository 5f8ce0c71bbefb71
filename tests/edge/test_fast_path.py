"""The fresh-hit fast path (``Edge.handle`` and ``respond.Hit``): it writes precomputed bytes
to the socket, so these tests read the socket. A fast hit must send exactly what the full
path sends for the same request (but for Age), and every request the fast path does not
fit must still get the full path's answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.test_utils import RawTestServer

from proxy.core.cache.entry import StoredResponse
from proxy.edge import respond
from tests.conftest import FakeClock, Origin
from tests.edge.conftest import ClockedEdge


@dataclass
class Reply:
    status_line: str
    headers: list[tuple[str, str]]
    body: bytes

    def field(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        return values[0] if values else None

    def without(self, *names: str) -> list[tuple[str, str]]:
        lowered = {name.lower() for name in names}
        return sorted((key, value) for key, value in self.headers if key.lower() not in lowered)


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("utf-8")
    status_line, *lines = head[:-4].split("\r\n")
    headers = [(name, value) for name, _, value in (line.partition(": ") for line in lines)]
    length = next(int(value) for name, value in headers if name.lower() == "content-length")
    return Reply(status_line, headers, await reader.readexactly(length))


@dataclass
class Wire:
    """The edge on a real listener, spoken to over raw sockets, recording which kind of
    response object answered each request."""

    port: int
    clock: FakeClock
    kinds: list[type[web.StreamResponse]]

    async def exchange(self, *requests: bytes, to_end: bool = False) -> tuple[list[Reply], bytes]:
        """The replies to ``requests``, and with ``to_end`` what follows them until the edge
        closes the connection."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            # A bound, not a wait: an edge that keeps a connection open it should close
            # fails the test instead of hanging it.
            async with asyncio.timeout(10):
                writer.write(b"".join(requests))  # pipelined when there are several
                await writer.drain()
                replies = [await read_reply(reader) for _ in requests]
                return replies, await reader.read() if to_end else b""
        finally:
            writer.close()
            await writer.wait_closed()

    async def get(self, path: str, *extra: str, version: str = "1.1") -> Reply:
        lines = [f"GET {path} HTTP/{version}", "Host: example.com", *extra, "", ""]
        replies, _ = await self.exchange("\r\n".join(lines).encode())
        return replies[0]


@pytest.fixture
async def wire(
    clocked_edge: ClockedEdge, aiohttp_raw_server: Callable[..., Awaitable[RawTestServer]]
) -> Wire:
    kinds: list[type[web.StreamResponse]] = []

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        response = await clocked_edge.edge.handle(request)
        kinds.append(type(response))
        return response

    server = await aiohttp_raw_server(handle)
    return Wire(port=server.port or 0, clock=clocked_edge.clock, kinds=kinds)


ORIGIN_ANSWERS: dict[str, tuple[int, bytes, dict[str, str]]] = {
    "plain": (200, b"x" * 1024, {"Cache-Control": "max-age=600", "Content-Type": "text/css"}),
    "no-content-type": (200, b"body", {"Cache-Control": "max-age=600"}),
    # Past aiohttp_adapter.JOINED_BODY_MAX: head and body are written as two buffers.
    "large": (200, bytes(range(256)) * 400, {"Cache-Control": "max-age=600"}),
    "empty": (200, b"", {"Cache-Control": "max-age=600"}),
    "not-found": (404, b"gone", {"Cache-Control": "max-age=600"}),
    "redirect": (301, b"", {"Cache-Control": "max-age=600", "Location": "/elsewhere"}),
    "validators": (
        200,
        b"v",
        {
            "Cache-Control": "public, max-age=600",
            "ETag": '"abc"',
            "Last-Modified": "Mon, 13 Nov 2023 22:13:20 GMT",
            "X-Unicode": "caf\u00e9",
            "Server": "origin/1.0",
        },
    ),
}


@pytest.mark.parametrize("name", sorted(ORIGIN_ANSWERS))
async def test_a_fast_hit_sends_what_the_full_path_sends(
    wire: Wire, origin: Origin, name: str
) -> None:
    status, body, headers = ORIGIN_ANSWERS[name]
    origin.reply(f"/{name}", body, status=status, headers=headers)
    await wire.get(f"/{name}")  # the miss that stores it
    wire.clock.advance(7)
    fast = await wire.get(f"/{name}")
    # A request Cache-Control keeps a request off the fast path; max-age=3600 still lets the
    # stored response answer, through the full rules (respond.from_stored).
    full = await wire.get(f"/{name}", "Cache-Control: max-age=3600")
    assert wire.kinds[1:] == [respond.Hit, web.Response]
    assert fast.status_line == full.status_line == f"HTTP/1.1 {status} {fast.status_line[13:]}"
    assert fast.without("Date") == full.without("Date")
    assert fast.field("Age") == "7"
    assert fast.field("Cache-Status") == "cdn-proxy; hit"
    assert fast.field("Via") == "1.1 cdn-proxy"
    assert fast.field("Content-Length") == str(len(body))
    assert fast.body == full.body == body
    assert origin.count(f"/{name}") == 1


async def test_hits_pipelined_on_one_connection_answer_in_order(wire: Wire, origin: Origin) -> None:
    for name in ("a", "b", "c"):
        origin.reply(f"/{name}", name.encode() * 100, headers={"Cache-Control": "max-age=60"})
        await wire.get(f"/{name}")
    requests = [f"GET /{name} HTTP/1.1\r\nHost: example.com\r\n\r\n".encode() for name in "cab"]
    replies, _ = await wire.exchange(*requests)
    assert [reply.body for reply in replies] == [b"c" * 100, b"a" * 100, b"b" * 100]
    assert wire.kinds[-3:] == [respond.Hit] * 3
    assert all(origin.count(f"/{name}") == 1 for name in "abc")


async def test_a_request_that_closes_the_connection_takes_the_full_path(
    wire: Wire, origin: Origin
) -> None:
    origin.reply("/c", b"body", headers={"Cache-Control": "max-age=60"})
    await wire.get("/c")
    replies, rest = await wire.exchange(
        b"GET /c HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n", to_end=True
    )
    assert replies[0].body == b"body"
    assert replies[0].field("Connection") == "close"
    assert replies[0].field("Cache-Status") == "cdn-proxy; hit"
    assert rest == b""  # and the edge closed it
    assert wire.kinds[-1] is web.Response


async def test_an_http_1_0_request_gets_an_http_1_0_answer(wire: Wire, origin: Origin) -> None:
    origin.reply("/old", b"body", headers={"Cache-Control": "max-age=60"})
    await wire.get("/old")
    reply = await wire.get("/old", version="1.0")
    assert reply.status_line == "HTTP/1.0 200 OK"
    assert reply.body == b"body"
    assert reply.field("Cache-Status") == "cdn-proxy; hit"
    assert wire.kinds[-1] is web.Response
    assert origin.count("/old") == 1


async def test_a_refreshed_entry_sends_its_new_fields(wire: Wire, origin: Origin) -> None:
    """After a 304 updates the stored fields, fast hits send the new ones, never the old."""
    answers = iter(
        [
            web.Response(body=b"v1", headers={"Cache-Control": "max-age=5", "ETag": '"1"'}),
            web.Response(status=304, headers={"Cache-Control": "max-age=60", "ETag": '"1"'}),
        ]
    )

    async def handler(request: web.Request) -> web.StreamResponse:
        return next(answers)

    origin.route("/r", handler)
    await wire.get("/r")
    wire.clock.advance(10)
    await wire.get("/r")  # stale: revalidated, 304
    fast = await wire.get("/r")
    assert wire.kinds[-1] is respond.Hit
    assert fast.field("Cache-Control") == "max-age=60"
    assert fast.body == b"v1"
    assert origin.count("/r") == 2


# -- which entries get the lines of a fast hit (respond.hit_lines) ------------------------------


def stored(status: int = 200, body: bytes = b"body", **fields: str) -> StoredResponse:
    headers = tuple((name.replace("_", "-"), value) for name, value in fields.items())
    return StoredResponse(
        status=status,
        reason="OK",
        headers=headers,
        body=body,
        birth=0.0,
        freshness_lifetime=60.0,
    )


DATE = "Mon, 13 Nov 2023 22:13:20 GMT"


def test_the_tail_adds_what_aiohttp_would_add() -> None:
    made = respond.hit_lines(stored(Date=DATE), via="edge", status="edge; hit")
    assert made is not None
    *head, tail = made
    assert head == [b"HTTP/1.1 200 OK\r\n", f"Date: {DATE}\r\n".encode()]
    assert tail == (
        b"Via: 1.1 edge\r\nCache-Status: edge; hit\r\n"
        b"Content-Type: application/octet-stream\r\n"
        + f"Server: {SERVER_SOFTWARE}\r\n".encode()
        + b"Content-Length: 4\r\n"
    )


def test_lines_are_shared_by_entries_that_repeat_them() -> None:
    one = respond.hit_lines(stored(Date=DATE, Server="s"), via="edge", status="edge; hit")
    two = respond.hit_lines(stored(Date=DATE, Server="s"), via="edge", status="edge; hit")
    assert one is not None and two is not None
    assert one == two
    assert all(a is b for a, b in zip(one, two, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize(
    "entry",
    [
        stored(Server="s"),  # no Date: aiohttp stamps the time of each answer
        stored(Date=DATE, Via="1.0 upstream"),  # merged with ours by the full path
        stored(Date=DATE, Cache_Status="upstream; hit"),
        stored(Date=DATE, Content_Length="5"),  # not the body's length
        stored(204, b"", Date=DATE),  # no body
        stored(Date=DATE, X_Bad="a\x00b"),  # cannot be written back
    ],
)
def test_entries_the_full_path_must_answer_get_no_bytes(entry: StoredResponse) -> None:
    assert respond.hit_lines(entry, via="edge", status="edge; hit") is None
