"""What ``proxy.edge.aiohttp_adapter`` assumes about aiohttp, each assumption asserted against
the aiohttp installed. When one of these fails after an upgrade, the adapter is what must
change (or the upgrade wait): see the module's docstring and decision 0013."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import socket
import ssl
import sys
import tomllib
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.client_proto import ResponseHandler
from aiohttp.connector import Connection
from aiohttp.helpers import HeadersMixin
from aiohttp.test_utils import RawTestServer
from multidict import CIMultiDict

from proxy.edge.aiohttp_adapter import (
    OriginConnector,
    Prewritten,
    answer_and_close,
    plain_writer,
    request_head,
    sent_beside,
    take_over,
)
from proxy.edge.aiohttp_h2 import BodyFlow, body_reader, h2_request, unread
from proxy.edge.aiohttp_server import (
    H2C_REFUSED,
    GuardedAppRunner,
    GuardedRequestHandler,
    GuardedServer,
)
from proxy.edge.connections import ConnectionGuard
from proxy.edge.handshakes import HandshakeTimedSite
from tests.edge.tls_support import Certificates
from tests.polling import until

MESSAGE = (
    b"HTTP/1.1 200 OK\r\n",
    b"Content-Type: text/plain\r\n",
    b"Content-Length: 4\r\n\r\n",
    b"body",
)

RawServer = Callable[..., Awaitable[RawTestServer]]


async def exchange(port: int, request: bytes, length: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        async with asyncio.timeout(10):  # a bound, not a wait
            writer.write(request)
            await writer.drain()
            return await reader.readexactly(length)
    finally:
        writer.close()
        await writer.wait_closed()


GET = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"

# -- the server side: what aiohttp's request loop does with a response ------------------------


class Recorded(Prewritten):
    """Records every attribute that aiohttp reads on the response, but for StreamResponse's
    own methods reading their object."""

    reads: Counter[str]

    def __getattribute__(self, name: str) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("aiohttp.") and caller != "aiohttp.web_response":
            object.__getattribute__(self, "reads")[name] += 1
        return object.__getattribute__(self, name)


async def test_the_request_loop_asks_a_response_only_for_prepare_write_eof_and_keep_alive(
    aiohttp_raw_server: RawServer,
) -> None:
    """Prewritten answers everything a response is asked, but its cost was measured on this
    loop: a new read on the hit path would be a new cost, and must be looked at."""
    responses: list[Recorded] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        response = Recorded(MESSAGE)
        response.reads = Counter()
        responses.append(response)
        return response

    server = await aiohttp_raw_server(handler, access_log=None)
    assert await exchange(server.port or 0, GET + GET, 2 * len(b"".join(MESSAGE))) == (
        b"".join(MESSAGE) * 2
    )
    for response in responses:
        assert response.reads == {
            "__http_exception__": 1,  # getattr with a default: a deprecation check
            "prepare": 1,
            "write_eof": 1,
            "keep_alive": 1,
        }


def test_stream_response_sets_only_what_prewritten_computes() -> None:
    """Prewritten skips StreamResponse.__init__: the four attributes it sets are computed
    from the message instead, and everything else a response reads must have a class-level
    default, or a Prewritten would raise AttributeError where a response answers."""
    assert set(vars(web.StreamResponse())) == {"_state", "_headers", "_status", "_reason"}
    for name in ("_state", "_headers", "_status", "_reason", "_eof_sent"):
        assert isinstance(inspect.getattr_static(Prewritten, name), property)
    source = inspect.getsource(web.StreamResponse) + inspect.getsource(HeadersMixin)
    read = set(re.findall(r"self\.(_[a-z]\w*)", source))
    assert read, "the scan found nothing: StreamResponse's source moved"
    assert sorted(name for name in read if not hasattr(Prewritten, name)) == []


@pytest.mark.parametrize(
    "head",
    [
        b"GET /a?b=%41 HTTP/1.1\r\nHost: a\r\nX-One: 1\r\nx-one: 2\r\n\r\n",
        b"GET /keep HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
        b"HEAD /c HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        b"GET /d HTTP/1.0\r\nHost: a\r\n\r\n",
        b"POST /e HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
    ],
)
async def test_request_head_has_what_the_request_properties_say(
    aiohttp_raw_server: RawServer, head: bytes
) -> None:
    """The fast path reads the head's fields in place of these properties (request_head)."""
    seen: list[tuple[object, ...]] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        message = request_head(request)
        seen.append(
            (
                (message.method, message.version, not message.should_close, message.path),
                (request.method, request.version, request.keep_alive, request.raw_path),
                message.headers is request.headers,
            )
        )
        return web.Response(body=b"ok")

    server = await aiohttp_raw_server(handler, access_log=None)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port or 0)
    try:
        async with asyncio.timeout(10):  # a bound, not a wait
            writer.write(head)
            await writer.drain()
            assert (await reader.readuntil(b"\r\n")).endswith(b" 200 OK\r\n")
    finally:
        writer.close()
        await writer.wait_closed()
    [(from_head, from_request, same_headers)] = seen
    assert from_head == from_request
    assert same_headers


