"""Issue 24, failure 4: one client address could take every connection (decision 0032).

Against a real ``cdn-proxy serve`` child, with clients on distinct loopback addresses (Linux
routes all of 127.0.0.0/8 to the loopback interface, so a socket bound to 127.0.0.2 is a
second client): one address is refused past ``edge.max_connections_per_client``, plain (503
with Retry-After) or TLS (closed before its handshake), while another is served; tunnels are
held to the per-client limit and to the domain's ``max_tunnels``, and the origin never sees
more than that. On the code before, the refused connections were all served.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.conftest import Origin
from tests.edge.tls_support import Certificates
from tests.edge.upgrade_support import UPGRADE_ECHO, echoed
from tests.edge.upgrade_support import raw_origin as upgrade_origin
from tests.nodes import Node, write_config
from tests.reliability.connections_support import (
    Connection,
    close_all,
    config_text,
    metric,
    served,
)

ATTACKER = "127.0.0.1"
OTHER = "127.0.0.2"
THIRD = "127.0.0.3"
# Silent connections stay open for the whole test: the header timeout does not close them.
EDGE = "header_timeout = 30\nmax_connections_per_client = 4\n"
PAGE = b"GET /page HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"


async def connect_from(source: str, address: tuple[str, int]) -> Connection:
    return await asyncio.open_connection(*address, local_addr=(source, 0))


async def answer_of(connection: Connection, request: bytes = PAGE) -> bytes:
    """Send ``request`` and read the answer until the server closes the connection."""
    reader, writer = connection
    writer.write(request)
    received = b""
    async with asyncio.timeout(5):
        while chunk := await reader.read(65536):
            received += chunk
    writer.close()
    return received


async def one_answer(connection: Connection, request: bytes) -> bytes:
    """Send ``request`` and read one answer (framed by Content-Length), the connection kept."""
    reader, writer = connection
    writer.write(request)
    async with asyncio.timeout(5):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = await reader.readexactly(length)
    writer.close()
    return head + body


async def open_count(api: str) -> float:
    return await metric_of(api, 'cdn_proxy_connections_open{listener="edge"}')


async def metric_of(api: str, name: str) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as client, client.get(api + "/metrics") as r:
        text = await r.text()
    return next(
        (float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)),
        0.0,
    )


async def until_open(api: str, count: int) -> None:
    """Poll the child's gauge (a state in another process), bounded: 5 s."""
    for _ in range(100):
        if await open_count(api) == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"connections_open never became {count}")


@pytest.mark.slow
async def test_one_address_is_refused_past_its_limit_while_another_is_served(
    tmp_path: Path, origin: Origin
) -> None:
    origin.reply("/page", b"hello", headers={"Cache-Control": "max-age=60"})
    async with served(tmp_path, config_text(origin.url, edge=EDGE)) as proxy:
        held = [await connect_from(ATTACKER, proxy.edge_address) for _ in range(4)]
        try:
            await until_open(proxy.api, 4)
            # The fifth from the same address: refused unread, 503 with Retry-After.
            refused = await answer_of(await connect_from(ATTACKER, proxy.edge_address))
            assert refused.startswith(b"HTTP/1.1 503 "), refused
            assert b"\r\nRetry-After: 1\r\n" in refused
            # Another address is served, through the same listener.
            served_ = await answer_of(await connect_from(OTHER, proxy.edge_address))
            assert served_.startswith(b"HTTP/1.1 200 "), served_
            assert served_.endswith(b"hello")
            for _ in range(3):  # more refusals: counted, not logged each
                again = await answer_of(await connect_from(ATTACKER, proxy.edge_address))
                assert again.startswith(b"HTTP/1.1 503 ")
            by_reason = 'cdn_proxy_connections_refused_total{listener="edge",reason='
            assert await metric(proxy, by_reason + '"per_client"}') == 4
            assert await metric(proxy, by_reason + '"limit"}') == 0
            assert await metric(proxy, 'cdn_proxy_connections_per_client_max{listener="edge"}') == 4
            lines = [line for line in proxy.log_lines() if "per-client connection limit" in line]
            assert len(lines) == 1, lines
            assert "127.0.0.1 holds 4" in lines[0]
            # One of the address's connections closes: its place is free again.
            close_all(held[:1])
            await until_open(proxy.api, 3)
            later = await answer_of(await connect_from(ATTACKER, proxy.edge_address))
            assert later.startswith(b"HTTP/1.1 200 "), later
        finally:
            close_all(held)
    assert origin.count("/page") == 1  # the second answer was a hit; the refused never asked


