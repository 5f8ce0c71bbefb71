"""Issue 14 §6: WebSocket, and any Upgrade, tunnelled to the origin both ways, never cached,
with idle and total limits (decision 0022). Real parts only: the edge on a guarded listener
(and ``cdn-proxy serve`` children), an aiohttp WebSocket origin or a raw asyncio one, and
aiohttp's ``ws_connect`` or a raw socket as the client."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from proxy.observe.telemetry import Telemetry
from proxy.process.listeners import ProcessContext, edge_listening
from proxy.store.memory import MemoryStore
from tests.conftest import Origin, make_config
from tests.edge.tls_support import Certificates
from tests.edge.upgrade_support import (
    HOST,
    UPGRADE_ECHO,
    closed_within,
    echoed,
    raw_origin,
    raw_tunnel,
    running_edge,
    websocket_echo,
)
from tests.nodes import Node, write_config
from tests.reliability.connections_support import config_text, served

WS_HEADERS = {"Host": HOST}


async def test_a_websocket_carries_text_and_binary_both_ways(
    tmp_path: Path, origin: Origin
) -> None:
    origin.route("/ws?room=1", websocket_echo)
    async with (
        running_edge(tmp_path, origin.url) as edge,
        aiohttp.ClientSession() as client,
        client.ws_connect(edge.url + "/ws?room=1", headers=WS_HEADERS) as ws,
    ):
        async with asyncio.timeout(5):
            assert await ws.receive_str() == "welcome"  # the origin speaks first
            await ws.send_str("hello")
            assert await ws.receive_str() == "hello"
            payload = bytes(range(256)) * 300  # larger than a socket read
            await ws.send_bytes(payload)
            assert await ws.receive_bytes() == payload
    seen = origin.seen[0]
    assert seen.target == "/ws?room=1"
    assert seen.headers["Upgrade"] == "websocket"
    assert seen.headers["Connection"] == "upgrade"
    assert "Sec-WebSocket-Key" in seen.headers
    # The forwarded request's rules still hold: the edge says who the client is.
    assert seen.headers["Host"] == HOST
    assert seen.headers["X-Forwarded-For"] == "127.0.0.1"
    assert seen.headers["Via"] == "1.1 cdn-proxy"


async def test_the_client_closing_closes_the_origin_side(tmp_path: Path, origin: Origin) -> None:
    origin.route("/ws", websocket_echo)
    async with running_edge(tmp_path, origin.url) as edge, aiohttp.ClientSession() as client:
        ws = await client.ws_connect(edge.url + "/ws", headers=WS_HEADERS)
        async with asyncio.timeout(5):
            assert await ws.receive_str() == "welcome"
            assert edge.guard.tunnels_open == 1
            await ws.close(code=1000)
            await edge.guard.none_open()  # the client's tunnelled connection has closed
        assert edge.guard.tunnels_open == 0
        assert edge.guard.tunnels == 1


async def test_the_origin_closing_closes_the_client_side(tmp_path: Path, origin: Origin) -> None:
    origin.route("/ws", websocket_echo)
    async with (
        running_edge(tmp_path, origin.url) as edge,
        aiohttp.ClientSession() as client,
        client.ws_connect(edge.url + "/ws", headers=WS_HEADERS) as ws,
    ):
        async with asyncio.timeout(5):
            assert await ws.receive_str() == "welcome"
            await ws.send_str("close")
            message = await ws.receive()
            assert message.type == WSMsgType.CLOSE
            assert ws.close_code == 4000
            assert message.extra == "origin says bye"
            await edge.guard.none_open()


async def test_a_protocol_aiohttp_does_not_know_is_tunnelled_byte_for_byte(
    tmp_path: Path,
) -> None:
    async with raw_origin() as origin, running_edge(tmp_path, origin.url) as edge:
        connection, head = await raw_tunnel(edge.address)
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.1 101 Switching Protocols"
        assert "Upgrade: echo/1" in lines
        assert "Connection: upgrade" in lines
        assert "X-Origin: raw" in lines
        assert "Via: 1.1 cdn-proxy" in lines
        # The origin's first bytes, which came with its 101.
        async with asyncio.timeout(5):
            assert await connection[0].readexactly(3) == b"hi>"
        # Bytes that look like HTTP are the new protocol's, not requests; and a megabyte
        # goes through flow control both ways.
        assert await echoed(connection, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == (
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        blob = os.urandom(1024 * 1024)
        assert await echoed(connection, blob) == blob
        head_sent = origin.heads[0].decode()
        assert head_sent.startswith("GET /echo HTTP/1.1\r\n")
        assert "Upgrade: echo/1\r\n" in head_sent
        assert "Connection: upgrade\r\n" in head_sent
        assert "keep-alive" not in head_sent.lower()  # hop-by-hop, named by Connection
        connection[1].close()
        async with asyncio.timeout(5):
            await origin.ended.wait()


async def test_a_silent_tunnel_is_closed_at_the_idle_timeout(tmp_path: Path) -> None:
    async with (
        raw_origin() as origin,
        running_edge(tmp_path, origin.url, tunnel_idle_timeout=0.5) as edge,
    ):
        connection, _ = await raw_tunnel(edge.address)
        started = time.monotonic()
        assert await closed_within(connection[0], 5) == b"hi>"
        assert time.monotonic() - started >= 0.4
        connection[1].close()
        async with asyncio.timeout(5):
            await origin.ended.wait()  # its origin connection was closed too
            await edge.guard.none_open()


@pytest.mark.slow
async def test_a_busy_tunnel_outlives_the_idle_timeout_and_ends_at_its_lifetime(
    tmp_path: Path,
) -> None:
    async with (
        raw_origin() as origin,
        running_edge(tmp_path, origin.url, tunnel_idle_timeout=0.3, tunnel_max_seconds=1.5) as edge,
    ):
        connection, _ = await raw_tunnel(edge.address)
        await connection[0].readexactly(3)
        started = time.monotonic()
        round_trips = 0
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            while True:  # round trips back to back: never idle for 0.3 s
                await echoed(connection, b"ping")
                round_trips += 1
        took = time.monotonic() - started
        connection[1].close()
        assert 1.2 <= took <= 4.0, took
        assert round_trips > 10


async def test_an_origin_refusing_the_upgrade_is_relayed_and_http_goes_on(tmp_path: Path) -> None:
    async with raw_origin() as origin, running_edge(tmp_path, origin.url) as edge:
        request = (
            b"GET /refuse HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\n"
            b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        (reader, writer), head = await raw_tunnel(edge.address, request)
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.1 403 Forbidden"
        assert "X-Why: policy" in lines
        assert "Content-Length: 8" in lines
        assert 'Cache-Status: cdn-proxy; fwd=bypass; detail="upgrade"' in lines
        async with asyncio.timeout(5):
            assert await reader.readexactly(8) == b"refused\n"
        # The connection was not switched: it carries the next request as HTTP.
        writer.write(UPGRADE_ECHO)
        async with asyncio.timeout(5):
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101 ")
            assert await reader.readexactly(3) == b"hi>"
        writer.close()
    assert len(origin.heads) == 2


async def test_a_cached_url_still_tunnels_an_upgrade(tmp_path: Path, origin: Origin) -> None:
    """The fresh-hit fast path must not answer an Upgrade from the cache."""
    calls = 0

    async def page_or_socket(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if request.headers.get("Upgrade") == "websocket":
            return await websocket_echo(request)
        return web.Response(text="page", headers={"Cache-Control": "max-age=600"})

    origin.route("/live", page_or_socket)
    async with running_edge(tmp_path, origin.url) as edge, aiohttp.ClientSession() as client:
        for _ in range(2):
            async with client.get(edge.url + "/live", headers=WS_HEADERS) as response:
                assert await response.text() == "page"
        assert calls == 1  # the second was a hit
        async with client.ws_connect(edge.url + "/live", headers=WS_HEADERS) as ws:
            async with asyncio.timeout(5):
                assert await ws.receive_str() == "welcome"
        assert calls == 2


@pytest.mark.parametrize(
    ("request_head", "why"),
    [
        (
            b"GET /plain HTTP/1.0\r\nHost: example.com\r\nConnection: Upgrade\r\n"
            b"Upgrade: echo/1\r\n\r\n",
            "HTTP/1.0 (RFC 9110 §7.8: ignored)",
        ),
        (
            b"POST /plain HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\n"
            b"Upgrade: echo/1\r\nContent-Length: 4\r\n\r\nbody",
            "a request body",
        ),
        (
            b"GET /plain HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
            "HTTP/2 (h2c smuggling)",
        ),
        (
            b"GET /plain HTTP/1.1\r\nHost: example.com\r\nUpgrade: echo/1\r\n\r\n",
            "no Connection: upgrade",
        ),
    ],
)
async def test_an_upgrade_that_may_not_be_tunnelled_is_forwarded_without_it(
    tmp_path: Path, origin: Origin, request_head: bytes, why: str
) -> None:
    origin.reply("/plain", b"plain", headers={"Cache-Control": "no-store"})
    async with running_edge(tmp_path, origin.url) as edge:
        (_, writer), head = await raw_tunnel(edge.address, request_head)
        assert head.split(b" ")[1] == b"200", why
        writer.close()
    seen = origin.seen[0]
    assert "Upgrade" not in seen.headers, why
    assert "upgrade" not in seen.headers.get("Connection", "").lower(), why
    assert "HTTP2-Settings" not in seen.headers, why
    assert edge.guard.tunnels == 0


async def test_an_upgrade_for_an_unknown_host_gets_421(tmp_path: Path, origin: Origin) -> None:
    origin.route("/ws", websocket_echo)
    async with running_edge(tmp_path, origin.url) as edge, aiohttp.ClientSession() as client:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(edge.url + "/ws", headers={"Host": "nope.test"})
        assert refused.value.status == 421
    assert origin.seen == []


async def test_an_unreachable_origin_gets_502(tmp_path: Path) -> None:
    async with raw_origin() as origin:
        url = origin.url  # its port, closed when the context ends
    async with running_edge(tmp_path, url) as edge:
        (_, writer), head = await raw_tunnel(edge.address)
        assert head.startswith(b"HTTP/1.1 502 ")
        writer.close()
        assert (
            await edge.metric('cdn_proxy_requests_total{cache_status="error",domain="example.com"}')
            == 1
        )


async def test_an_origin_switching_to_a_protocol_not_offered_gets_502(tmp_path: Path) -> None:
    allowed = ["echo", "chat"]
    async with (
        raw_origin() as origin,
        running_edge(tmp_path, origin.url, upgrade_protocols=allowed) as edge,
    ):
        offer_other = UPGRADE_ECHO.replace(b"Upgrade: echo/1", b"Upgrade: chat")
        (_, writer), head = await raw_tunnel(edge.address, offer_other)
        assert head.startswith(b"HTTP/1.1 502 ")
        writer.close()


async def test_connection_limits_leave_a_live_tunnel_alone_and_count_it(tmp_path: Path) -> None:
    """Decision 0017's timeouts close idle and half-sent connections, never a tunnel; a tunnel
    is an open connection, in the guard and in /metrics."""
    async with (
        raw_origin() as origin,
        running_edge(tmp_path, origin.url, header_timeout=0.2, keepalive_timeout=0.2) as edge,
    ):
        tunnel, _ = await raw_tunnel(edge.address)
        await tunnel[0].readexactly(3)
        # Another connection sent nothing: the header timeout closes it.
        idle_reader, idle_writer = await asyncio.open_connection(*edge.address)
        await closed_within(idle_reader, 5)
        # One that had an answer and then sat idle: the keep-alive timeout closes it.
        (kept_reader, kept_writer), _ = await raw_tunnel(
            edge.address, b"GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n"
        )
        await closed_within(kept_reader, 5)
        # The tunnel, silent all that time, is still there.
        assert await echoed(tunnel, b"still here") == b"still here"
        assert edge.guard.open == 1
        assert await edge.metric('cdn_proxy_tunnels_open{listener="edge"}') == 1
        assert await edge.metric('cdn_proxy_tunnels_total{listener="edge"}') == 1
        assert await edge.metric('cdn_proxy_connections_open{listener="edge"}') == 1
        for writer in (tunnel[1], idle_writer, kept_writer):
            writer.close()


@pytest.mark.slow
async def test_a_drain_keeps_a_tunnel_working_until_its_deadline(tmp_path: Path) -> None:
    async with raw_origin() as origin:
        async with running_edge(tmp_path, origin.url, shutdown_timeout=2) as edge:
            tunnel, _ = await raw_tunnel(edge.address)
            await tunnel[0].readexactly(3)
            idle_reader, idle_writer = await asyncio.open_connection(*edge.address)
            started = time.monotonic()
            drain = asyncio.create_task(edge.draining.drain())
            # Closed by the drain's first step (pre_shutdown): it has asked every connection,
            # the tunnel's too, to close by now.
            await closed_within(idle_reader, 1)
            idle_writer.close()
            assert await echoed(tunnel, b"during the drain") == b"during the drain"
            async with asyncio.timeout(5):
                await drain
        # The drain waited for the tunnel until its deadline; leaving the listener closed it.
        assert 1.0 <= time.monotonic() - started <= 3.0
        assert await closed_within(tunnel[0], 2) == b""
        tunnel[1].close()
        async with asyncio.timeout(5):
            await origin.ended.wait()


@pytest.mark.slow
async def test_sigterm_with_an_open_tunnel_exits_within_the_shutdown_timeout(
    tmp_path: Path,
) -> None:
    async with raw_origin() as origin:
        text = config_text(origin.url, edge='shutdown_timeout = 2\nupgrade_protocols = ["echo"]\n')
        async with served(tmp_path, text) as proxy:
            tunnel, _ = await raw_tunnel(proxy.edge_address)
            assert await tunnel[0].readexactly(3) == b"hi>"
            assert await echoed(tunnel, b"x") == b"x"
            started = time.monotonic()
            proxy.process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                assert await proxy.process.wait() == 0
            assert time.monotonic() - started <= 3.0
            assert await closed_within(tunnel[0], 2) == b""
            tunnel[1].close()
            assert "Traceback" not in proxy.log_text()


@pytest.mark.slow
async def test_a_node_with_two_workers_tunnels_websockets(tmp_path: Path, origin: Origin) -> None:
    origin.route("/ws", websocket_echo)
    node = await Node.start(write_config(tmp_path, origin.url, workers=2))
    try:
        async with aiohttp.ClientSession() as client:
            # Several connections, so that both workers (SO_REUSEPORT) most likely get some.
            sockets = [
                await client.ws_connect(node.edge + "/ws", headers=WS_HEADERS) for _ in range(6)
            ]
            async with asyncio.timeout(10):
                for index, ws in enumerate(sockets):
                    assert await ws.receive_str() == "welcome"
                    await ws.send_str(f"message {index}")
                    assert await ws.receive_str() == f"message {index}"
                    await ws.close()
    finally:
        await node.kill()
    assert sum(1 for seen in origin.seen if seen.headers.get("Upgrade") == "websocket") == 6


async def test_an_upgrade_with_an_unsafe_method_invalidates_the_url(
    tmp_path: Path, origin: Origin
) -> None:
    """RFC 9111 §4.4, as for any forwarded request with an unsafe method."""

    async def page(request: web.Request) -> web.StreamResponse:
        if "Upgrade" in request.headers:
            return web.Response(status=426, text="not here")
        return web.Response(text="page", headers={"Cache-Control": "max-age=600"})

    origin.route("/doc", page)
    async with (
        running_edge(tmp_path, origin.url, upgrade_protocols=["tcp"]) as edge,
        aiohttp.ClientSession() as client,
    ):
        for _ in range(2):
            async with client.get(edge.url + "/doc", headers=WS_HEADERS) as response:
                assert response.headers["Cache-Status"].startswith("cdn-proxy; ")
        assert origin.count("/doc") == 1
        upgrade = {**WS_HEADERS, "Connection": "upgrade", "Upgrade": "tcp"}
        async with client.post(edge.url + "/doc", headers=upgrade) as response:
            assert response.status == 426
            assert await response.text() == "not here"
        async with client.get(edge.url + "/doc", headers=WS_HEADERS) as response:
            assert await response.text() == "page"
        assert origin.count("/doc", "GET") == 2


async def test_a_websocket_reaches_an_https_origin_verified_with_its_origin_ca(
    tmp_path: Path,
) -> None:
    """The tunnel's TLS to an https:// origin trusts what the domain's origin_ca names (and,
    without it, only the system store: the same origin is then refused)."""
    certs = Certificates(tmp_path)
    pair = certs.issue("localhost")
    app = web.Application()
    app.router.add_get("/ws", websocket_echo)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    origin_url = f"https://localhost:{runner.addresses[0][1]}"
    try:
        for origin_ca, expected in ((str(certs.bundle), "welcome"), (None, None)):
            domain: dict[str, object] = {"name": HOST, "origin": origin_url, "read_timeout": 5}
            if origin_ca is not None:
                domain["origin_ca"] = origin_ca
            config = make_config(tmp_path, origin_url, domains=[domain])
            store = MemoryStore(max_bytes=config.edge_role()[1].max_bytes)
            telemetry = Telemetry(store=store, domains=[HOST])
            async with (
                edge_listening(ProcessContext(config, telemetry), store=store) as (_, url),
                aiohttp.ClientSession() as client,
            ):
                if expected is None:
                    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                        await client.ws_connect(url + "/ws", headers=WS_HEADERS)
                    assert refused.value.status == 502
                    continue
                async with client.ws_connect(url + "/ws", headers=WS_HEADERS) as ws:
                    async with asyncio.timeout(5):
                        assert await ws.receive_str() == expected
                        await ws.send_str("over tls")
                        assert await ws.receive_str() == "over tls"
    finally:
        await runner.cleanup()