async def test_the_request_writer_has_sent_nothing_when_a_response_is_prepared(
    aiohttp_raw_server: RawServer,
) -> None:
    """Prewritten writes to the transport beside the request's writer: that is only the
    whole message if aiohttp has buffered nothing for the request in that writer."""
    seen: list[tuple[int, int]] = []

    class Watched(Prewritten):
        async def prepare(self, request: web.BaseRequest) -> Any:
            writer = request.writer
            seen.append((writer.buffer_size, writer.output_size))
            return await super().prepare(request)

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        return Watched(MESSAGE)

    server = await aiohttp_raw_server(handler, access_log=None)
    assert await exchange(server.port or 0, GET, len(b"".join(MESSAGE))) == b"".join(MESSAGE)
    assert seen == [(0, 0)]


@pytest.mark.slow
async def test_drain_waits_while_the_client_reads_nothing(
    aiohttp_raw_server: RawServer,
) -> None:
    """``request.writer.drain()`` is aiohttp's flow control: it returns at once while the
    socket's buffer is low, and waits while it is above the high-water mark. A prepare that
    did not wait would let a client that never reads grow the buffer without bound."""
    body = b"x" * (32 * 1024 * 1024)  # more than the kernel's socket buffers hold
    message = (b"HTTP/1.1 200 OK\r\n", f"Content-Length: {len(body)}\r\n\r\n".encode(), body)
    started, finished = asyncio.Event(), asyncio.Event()

    class Watched(Prewritten):
        async def prepare(self, request: web.BaseRequest) -> Any:
            started.set()
            result = await super().prepare(request)
            finished.set()
            return result

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        return Watched(message)

    server = await aiohttp_raw_server(handler, access_log=None)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port or 0)
    try:
        writer.write(GET)
        await until(started.is_set)
        # prepare runs to its end in the step that started it unless drain waits.
        assert not finished.is_set()
        async with asyncio.timeout(30):  # a bound, not a wait
            received = await reader.readexactly(len(b"".join(message)))
            await finished.wait()
        assert received == b"".join(message)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_answer_and_close_sends_the_answer_then_closes_without_lingering(
    aiohttp_raw_server: RawServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A request whose body stopped: the answer arrives whole, then the connection closes at
    once, although aiohttp would otherwise linger 10 s reading the body, and nothing is
    logged as an error."""
    answered = asyncio.Event()

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        response = web.Response(status=408, text="stopped")
        await answer_and_close(request, response)
        answered.set()
        return response

    server = await aiohttp_raw_server(handler, lingering_time=10.0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port or 0)
    try:
        writer.write(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
        async with asyncio.timeout(3):  # well below lingering_time: a bound, not a wait
            received = await reader.read()  # to EOF
        assert received.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert received.endswith(b"\r\n\r\nstopped")
        assert answered.is_set()
    finally:
        writer.close()
        await writer.wait_closed()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


# -- the client side: OriginConnector ------------------------------------------------------------


def test_connect_has_the_signature_origin_connector_overrides() -> None:
    expected = ["self", "req", "traces", "timeout"]
    assert list(inspect.signature(aiohttp.TCPConnector.connect).parameters) == expected
    assert list(inspect.signature(OriginConnector.connect).parameters) == expected
    assert isinstance(inspect.getattr_static(Connection, "protocol"), property)
    assert isinstance(inspect.getattr_static(ResponseHandler, "should_close"), property)


async def test_an_idle_client_connection_that_receives_bytes_should_close() -> None:
    """What OriginConnector reads: bytes arriving on a connection no request is waiting on
    make aiohttp's client protocol say it should close."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    transport, protocol = await loop.create_connection(lambda: ResponseHandler(loop), sock=ours)
    try:
        assert not protocol.should_close
        theirs.send(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON")
        await until(lambda: protocol.should_close)
    finally:
        transport.close()
        theirs.close()


# -- the pin -------------------------------------------------------------------------------------


def test_aiohttp_is_pinned_to_the_minor_version_these_tests_ran_on() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = [pin for pin in pyproject["project"]["dependencies"] if pin.startswith("aiohttp>")]
    major, minor = (int(part) for part in aiohttp.__version__.split(".")[:2])
    assert pins == [f"aiohttp>={major}.{minor},<{major}.{minor + 1}"]


# -- GuardedServer: the connection guard's hooks in aiohttp's server protocol ------------------


def guard(*, limit: int = 10, header_timeout: float = 30.0) -> ConnectionGuard:
    return ConnectionGuard(
        "edge", limit=limit, header_timeout=header_timeout, keepalive_timeout=60.0
    )


async def guarded(
    handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], guard_: ConnectionGuard
) -> tuple[web.ServerRunner, GuardedServer, int]:
    server = GuardedServer(handler, guard=guard_, access_log=None)
    runner = web.ServerRunner(server, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, server, runner.addresses[0][1]


async def answer(request: web.BaseRequest) -> web.StreamResponse:
    return web.Response(text="ok")


def test_the_request_handler_keeps_the_state_the_guard_reads() -> None:
    """Private names GuardedRequestHandler reads: present as slots of aiohttp's class."""
    slots = set(web.RequestHandler.__slots__)
    assert {"_messages", "_waiter", "_request_count", "_request_in_progress"} <= slots
    assert "_make_server" in vars(web.AppRunner)


async def test_the_server_builds_its_protocols_from_its_kwargs() -> None:
    server = GuardedServer(answer, guard=guard(), access_log=None)
    assert server._kwargs == {"keepalive_timeout": 60.0, "access_log": None}
    assert server._loop is asyncio.get_running_loop()
    protocol = server()
    assert isinstance(protocol, GuardedRequestHandler)
    assert protocol.keepalive_timeout == 60.0


async def test_a_request_is_parsed_into_messages_while_the_loop_waits_on_waiter() -> None:
    """The states the header timeout tells apart: waiting for a head (``_waiter`` pending,
    ``_messages`` empty, ``_request_count`` 0 before the first), and handling a request
    (``_waiter`` None, ``_request_in_progress``)."""
    seen: list[tuple[object, bool]] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        protocol = request.protocol
        seen.append((protocol._waiter, protocol._request_in_progress))
        return web.Response(text="ok")

    runner, server, port = await guarded(handler, guard())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await until(lambda: bool(server.connections) and server.connections[0]._waiter is not None)
        protocol = server.connections[0]
        writer.write(b"GET / HTTP/1.1\r\nHost: a")
        await until(lambda: protocol._request_count == 0 and not protocol._messages)
        writer.write(b"\r\n\r\n")
        async with asyncio.timeout(5):
            assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200 ")
        assert seen == [(None, True)]
        assert protocol._request_count == 1
        writer.close()
    finally:
        await runner.cleanup()


async def test_a_parse_error_reaches_the_guard_and_logs_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp hands a parse error to ``handle_error`` and ``log_exception`` as an
    HttpProcessingError: the guard counts it, and aiohttp's ERROR line is not written."""
    guard_ = guard()
    runner, _, port = await guarded(answer, guard_)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n")
        async with asyncio.timeout(5):
            assert (await reader.read()).split(b" ", 2)[1] == b"400"
        writer.close()
    finally:
        await runner.cleanup()
    assert guard_.bad_requests == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_an_h2c_preface_is_refused_with_505_and_no_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 22 item 8: an HTTP/2 client with prior knowledge on the plain listener made
    aiohttp's "Pause on PRI/Upgrade" a 400 and a malformed-request line. It is answered 505
    and closed; the guard does not count it and nothing is logged."""
    guard_ = guard()
    runner, _, port = await guarded(answer, guard_)
    caplog.set_level(logging.DEBUG)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        async with asyncio.timeout(5):
            answer_ = await reader.read()  # to the end: the connection is closed
        writer.close()
    finally:
        await runner.cleanup()
    head, _, body = answer_.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ", 1)[1] == b"505 HTTP Version Not Supported"
    assert body.decode() == H2C_REFUSED
    assert guard_.bad_requests == 0
    assert [r.getMessage() for r in caplog.records if r.name.startswith("aiohttp")] == []


async def test_pre_shutdown_closes_an_idle_connection_at_once() -> None:
    """aiohttp's pre_shutdown calls ``close()`` on every connection; an idle one closes then,
    not at the runner's final timeout."""
    guard_ = guard()
    runner, server, port = await guarded(answer, guard_)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await until(lambda: guard_.open == 1)
        server.pre_shutdown()
        async with asyncio.timeout(5):
            assert await reader.read() == b""
            await guard_.none_open()
        writer.close()
    finally:
        await runner.cleanup()


async def test_the_app_runner_makes_a_guarded_server() -> None:
    app = web.Application()
    runner = GuardedAppRunner(app, guard=guard())
    await runner.setup()
    try:
        assert isinstance(runner.server, GuardedServer)
        assert runner.server.request_factory == app._make_request
    finally:
        await runner.cleanup()


# -- take_over: a tunnelled connection's bytes after a 101 (decision 0022) ---------------------


class TunnelEcho:
    """A handler that switches protocols (101), takes the connection over, and echoes what
    the client sends until it closes; ``go`` holds its reading back."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.go.set()
        self.ended = asyncio.Event()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse(
            status=101, headers={"Connection": "upgrade", "Upgrade": request.headers["Upgrade"]}
        )
        response.force_close()
        reader = take_over(request)
        await response.prepare(request)
        await self.go.wait()
        while chunk := await reader.readany():
            await response.write(chunk)
        self.ended.set()
        return response


def upgrade_head(protocol: str) -> bytes:
    return (
        f"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: {protocol}\r\n\r\n".encode()
    )


@pytest.mark.parametrize("protocol", ["websocket", "echo/1"])
async def test_a_taken_over_connection_carries_bytes_until_the_client_closes(
    protocol: str,
) -> None:
    """After ``set_parser``, every read reaches the feed, whatever the protocol (aiohttp's
    parser knows only "websocket" and "tcp"), bytes that look like a request included; a 101
    is sent with no body framing; the client's close ends the reader; the guard counts the
    tunnel while it is open."""
    echo, guard_ = TunnelEcho(), guard()
    runner, _, port = await guarded(echo, guard_)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(upgrade_head(protocol))
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 ")
            assert b"Transfer-Encoding" not in head
            assert b"Content-Length" not in head
            for data in (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", bytes(range(256))):
                writer.write(data)
                assert await reader.readexactly(len(data)) == data
            assert (guard_.tunnels_open, guard_.tunnels) == (1, 1)
            writer.close()
            await echo.ended.wait()
            await guard_.none_open()
        assert guard_.tunnels_open == 0
    finally:
        await runner.cleanup()


async def test_bytes_sent_with_a_websocket_head_are_held_and_fed_first() -> None:
    """For a "websocket" Upgrade, aiohttp holds what follows the head (``_message_tail``)
    and ``set_parser`` feeds it before anything else."""
    runner, _, port = await guarded(TunnelEcho(), guard())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(upgrade_head("websocket") + b"early bytes")
        async with asyncio.timeout(5):
            await reader.readuntil(b"\r\n\r\n")
            assert await reader.readexactly(11) == b"early bytes"
        writer.close()
    finally:
        await runner.cleanup()


async def test_flow_control_of_a_tunnel_of_an_unknown_protocol_pauses_the_socket(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With nobody reading, the feed's reader pauses the client's socket (its high-water
    mark), which must not touch the HTTP parser (it has no body to pause: aiohttp's parser
    asserts); then reading resumes and every byte arrives."""
    echo = TunnelEcho()
    echo.go.clear()
    runner, server, port = await guarded(echo, guard())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(upgrade_head("echo/1"))
        async with asyncio.timeout(5):
            await reader.readuntil(b"\r\n\r\n")
        blob = bytes(range(256)) * 2048  # 512 KiB: past the reader's high-water mark
        writer.write(blob)
        await until(lambda: server.connections[0]._reading_paused)
        echo.go.set()
        async with asyncio.timeout(5):
            assert await reader.readexactly(len(blob)) == blob
        writer.close()
    finally:
        await runner.cleanup()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_tunnel_escapes_the_header_timer_and_a_drains_close() -> None:
    """While the handler runs, tunnel bytes start no header timer; ``pre_shutdown`` (which
    would make aiohttp drop every later read) leaves a tunnel reading."""
    runner, server, port = await guarded(TunnelEcho(), guard(header_timeout=0.05))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(upgrade_head("echo/1"))
        async with asyncio.timeout(5):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"one")
            assert await reader.readexactly(3) == b"one"
            protocol = server.connections[0]
            assert isinstance(protocol, GuardedRequestHandler)
            assert protocol._head_timer is None
            server.pre_shutdown()
            writer.write(b"two")
            assert await reader.readexactly(3) == b"two"
        writer.close()
    finally:
        await runner.cleanup()


# -- HandshakeTimedSite: TLS handshakes within a time of ours ---------------------------------


async def closed_by_server(port: int, within: float) -> bool:
    """Open a TCP connection, send nothing, and say whether the server closed it within
    ``within`` seconds (a bound: False if it did not)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        async with asyncio.timeout(within):
            try:
                return await reader.read() == b""
            except ConnectionResetError:
                return True
    except TimeoutError:
        return False
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@pytest.mark.slow
async def test_a_handshake_timed_site_serves_tls_and_drops_a_silent_client(
    tmp_path: Path,
) -> None:
    """The site is TCPSite's, with ``ssl_handshake_timeout``: it registers with its runner,
    reports its bound port, serves TLS clients, closes a connection whose handshake has not
    begun after the timeout (the plain TCPSite keeps it for asyncio's 60 s), and stops."""
    certs = Certificates(tmp_path)
    pair = certs.issue("localhost")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(body=b"over tls")

    runner = web.ServerRunner(web.Server(handle))
    await runner.setup()
    site = HandshakeTimedSite(runner, "127.0.0.1", 0, ssl_context=context, handshake_timeout=0.5)
    plain_site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    try:
        await site.start()
        await plain_site.start()
        port = site.port
        assert port != 0 and runner.addresses[0][1] == port and site in runner.sites
        url = f"https://localhost:{port}/"
        async with aiohttp.ClientSession() as client, client.get(url, ssl=certs.client()) as got:
            assert (got.status, await got.read()) == (200, b"over tls")
        assert await closed_by_server(port, within=10.0)
        assert not await closed_by_server(plain_site.port, within=1.5)  # what it replaces
        await site.stop()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
    finally:
        await runner.cleanup()


# -- HTTP/2 (decision 0036) -------------------------------------------------------------------


class _ConnectionProbe:
    """Stands for an HTTP/2 connection, recording which of its attributes a request reads."""

    def __init__(self, transport: asyncio.Transport | None) -> None:
        object.__setattr__(self, "read", set())
        object.__setattr__(self, "transport", transport)
        object.__setattr__(self, "ssl_context", None)
        object.__setattr__(self, "peername", ("127.0.0.9", 5555))
        object.__setattr__(self, "sockname", ("127.0.0.1", 443))

    def __getattribute__(self, name: str) -> Any:
        if name != "read":
            object.__getattribute__(self, "read").add(name)
        return object.__getattribute__(self, name)


class _NoWriter(AbstractStreamWriter):
    async def write(self, chunk: bytes | bytearray | memoryview) -> None:
        raise AssertionError("nothing is written")

    async def write_eof(self, chunk: bytes = b"") -> None:
        raise AssertionError("nothing is written")

    async def drain(self) -> None:
        return None

    def enable_compression(self, encoding: str = "deflate", strategy: int | None = None) -> None:
        raise AssertionError("no compression")

    def enable_chunking(self) -> None:
        raise AssertionError("no chunking")

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        raise AssertionError("nothing is written")


async def test_an_h2_request_reads_only_the_connection_fields_it_is_given() -> None:
    """``h2_request``: what the edge reads of a request is what the stream said, and of the
    connection aiohttp reads only transport, ssl_context, peername and sockname."""
    probe = _ConnectionProbe(None)
    headers: CIMultiDict[str] = CIMultiDict({"Host": "example.com", "Accept": "*/*"})
    headers.add("X-Twice", "1")
    headers.add("X-Twice", "2")
    task = asyncio.current_task()
    assert task is not None
    request = h2_request(
        method="GET",
        path="/a%20b?x=1&y=2",
        headers=headers,
        raw_headers=((b"host", b"example.com"),),
        body=None,
        connection=cast(asyncio.BaseProtocol, probe),
        writer=_NoWriter(),
        task=task,
    )
    assert (request.method, request.version, request.raw_path) == ("GET", (2, 0), "/a%20b?x=1&y=2")
    assert (request.path, request.query_string, request.host) == ("/a b", "x=1&y=2", "example.com")
    assert request.headers.getall("X-Twice") == ["1", "2"]
    assert (request.remote, request.secure, request.keep_alive) == ("127.0.0.9", False, True)
    assert not request.body_exists and request.transport is None
    head = request_head(request)
    assert (head.method, head.path, head.should_close) == ("GET", "/a%20b?x=1&y=2", False)
    assert object.__getattribute__(probe, "read") <= {
        "transport",
        "ssl_context",
        "peername",
        "sockname",
    }


async def test_a_body_reader_tells_its_flow_of_reads_and_what_it_holds() -> None:
    """``BodyFlow`` and ``unread``: the reader pauses its flow when fed, calls it back after
    a read that empties it, and holds its unread bytes' count where ``unread`` reads it:
    the stream's window reopens by what the handler read (issue 32)."""
    resumed: list[bool] = []
    flow = BodyFlow(asyncio.get_running_loop(), lambda: resumed.append(True))
    reader = body_reader(flow)
    reader.feed_data(b"x" * 40)
    assert flow._reading_paused and not resumed
    assert unread(reader) == 40
    assert await reader.read(30) == b"x" * 30
    assert unread(reader) == 10
    assert reader.read_nowait(-1) == b"x" * 10
    assert resumed and not flow._reading_paused and unread(reader) == 0


@pytest.mark.slow
@pytest.mark.parametrize("coding", ["plain", "chunked", "compressed"])
async def test_plain_writer_is_the_request_writer_only_for_a_body_sent_as_written(
    aiohttp_raw_server: RawServer, coding: str
) -> None:
    """file_body.py's sendfile writes beside the writer: only where the writer would have
    sent the body's bytes unchanged (the head through ``send_headers``), and the access
    log's count of them through ``sent_beside``."""
    seen: list[object] = []

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse()
        if coding == "chunked":
            response.enable_chunked_encoding()
        elif coding == "compressed":
            response.enable_compression(force=web.ContentCoding.gzip)
        else:
            response.content_length = 5
        await response.prepare(request)
        plain = plain_writer(request.writer)
        seen.append(plain is request.writer if plain is not None else None)
        if plain is not None:
            plain.send_headers()
            before = plain.output_size
            transport = request.transport
            assert transport is not None
            transport.write(b"hello")  # beside the writer, as sendfile does
            sent_beside(plain, 5)
            seen.append(plain.output_size - before)
        else:
            await response.write(b"hello")
        await response.write_eof()
        return response

    server = await aiohttp_raw_server(handler, access_log=None)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port or 0)
    try:
        async with asyncio.timeout(10):
            writer.write(b"GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            if coding == "plain":
                assert b"Content-Length: 5" in head
                assert await reader.readexactly(5) == b"hello"
    finally:
        writer.close()
        await writer.wait_closed()
    assert seen == ([True, 5] if coding == "plain" else [None])