@asynccontextmanager
async def tls_node(tmp_path: Path, origin: Origin, certs: Certificates) -> AsyncIterator[Node]:
    pair = certs.issue("example.com")
    edge = (
        f'tls_listen = "127.0.0.1:0"\ntls_cert = "{pair.cert.name}"\n'
        f'tls_key = "{pair.key.name}"\nmax_connections = 16\n{EDGE}'
    )
    config = write_config(tmp_path, origin.url, edge=edge)
    node = await Node.start(config, roles=3, log=tmp_path / "node.log")
    try:
        yield node
    finally:
        await node.kill()


async def tls_page(source: str, port: int, certs: Certificates) -> bytes:
    """GET /page over TLS from ``source``: the answer (b"" when the handshake was refused)."""
    try:
        connection = await asyncio.open_connection(
            "127.0.0.1",
            port,
            ssl=certs.client(),
            server_hostname="example.com",
            local_addr=(source, 0),
            ssl_handshake_timeout=5,
        )
    except (ssl.SSLError, ConnectionError):
        return b""
    return await answer_of(connection)


@pytest.mark.slow
async def test_stalled_tls_handshakes_of_one_address_leave_room_for_others(
    tmp_path: Path, origin: Origin
) -> None:
    """Four connections that never start their handshake hold one address's places (they are
    counted at accept, before TLS: decision 0018); its next TLS client is closed before the
    handshake, a second address's is served. Before, the limit per address did not exist:
    only max_connections (16 here) would have stopped them."""
    certs = Certificates(tmp_path)
    origin.reply("/page", b"over tls", headers={"Cache-Control": "max-age=60"})
    async with tls_node(tmp_path, origin, certs) as node:
        port = int(node.addresses["edge-tls"].rsplit(":", 1)[1])
        stalled = [await connect_from(ATTACKER, ("127.0.0.1", port)) for _ in range(4)]
        try:
            await until_open(node.api, 4)
            assert await tls_page(ATTACKER, port, certs) == b""
            answer = await tls_page(OTHER, port, certs)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            assert answer.endswith(b"over tls")
            name = 'cdn_proxy_connections_refused_total{listener="edge",reason="per_client"}'
            assert await metric_of(node.api, name) == 1
        finally:
            close_all(stalled)
        # Their places are freed when they close: the address is served again.
        await until_open(node.api, 0)
        answer = await tls_page(ATTACKER, port, certs)
        assert answer.startswith(b"HTTP/1.1 200 "), answer


@pytest.mark.slow
async def test_tunnels_are_held_to_the_per_client_limit_and_to_max_tunnels(
    tmp_path: Path,
) -> None:
    """max_tunnels = 3, two connections per address: the attacker's third connection is
    refused at accept, a second address's tunnel opens (three at the origin), a third
    address's is answered 503 with Retry-After without reaching the origin. Before, every
    one of them was tunnelled to the origin."""
    async with upgrade_origin() as origin:
        edge = (
            "header_timeout = 30\nmax_connections_per_client = 2\n"
            'upgrade_protocols = ["websocket", "echo"]\n'
        )
        text = config_text(origin.url, edge=edge) + "max_tunnels = 3\n"
        async with served(tmp_path, text) as proxy:
            tunnels: list[Connection] = []
            try:
                for source in (ATTACKER, ATTACKER, OTHER):
                    connection = await connect_from(source, proxy.edge_address)
                    tunnels.append(connection)
                    connection[1].write(UPGRADE_ECHO)
                    async with asyncio.timeout(5):
                        head = await connection[0].readuntil(b"\r\n\r\n")
                    assert head.startswith(b"HTTP/1.1 101 "), head
                    assert await connection[0].readexactly(3) == b"hi>"
                    assert await echoed(connection, b"ping") == b"ping"
                over_client = await answer_of(
                    await connect_from(ATTACKER, proxy.edge_address), UPGRADE_ECHO
                )
                assert over_client.startswith(b"HTTP/1.1 503 "), over_client
                over_domain = await one_answer(
                    await connect_from(THIRD, proxy.edge_address), UPGRADE_ECHO
                )
                assert over_domain.startswith(b"HTTP/1.1 503 "), over_domain
                assert b"\r\nRetry-After: 1\r\n" in over_domain
                assert b"upgraded connections" in over_domain
                assert len(origin.heads) == 3  # the origin never saw the refused ones
                busy = 'cdn_proxy_origin_busy_total{domain="example.com",reason="tunnels"}'
                assert await metric(proxy, busy) == 1
                assert await metric(proxy, 'cdn_proxy_tunnels_open{listener="edge"}') == 3
            finally:
                close_all(tunnels)
