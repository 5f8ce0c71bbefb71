"""HTTP/2 on the edge (decision 0036): ALPN h2 on the TLS listener, h2c by prior knowledge
behind ``[edge] h2c``, and each stream answered as an HTTP/1.1 request is: routing by
:authority, the cache rules and Cache-Status, Range, collapsing, purges, the access log.

Every test runs the real service (both listeners) with trustme certificates, a real origin,
and real clients: the h2 library (tests/edge/h2_support.py), curl and h2load."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import brotli
import pytest
from aiohttp import web
from h2.errors import ErrorCodes

from proxy.process.reload import find_running
from proxy.process.service import Service, running
from tests.conftest import Origin
from tests.edge.h2_support import RawH2
from tests.edge.tls_support import Certificates, handshake, pair_keys, tls_config
from tests.nodes import Node
from tests.polling import until

CACHEABLE = {"Cache-Control": "max-age=60"}


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
async def service(tmp_path: Path, origin: Origin, certs: Certificates) -> AsyncIterator[Service]:
    config = tls_config(
        tmp_path,
        origin.url,
        edge={**pair_keys(certs.issue("example.com", "other.test")), "access_log": "access.log"},
    )
    async with running(config) as running_service:
        yield running_service


async def h2(service: Service, certs: Certificates, sni: str = "example.com") -> RawH2:
    assert service.tls_url is not None
    return await RawH2.open(service.tls_url, certs.client(), sni=sni)


# -- ALPN and h2c --------------------------------------------------------------------------


async def test_alpn_offers_h2_then_http11(service: Service, certs: Certificates) -> None:
    assert service.tls_url is not None
    both = certs.client()
    both.set_alpn_protocols(["h2", "http/1.1"])
    assert (await handshake(service.tls_url, both, "example.com")).alpn == "h2"
    old = certs.client()
    old.set_alpn_protocols(["http/1.1"])
    assert (await handshake(service.tls_url, old, "example.com")).alpn == "http/1.1"


async def test_http2_off_offers_http11_only(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    config = tls_config(
        tmp_path, origin.url, edge={**pair_keys(certs.issue("example.com")), "http2": False}
    )
    async with running(config) as service:
        assert service.tls_url is not None
        context = certs.client()
        context.set_alpn_protocols(["h2", "http/1.1"])
        assert (await handshake(service.tls_url, context, "example.com")).alpn == "http/1.1"


async def test_h2c_with_prior_knowledge_when_on(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    origin.reply("/c", b"over h2c", headers=CACHEABLE)
    config = tls_config(
        tmp_path, origin.url, edge={**pair_keys(certs.issue("example.com")), "h2c": True}
    )
    async with running(config) as service:
        client = await RawH2.open(service.edge_url)
        answer = await client.answer(client.request("/c"))
        assert (answer.status, answer.body) == (200, b"over h2c")
        await client.close()
        # HTTP/1.1 on the same listener is unchanged.
        async with aiohttp.ClientSession() as session:
            headers = {"Host": "example.com"}
            async with session.get(service.edge_url + "/c", headers=headers) as response:
                assert (response.status, await response.read()) == (200, b"over h2c")
                assert response.headers["Cache-Status"].endswith("hit")
    assert origin.count("/c") == 1
    assert origin.seen[0].headers["X-Forwarded-Proto"] == "http"


async def test_h2c_off_by_default_answers_505(service: Service) -> None:
    host, _, port = service.edge_url.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    head = await asyncio.wait_for(reader.read(4096), 5)
    assert head.split(b"\r\n")[0].endswith(b" 505 HTTP Version Not Supported")
    assert b"[edge] h2c" in head
    writer.close()


# -- each stream as an HTTP/1.1 request ------------------------------------------------------


async def test_a_miss_then_hits_on_one_connection(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    origin.reply("/page", b"h2 body", headers=CACHEABLE)
    client = await h2(service, certs)
    first = await client.answer(client.request("/page"))
    assert (first.status, first.body) == (200, b"h2 body")
    assert first.headers["cache-status"] == "cdn-proxy; fwd=uri-miss; stored"
    second = await client.answer(client.request("/page"))
    assert (second.status, second.body) == (200, b"h2 body")
    assert second.headers["cache-status"] == "cdn-proxy; hit"
    assert "connection" not in second.headers and "transfer-encoding" not in second.headers
    await client.close()
    assert origin.count("/page") == 1
    assert origin.seen[0].headers["X-Forwarded-Proto"] == "https"
    assert origin.seen[0].headers["Host"] == "example.com"  # the edge's Host for the origin


async def test_routing_by_authority(service: Service, origin: Origin, certs: Certificates) -> None:
    origin.reply("/r", b"routed", headers=CACHEABLE)
    client = await h2(service, certs, sni="other.test")
    answer = await client.answer(client.request("/r", authority="other.test"))
    assert (answer.status, answer.body) == (200, b"routed")
    # A name this edge does not serve, and one that is not the connection's SNI: 421.
    unknown = await client.answer(client.request("/r", authority="nowhere.test"))
    assert unknown.status == 421
    other = await client.answer(client.request("/r", authority="example.com"))
    assert other.status == 421
    await client.close()
    assert origin.count("/r") == 1


async def test_many_streams_at_once_collapse_into_one_origin_request(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response(body=b"x" * 100_000, headers=CACHEABLE)

    origin.route("/big", slow)
    client = await h2(service, certs)
    streams = [client.request("/big") for _ in range(20)]
    await until(lambda: origin.seen)
    release.set()
    answers = [await client.answer(stream) for stream in streams]
    assert {(a.status, len(a.body)) for a in answers} == {(200, 100_000)}
    assert origin.count("/big") == 1
    assert sum("collapsed" in a.headers["cache-status"] for a in answers) == 19
    await client.close()


async def test_range_request(service: Service, origin: Origin, certs: Certificates) -> None:
    origin.reply("/r", b"0123456789", headers=CACHEABLE)
    client = await h2(service, certs)
    await client.answer(client.request("/r"))
    answer = await client.answer(client.request("/r", headers=[("range", "bytes=2-5")]))
    assert (answer.status, answer.body) == (206, b"2345")
    assert answer.headers["content-range"] == "bytes 2-5/10"
    await client.close()


async def test_request_body_reaches_the_origin(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    origin.reply("/post", b"ok")
    client = await h2(service, certs)
    body = bytes(range(256)) * 1000  # more than a stream's window: sent as it is read
    stream = client.request("/post", method="POST", end=False)
    await client.send_body(stream, body)
    answer = await client.answer(stream, wait=10)
    assert (answer.status, answer.body) == (200, b"ok")
    assert origin.seen[0].body == body
    await client.close()


async def test_an_origin_that_breaks_off_ends_only_its_stream(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    """An answer streamed through (past max_object_bytes) that the origin breaks off: on
    HTTP/1.1 the client's connection is aborted (forward.py); on HTTP/2 only that stream is
    (RST_STREAM INTERNAL_ERROR), and the other streams of the connection go on."""
    release = asyncio.Event()

    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "3000000"})
        await response.prepare(request)
        await response.write(b"x" * 1_500_000)  # past max_object_bytes (1 MiB): streamed
        await release.wait()
        assert request.transport is not None
        request.transport.abort()  # 1,500,000 bytes short
        return response

    async def slow(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response(body=b"whole", headers=CACHEABLE)

    origin.route("/cut", cut)
    origin.route("/slow", slow)
    client = await h2(service, certs)
    other = client.request("/slow")
    broken = client.request("/cut", method="POST", body=b"")
    await until(lambda: len(origin.seen) == 2)
    release.set()
    answer = await client.answer(broken, wait=10)
    assert answer.status == 200 and not answer.ended
    assert answer.reset == ErrorCodes.INTERNAL_ERROR
    whole = await client.answer(other)
    assert (whole.status, whole.body, whole.reset) == (200, b"whole", None)
    again = await client.answer(client.request("/slow"))
    assert (again.status, again.body, client.goaway, client.closed) == (200, b"whole", None, False)
    await client.close()


async def test_the_access_log_names_the_protocol(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    origin.reply("/logged?a=1", b"x", headers=CACHEABLE)
    config = tls_config(
        tmp_path,
        origin.url,
        edge={**pair_keys(certs.issue("example.com")), "access_log": "access.log"},
    )
    async with running(config) as service:
        client = await h2(service, certs)
        assert (await client.answer(client.request("/logged?a=1"))).status == 200
        await client.close()
    lines = (tmp_path / "access.log").read_text().splitlines()
    assert len(lines) == 1
    assert '"GET /logged?a=1 HTTP/2.0" 200 1 ' in lines[0]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_http2(service: Service, origin: Origin, certs: Certificates) -> None:
    origin.reply("/curl", b"for curl", headers=CACHEABLE)
    assert service.tls_url is not None
    port = service.tls_url.rpartition(":")[2]
    args = ["curl", "-sS", "--http2", "--cacert", str(certs.bundle), "-o", "-"]
    args += ["-w", "\\n%{http_version}", "--resolve", f"example.com:{port}:127.0.0.1"]
    for _ in range(2):
        process = await asyncio.create_subprocess_exec(
            *args, f"https://example.com:{port}/curl", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(process.communicate(), 10)
        assert out == b"for curl\n2"
    assert origin.count("/curl") == 1


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load (nghttp2-client) is missing")
async def test_h2load(service: Service, origin: Origin) -> None:
    """h2load's 2,000 requests on 4 connections, 10 streams each at once: every one a 200."""
    origin.reply("/load", b"y" * 1024, headers=CACHEABLE)
    assert service.tls_url is not None
    process = await asyncio.create_subprocess_exec(
        "h2load", "-n", "2000", "-c", "4", "-m", "10", "-H", ":authority: example.com",
        service.tls_url + "/load",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    text = out.decode()
    assert "2000 succeeded, 0 failed, 0 errored" in text, text
    assert "status codes: 2000 2xx" in text, text
    assert "TLS Protocol" in text and "Application protocol: h2" in text, text
    assert origin.count("/load") == 1


# -- a real cdn-proxy serve ------------------------------------------------------------------


def h2c_node_config(tmp_path: Path, domains: dict[str, str]) -> Path:
    tables = "".join(
        f'[[domains]]\nname = "{name}"\norigin = "{url}"\n' for name, url in domains.items()
    )
    path = tmp_path / "proxy.toml"
    path.write_text(
        '[edge]\nlisten = "127.0.0.1:0"\nshutdown_timeout = 10\nh2c = true\n'
        '[api]\nlisten = "127.0.0.1:0"\n[cache]\nmax_bytes = "8MiB"\n'
        f'[state]\npath = "state.db"\n{tables}',
        encoding="utf-8",
    )
    return path


@pytest.mark.slow
async def test_a_reload_keeps_http2_connections_open(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """``cdn-proxy serve`` (uvloop) with h2c: a SIGHUP reload adds a domain, and the HTTP/2
    connection opened before it goes on, its hit still a hit, the new domain served on it."""
    origin.reply("/page", b"cached", headers=CACHEABLE)
    config = h2c_node_config(tmp_path, {"example.com": origin.url})
    node = await Node.start(config, log=tmp_path / "node.log")
    nodes.append(node)
    client = await RawH2.open(node.edge)
    assert (await client.answer(client.request("/page"))).body == b"cached"
    assert (await client.answer(client.request("/page", authority="new.test"))).status == 421

    h2c_node_config(tmp_path, {"example.com": origin.url, "new.test": origin.url})
    os.kill(node.process.pid, signal.SIGHUP)
    await until(lambda: find_running(config).reloads == 1, within=10, every=0.05)

    hit = await client.answer(client.request("/page"))
    assert (hit.status, hit.headers["cache-status"]) == (200, "cdn-proxy; hit")
    new = await client.answer(client.request("/page", authority="new.test"))
    assert (new.status, new.body) == (200, b"cached")
    assert client.goaway is None and not client.closed
    await client.close()
    assert origin.count("/page") == 2  # one fill per domain
    assert "Traceback" not in (tmp_path / "node.log").read_text()


async def test_head_and_conditional_requests_have_no_body(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    origin.reply("/h", b"0123456789", headers={**CACHEABLE, "ETag": '"v1"'})
    client = await h2(service, certs)
    await client.answer(client.request("/h"))
    head = await client.answer(client.request("/h", method="HEAD"))
    assert (head.status, head.body, head.headers["content-length"]) == (200, b"", "10")
    again = await client.answer(client.request("/h", headers=[("if-none-match", '"v1"')]))
    assert (again.status, again.body, again.headers["etag"]) == (304, b"", '"v1"')
    await client.close()
    assert origin.count("/h") == 1


async def test_compressed_copies_over_http2(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """Compression at the edge (decision 0035) holds per stream: a brotli client gets the
    stored brotli copy, an identity client the bytes the origin sent, from one fill."""
    html = b"<p>" + b"compressible text " * 200 + b"</p>"
    origin.reply("/c.html", html, headers={**CACHEABLE, "Content-Type": "text/html"})
    compress = {"compress": ["br", "gzip"]}
    config = tls_config(
        tmp_path,
        origin.url,
        edge=pair_keys(certs.issue("example.com")),
        domains={"example.com": compress},
    )
    async with running(config) as running_service:
        client = await h2(running_service, certs)
        br = await client.answer(client.request("/c.html", headers=[("accept-encoding", "br")]))
        assert br.headers["content-encoding"] == "br"
        assert "accept-encoding" in br.headers["vary"].lower()
        assert len(br.body) < len(html) and brotli.decompress(br.body) == html
        plain = await client.answer(client.request("/c.html"))
        assert "content-encoding" not in plain.headers and plain.body == html
        await client.close()
    assert origin.count("/c.html") == 1


async def test_expect_100_continue(service: Service, origin: Origin, certs: Certificates) -> None:
    """A client that waits for 100 Continue before its body gets it as an interim HEADERS
    frame; the origin gets the body, and no Expect."""
    origin.reply("/upload", b"stored")
    client = await h2(service, certs)
    stream = client.request(
        "/upload", method="POST", headers=[("expect", "100-continue")], end=False
    )
    events = await client.read_events()
    while not any(type(e).__name__ == "InformationalResponseReceived" for e in events):
        events = await client.read_events()
    await client.send_body(stream, b"the body")
    answer = await client.answer(stream)
    assert (answer.status, answer.body) == (200, b"stored")
    assert origin.seen[0].body == b"the body"
    assert "Expect" not in origin.seen[0].headers
    await client.close()
