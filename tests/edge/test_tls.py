"""TLS on the edge (decision 0018): the TLS listener beside the plain one, certificates chosen
by SNI, 421 when Host and SNI disagree, TLS 1.2+ with AEAD ciphers and ALPN h2 and http/1.1,
certificates swapped by ``reconfigure``, and https:// origins verified.

Every test runs the real service (both listeners) or a real ``cdn-proxy serve`` child, with
trustme certificates and real TLS clients: the ssl module, aiohttp and curl."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import ssl
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from proxy.config.model import load_config, parse_config
from proxy.core.purge.purges import purge_request
from proxy.edge.connections import ConnectionGuard
from proxy.errors import ConfigError
from proxy.process.service import Service, running
from tests.conftest import Origin
from tests.edge.tls_support import (
    Certificates,
    get,
    handshake,
    https_origin,
    pair_keys,
    tls_config,
)
from tests.nodes import Node, cli, write_config
from tests.polling import until

CACHEABLE = {"Cache-Control": "max-age=60"}


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def service(tmp_path: Path, origin: Origin, certs: Certificates) -> AsyncIterator[Service]:
    """example.com with a certificate of its own, other.test on the default one."""
    config = tls_config(
        tmp_path,
        origin.url,
        edge=pair_keys(certs.issue("default.test")),
        domains={"example.com": pair_keys(certs.issue("example.com"))},
    )
    async with running(config) as running_service:
        yield running_service


def tls_url(service: Service) -> str:
    assert service.tls_url is not None
    return service.tls_url


# -- the listener and SNI ----------------------------------------------------------------------


async def test_a_hit_over_tls_and_the_origin_is_told_https(
    service: Service, origin: Origin, certs: Certificates, client: aiohttp.ClientSession
) -> None:
    origin.reply("/page", b"over tls", headers=CACHEABLE)
    url = tls_url(service) + "/page"
    status, headers, body = await get(client, url, certs.client(), sni="example.com")
    assert (status, body) == (200, b"over tls")
    assert "stored" in headers["Cache-Status"]
    status, headers, body = await get(client, url, certs.client(), sni="example.com")
    assert (status, body) == (200, b"over tls")
    assert headers["Cache-Status"].endswith("hit")
    assert origin.count("/page") == 1
    assert origin.seen[0].headers["X-Forwarded-Proto"] == "https"


async def test_the_plain_listener_is_unchanged(
    service: Service, origin: Origin, client: aiohttp.ClientSession
) -> None:
    origin.reply("/plain", b"plain", headers=CACHEABLE)
    async with client.get(service.edge_url + "/plain", headers={"Host": "example.com"}) as r:
        assert (r.status, await r.read()) == (200, b"plain")
    assert origin.seen[0].headers["X-Forwarded-Proto"] == "http"


async def test_sni_chooses_the_certificate(service: Service, certs: Certificates) -> None:
    """A domain's own certificate for its name; the default one for a domain without one of
    its own, for a name no domain has, and without SNI."""
    url = tls_url(service)
    assert (await handshake(url, certs.client(), "example.com")).names == ("example.com",)
    shook = await handshake(url, certs.client(), "EXAMPLE.com.", check_name=False)
    assert shook.names == ("example.com",)
    for sni in ("other.test", "www.example.com", None):
        shook = await handshake(url, certs.client(), sni, check_name=False)
        assert shook.names == ("default.test",), sni


async def test_without_a_default_certificate_an_unknown_name_gets_no_handshake(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    config = tls_config(
        tmp_path, origin.url, domains={"example.com": pair_keys(certs.issue("example.com"))}
    )
    async with running(config) as service:
        url = tls_url(service)
        assert (await handshake(url, certs.client(), "example.com")).names == ("example.com",)
        for sni in ("other.test", "www.example.com", None):
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await handshake(url, certs.client(), sni, check_name=False)


async def test_a_host_that_is_not_the_sni_name_is_misdirected(
    service: Service, origin: Origin, certs: Certificates, client: aiohttp.ClientSession
) -> None:
    """RFC 9110 §15.5.20: other.test asked for on a connection set up for example.com is 421,
    and the origin is never asked. The same Host with its own SNI is served."""
    origin.reply("/x", b"x", headers=CACHEABLE)
    url = tls_url(service) + "/x"
    status, _, body = await get(client, url, certs.client(), sni="example.com", host="other.test")
    assert status == 421
    assert b"Misdirected" in body
    assert origin.count("/x") == 0
    context = certs.client()
    context.check_hostname = False  # other.test is on the default certificate
    status, _, _ = await get(client, url, context, sni="other.test")
    assert status == 200
    # The same name with a port, another case or a trailing dot is the same host.
    status, _, _ = await get(
        client, url, certs.client(), sni="example.com", host="Example.COM.:443"
    )
    assert status == 200


async def test_without_sni_the_host_alone_routes(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    """No SNI (a client that connects by address): the default certificate, and the request
    is routed by its Host as on the plain listener."""
    origin.reply("/nosni", b"by host", headers=CACHEABLE)
    context = certs.client()
    context.check_hostname = False
    host, _, port = tls_url(service).removeprefix("https://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port), ssl=context, server_hostname="")
    writer.write(b"GET /nosni HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b"by host")


# -- the scheme in the cache key (core/keys.py) -----------------------------------------------


def redirect_plain_to_https(origin: Origin, target: str) -> None:
    """The origin's "force https": http gets a cacheable 301 to the https URL."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.headers["X-Forwarded-Proto"] == "http":
            location = "https://example.com" + target
            return web.Response(status=301, headers={"Location": location, **CACHEABLE})
        return web.Response(body=b"the site", headers=CACHEABLE)

    origin.route(target, handler)


async def plain_get(
    client: aiohttp.ClientSession, service: Service, target: str, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    async with client.get(
        service.edge_url + target, headers={"Host": "example.com", **headers}, allow_redirects=False
    ) as response:
        return response.status, dict(response.headers), await response.read()


async def test_a_redirect_to_https_stored_for_http_never_answers_https(
    service: Service, origin: Origin, certs: Certificates, client: aiohttp.ClientSession
) -> None:
    """Each scheme has its own entries: the 301 the origin gives http clients is a hit for
    them, and https clients get the page (else: a redirect loop for the whole site)."""
    redirect_plain_to_https(origin, "/site")
    for expected in ("stored", "hit"):
        status, headers, _ = await plain_get(client, service, "/site")
        assert (status, headers["Location"]) == (301, "https://example.com/site")
        assert headers["Cache-Status"].endswith(expected)
    for expected in ("stored", "hit"):
        status, headers, body = await get(
            client, tls_url(service) + "/site", certs.client(), sni="example.com"
        )
        assert (status, body) == (200, b"the site")
        assert headers["Cache-Status"].endswith(expected)
    assert [seen.headers["X-Forwarded-Proto"] for seen in origin.seen] == ["http", "https"]


async def test_purges_and_invalidations_cover_both_schemes(
    service: Service, origin: Origin, certs: Certificates, client: aiohttp.ClientSession
) -> None:
    """A request-target names its entries of both schemes: a URL purge, and a POST to it
    (RFC 9111 §4.4), drop both; the dry run names the target once."""
    for target in ("/one", "/two"):
        origin.reply(target, target.encode(), headers=CACHEABLE)

    async def fill(target: str) -> None:
        assert (await plain_get(client, service, target))[0] == 200
        assert (await get(client, tls_url(service) + target, certs.client(), sni="example.com"))[
            0
        ] == 200

    async def both_miss(target: str) -> None:
        _, plain, _ = await plain_get(client, service, target)
        _, tls, _ = await get(client, tls_url(service) + target, certs.client(), sni="example.com")
        assert "fwd=uri-miss" in plain["Cache-Status"] and "fwd=uri-miss" in tls["Cache-Status"]

    await fill("/one")
    dry = await service.store.purge("example.com", purge_request("url", ["/one"], dry_run=True))
    assert (dry.entries, dry.sample) == (2, ("/one",))
    purged = await service.store.purge("example.com", purge_request("url", ["/one"]))
    assert purged.entries == 2
    await both_miss("/one")
    await fill("/two")
    origin.reply("/two", b"posted", headers=CACHEABLE)
    async with client.post(service.edge_url + "/two", headers={"Host": "example.com"}) as r:
        assert r.status == 200
    await both_miss("/two")


async def test_a_trusted_proxys_https_is_keyed_as_https(
    tmp_path: Path, origin: Origin, certs: Certificates, client: aiohttp.ClientSession
) -> None:
    """Behind a TLS terminator the scheme is the one it says (X-Forwarded-Proto): its https
    requests share the TLS listener's entries, its http ones do not."""
    config = tls_config(
        tmp_path,
        origin.url,
        edge={**pair_keys(certs.issue("example.com")), "trusted_proxies": ["127.0.0.1/32"]},
    )
    redirect_plain_to_https(origin, "/site")
    async with running(config) as service:
        status, _, body = await get(
            client, tls_url(service) + "/site", certs.client(), sni="example.com"
        )
        assert (status, body) == (200, b"the site")
        status, headers, body = await plain_get(
            client,
            service,
            "/site",
            **{"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"},
        )
        assert (status, body) == (200, b"the site")
        assert headers["Cache-Status"].endswith("hit")
        status, headers, _ = await plain_get(client, service, "/site")
        assert (status, headers["Location"]) == (301, "https://example.com/site")
    assert [seen.headers["X-Forwarded-Proto"] for seen in origin.seen] == ["https", "http"]


@pytest.mark.slow
async def test_a_client_that_never_finishes_its_handshake_is_closed_after_header_timeout(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """A connection to the TLS listener has ``edge.header_timeout`` for its handshake (then
    as long again for its request head), not asyncio's 60 s."""
    config = tls_config(
        tmp_path, origin.url, edge={**pair_keys(certs.issue("example.com")), "header_timeout": 1}
    )
    async with running(config) as service:
        port = int(tls_url(service).rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x16\x03\x01")  # the start of a ClientHello, and then nothing
        try:
            async with asyncio.timeout(10):  # a bound: the handshake timeout is 1 s
                with contextlib.suppress(ConnectionResetError):
                    assert await reader.read() == b""
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def edge_guard(service: Service) -> ConnectionGuard:
    guard = next(g for g in service.telemetry.connections if g.listener == "edge")
    assert isinstance(guard, ConnectionGuard)  # telemetry reads it as ListenerFigures
    return guard


async def silent_connection(port: int) -> asyncio.StreamWriter:
    """A TCP connection to ``port`` that sends nothing: a handshake that never starts."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    return writer


async def handshake_refused(port: int, certs: Certificates) -> bool:
    """Whether a TLS client's handshake with ``port`` fails (the server closed it)."""
    try:
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=certs.client(), server_hostname="example.com"
        )
    except (ssl.SSLError, ConnectionError):
        return True
    writer.close()
    return False


async def test_connections_in_their_handshake_count_against_max_connections(
    tmp_path: Path, origin: Origin, certs: Certificates, client: aiohttp.ClientSession
) -> None:
    """With max_connections = 2, two connections that never start a handshake hold both
    places: a third TLS client is closed before its handshake (and counted refused), a
    plain-HTTP one gets the 503. Once they close, their places are free again. Before, a
    connection reached the limit only after its handshake, so silent ones were not counted."""
    config = tls_config(
        tmp_path,
        origin.url,
        # One address opens them all: the per-client limit (decision 0032) off, so that
        # the listener's limit is what they meet.
        edge={
            **pair_keys(certs.issue("example.com")),
            "max_connections": 2,
            "max_connections_per_client": 0,
        },
    )
    origin.reply("/page", b"page", headers=CACHEABLE)
    async with running(config) as service:
        guard = edge_guard(service)
        port = int(tls_url(service).rsplit(":", 1)[1])
        silent = [await silent_connection(port) for _ in range(2)]
        assert await handshake_refused(port, certs)
        assert (guard.open, guard.refused) == (2, 1)
        async with client.get(service.edge_url + "/page", headers={"Host": "example.com"}) as r:
            assert r.status == 503
        for writer in silent:
            writer.close()
        async with asyncio.timeout(10):
            await guard.none_open()
        url = tls_url(service) + "/page"
        status, _, body = await get(client, url, certs.client(), sni="example.com")
        assert (status, body) == (200, b"page")


async def test_a_failed_handshake_frees_its_place_at_once(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """Bytes that are not TLS end the handshake, and the connection's place with it: at
    once, not when the handshake timeout would have."""
    config = tls_config(
        tmp_path,
        origin.url,
        edge={**pair_keys(certs.issue("example.com")), "max_connections": 1, "header_timeout": 60},
    )
    async with running(config) as service:
        guard = edge_guard(service)
        port = int(tls_url(service).rsplit(":", 1)[1])
        for _ in range(3):  # each in turn takes the only place, and gives it back
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
            async with asyncio.timeout(10):  # a bound: the handshake timeout is 60 s
                with contextlib.suppress(ConnectionResetError):
                    await reader.read()
                await guard.none_open()
            writer.close()
        assert guard.refused == 0


# -- protocol versions, ciphers, ALPN ----------------------------------------------------------


async def test_alpn_prefers_h2_and_tls_1_1_is_refused(
    service: Service, certs: Certificates
) -> None:
    url = tls_url(service)
    client = certs.client()
    client.set_alpn_protocols(["h2", "http/1.1"])
    shook = await handshake(url, client, "example.com")
    assert shook.alpn == "h2"  # decision 0036
    client.set_alpn_protocols(["http/1.1"])
    assert (await handshake(url, client, "example.com")).alpn == "http/1.1"
    assert shook.version in ("TLSv1.2", "TLSv1.3")
    old = certs.client()
    with warnings.catch_warnings():  # the ssl module frowns on TLS 1.1: so does the edge
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1_1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("ALL:@SECLEVEL=0")  # let the client offer TLS 1.1 at all
    with pytest.raises((ssl.SSLError, ConnectionError)):  # an alert, or the reset after it
        await handshake(url, old, "example.com")
    old.maximum_version = ssl.TLSVersion.TLSv1_2  # the same client, allowed 1.2: served
    assert (await handshake(url, old, "example.com")).version == "TLSv1.2"


async def test_tls_1_2_takes_only_ecdhe_with_aead(service: Service, certs: Certificates) -> None:
    url = tls_url(service)
    tls12 = certs.client(maximum_version=ssl.TLSVersion.TLSv1_2)
    shook = await handshake(url, tls12, "example.com")
    assert shook.version == "TLSv1.2"
    assert shook.cipher.startswith("ECDHE-") and ("GCM" in shook.cipher or "CHACHA" in shook.cipher)
    for cbc in ("ECDHE-ECDSA-AES128-SHA256:ECDHE-RSA-AES128-SHA256", "AES128-GCM-SHA256"):
        client = certs.client(maximum_version=ssl.TLSVersion.TLSv1_2)
        client.set_ciphers(cbc)  # CBC with HMAC; and a GCM suite without forward secrecy
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await handshake(url, client, "example.com")


# -- reload ------------------------------------------------------------------------------------


async def test_reconfigure_serves_new_certificates_to_new_connections(
    tmp_path: Path, origin: Origin, certs: Certificates, client: aiohttp.ClientSession
) -> None:
    """New connections get the new certificates; one already open keeps its own and goes on
    serving. A config whose files went bad is refused and changes nothing."""
    first = pair_keys(certs.issue("example.com"))
    config = tls_config(tmp_path, origin.url, domains={"example.com": first})
    origin.reply("/r", b"r", headers=CACHEABLE)
    async with running(config) as service:
        url = tls_url(service)
        host, _, port = url.removeprefix("https://").rpartition(":")
        reader, writer = await asyncio.open_connection(
            host, int(port), ssl=certs.client(), server_hostname="example.com"
        )
        old_cert = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)

        renewed = certs.issue("example.com", "www.example.com")
        service.edge.tls.reconfigure(
            tls_config(
                tmp_path,
                origin.url,
                edge=pair_keys(certs.issue("default.test")),
                domains={"example.com": pair_keys(renewed)},
            )
        )
        shook = await handshake(url, certs.client(), "example.com")
        assert shook.names == ("example.com", "www.example.com")
        shook = await handshake(url, certs.client(), "other.test", check_name=False)
        assert shook.names == ("default.test",)  # a default certificate, new in this config

        writer.write(b"GET /r HTTP/1.1\r\nHost: example.com\r\n\r\n")
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200 ")
        assert writer.get_extra_info("ssl_object").getpeercert(binary_form=True) == old_cert
        writer.close()

        broken = tls_config(tmp_path, origin.url, domains={"example.com": pair_keys(renewed)})
        renewed.key.write_bytes(certs.issue("example.com").key.read_bytes())  # not its key
        with pytest.raises(ConfigError, match=r"domains\[0\]\.tls_key: .* does not match"):
            service.edge.tls.reconfigure(broken)
        shook = await handshake(url, certs.client(), "example.com")
        assert shook.names == ("example.com", "www.example.com")  # still the running one


# -- origins over https ------------------------------------------------------------------------


async def test_an_https_origin_is_verified_and_origin_ca_names_its_trust(
    tmp_path: Path,
    certs: Certificates,
    client: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Verified against the system store by default: a private CA's origin fails (502, and
    the log says why). With origin_ca naming that CA, the same origin is served (200)."""
    async with https_origin(certs.issue("localhost")) as origin_url:
        data = {
            "edge": {"listen": "127.0.0.1:0", "shutdown_timeout": 5},
            "api": {"listen": "127.0.0.1:0"},
            "cache": {"max_bytes": "16MiB"},
            "state": {"path": "state.db"},
            "domains": [
                {"name": "example.com", "origin": origin_url},
                {"name": "other.test", "origin": origin_url, "origin_ca": "ca.pem"},
            ],
        }
        from proxy.config.model import parse_config

        async with running(parse_config(data, base_dir=tmp_path)) as service:
            with caplog.at_level(logging.WARNING):
                async with client.get(service.edge_url + "/", headers={"Host": "example.com"}) as r:
                    assert r.status == 502
            assert "example.com: the origin's TLS certificate is not trusted" in caplog.text
            assert "certificate verify failed" in caplog.text
            async with client.get(service.edge_url + "/", headers={"Host": "other.test"}) as r:
                assert (r.status, await r.read()) == (200, b"secret origin")


async def test_a_range_of_a_large_object_is_asked_of_an_https_origin_with_its_origin_ca(
    tmp_path: Path, certs: Certificates, client: aiohttp.ClientSession
) -> None:
    """A Range request for part of an object is asked of the origin with the Range (decision
    0031): that request too trusts the domain's origin_ca (it got 502)."""
    big = bytes(range(256)) * 8192  # 2 MiB, over the 1 MiB max_object_bytes
    ranges_seen: list[str | None] = []

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        ranges_seen.append(request.headers.get("Range"))
        if request.headers.get("Range") == "bytes=0-99":
            headers = {"Content-Range": f"bytes 0-99/{len(big)}"}
            return web.Response(status=206, body=big[:100], headers=headers)
        return web.Response(body=big, headers={"Cache-Control": "max-age=60"})

    async with https_origin(certs.issue("localhost"), handler=handle) as origin_url:
        data = {
            "edge": {"listen": "127.0.0.1:0", "shutdown_timeout": 5},
            "api": {"listen": "127.0.0.1:0"},
            "cache": {"max_bytes": "16MiB", "max_object_bytes": "1MiB"},
            "state": {"path": "state.db"},
            "domains": [{"name": "example.com", "origin": origin_url, "origin_ca": "ca.pem"}],
        }
        async with running(parse_config(data, base_dir=tmp_path)) as service:
            headers = {"Host": "example.com", "Range": "bytes=0-99"}
            async with client.get(service.edge_url + "/video", headers=headers) as response:
                assert (response.status, await response.read()) == (206, big[:100])
    assert ranges_seen == ["bytes=0-99"]


# -- config checks -----------------------------------------------------------------------------


def write(tmp_path: Path, edge: str = "", domain: str = "") -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(
        f"""
[edge]
listen = "127.0.0.1:0"
{edge}
[cache]
max_bytes = "8MiB"
[fleet]
url = "redis://127.0.0.1:1"
[[domains]]
name = "example.com"
origin = "https://127.0.0.1:9"
{domain}
""",
        encoding="utf-8",
    )
    return path


def test_paths_are_relative_to_the_config_file(tmp_path: Path, certs: Certificates) -> None:
    pair = certs.issue("example.com")
    config = load_config(
        write(
            tmp_path,
            edge='tls_listen = "127.0.0.1:0"',
            domain=(
                f'tls_cert = "{pair.cert.name}"\ntls_key = "{pair.key.name}"\norigin_ca = "ca.pem"'
            ),
        )
    )
    domain = config.domains[0]
    assert (domain.tls_cert, domain.tls_key) == (pair.cert, pair.key)
    assert domain.origin_ca == certs.bundle


@pytest.mark.parametrize(
    ("edge", "domain", "message"),
    [
        (
            'tls_listen = "127.0.0.1:0"',
            "",
            "edge.tls_listen: needs a certificate: edge.tls_cert or a domain's tls_cert",
        ),
        ("", 'tls_cert = "cert1.pem"', "domains[0].tls_key: is required with domains[0].tls_cert"),
        ('tls_key = "key1.pem"', "", "edge.tls_cert: is required with edge.tls_key"),
        (
            "",
            'tls_cert = "cert1.pem"\ntls_key = "key2.pem"',
            "domains[0].tls_key: {d}/key2.pem does not match the certificate in {d}/cert1.pem",
        ),
        (
            "",
            'tls_cert = "key1.pem"\ntls_key = "key1.pem"',
            "domains[0].tls_cert: {d}/key1.pem holds no PEM certificate",
        ),
        (
            "",
            'tls_cert = "cert1.pem"\ntls_key = "cert1.pem"',
            "domains[0].tls_key: {d}/cert1.pem holds no PEM private key",
        ),
        (
            "",
            'tls_cert = "cert1.pem"\ntls_key = "gone.pem"',
            "domains[0].tls_key: {d}/gone.pem cannot be read (No such file or directory)",
        ),
        (
            "",
            'origin_ca = "key1.pem"',
            "domains[0].origin_ca: {d}/key1.pem holds no PEM certificate",
        ),
        (
            'listen = "127.0.0.1:8443"\ntls_listen = "127.0.0.1:8443"\n'
            'tls_cert = "cert1.pem"\ntls_key = "key1.pem"',
            "",
            "edge.tls_listen: must differ from edge.listen",
        ),
    ],
)
def test_bad_tls_files_are_refused_naming_the_key(
    tmp_path: Path, certs: Certificates, edge: str, domain: str, message: str
) -> None:
    certs.issue("example.com")
    certs.issue("example.com")
    text = write(tmp_path, edge=edge, domain=domain).read_text()
    if 'listen = "127.0.0.1:8443"' in edge:
        text = text.replace('listen = "127.0.0.1:0"\n', "", 1)
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert message.format(d=tmp_path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_encrypted_key_is_refused_without_a_prompt(tmp_path: Path, certs: Certificates) -> None:
    from cryptography.hazmat.primitives import serialization

    pair = certs.issue("example.com")
    key = serialization.load_pem_private_key(pair.key.read_bytes(), None)
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    path = write(tmp_path, domain=f'tls_cert = "{pair.cert}"\ntls_key = "{pair.key}"')
    with pytest.raises(ConfigError, match="is encrypted: give the key without a passphrase"):
        load_config(path)


def test_origin_ca_needs_an_https_origin(tmp_path: Path, certs: Certificates) -> None:
    path = write(tmp_path, domain='origin_ca = "ca.pem"')
    path.write_text(path.read_text().replace("https://127.0.0.1:9", "http://127.0.0.1:9"))
    with pytest.raises(ConfigError, match=r"domains\[0\]\.origin_ca: is only for an origin"):
        load_config(path)


# -- real processes ----------------------------------------------------------------------------

CURL = shutil.which("curl")  # scripts/test installs it: never skipped
TLS_LISTEN = 'tls_listen = "127.0.0.1:0"'  # [edge] key for write_config: a TLS listener too


async def curl(url: str, certs: Certificates, name: str, *args: str) -> tuple[int, str, str]:
    """curl ``url`` (https://127.0.0.1:PORT/PATH) as https://NAME:PORT/PATH, trusting the CA."""
    assert CURL is not None
    port = url.removeprefix("https://").split("/", 1)[0].rpartition(":")[2]
    path = "/" + url.removeprefix("https://").split("/", 1)[1]
    process = await asyncio.create_subprocess_exec(
        CURL,
        "-sS",
        "--max-time",
        "10",
        "--cacert",
        str(certs.bundle),
        "--resolve",
        f"{name}:{port}:127.0.0.1",
        "-D",
        "-",
        *args,
        f"https://{name}:{port}{path}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
async def test_cdn_proxy_serve_answers_curl_over_tls(
    tmp_path: Path, origin: Origin, certs: Certificates, workers: int
) -> None:
    """``cdn-proxy serve`` with tls_listen, as an operator runs it (one process, then two
    edge workers sharing the port): curl gets the page over TLS with HTTP/1.1, then a hit
    over HTTP/2 (curl's choice by ALPN, decision 0036); a Host other than the SNI name is
    421."""
    pair = certs.issue("example.com")
    # example.com with its certificate, and other.test, a domain the SNI does not name.
    extra = (
        f'tls_cert = "{pair.cert.name}"\ntls_key = "{pair.key.name}"\n'
        f'[[domains]]\nname = "other.test"\norigin = "{origin.url}"'
    )
    config = write_config(tmp_path, origin.url, workers=workers, extra=extra, edge=TLS_LISTEN)
    origin.reply("/page", b"served by a node", headers=CACHEABLE)
    node = await Node.start(config, roles=3, log=tmp_path / "node.log")
    try:
        url = node.addresses["edge-tls"] + "/page"
        assert url.startswith("https://127.0.0.1:")
        code, head, err = await curl(url, certs, "example.com", "--http1.1", "-o", os.devnull)
        assert code == 0, err
        assert head.startswith("HTTP/1.1 200")
        # Each worker has a cache of its own: ask until one answers from it.
        for _ in range(20):
            code, head, _ = await curl(url, certs, "example.com", "--http2", "-o", os.devnull)
            assert head.startswith("HTTP/2 200")
            if "; hit" in head:
                break
        else:
            raise AssertionError("never a hit over TLS")
        code, head, _ = await curl(url, certs, "example.com", "-H", "Host: other.test")
        assert head.startswith("HTTP/2 421")
        code, head, _ = await curl(url, certs, "example.com", "--http1.1", "-H", "Host: other.test")
        assert head.startswith("HTTP/1.1 421")
        assert all(seen.headers["X-Forwarded-Proto"] == "https" for seen in origin.seen)
    finally:
        await node.kill()
    log = (tmp_path / "node.log").read_text()
    assert "Traceback" not in log


async def connections_open(api: str) -> float:
    """cdn_proxy_connections_open of the edge listener, from a node's /metrics."""
    async with aiohttp.ClientSession() as session, session.get(api + "/metrics") as answer:
        text = await answer.text()
    prefix = 'cdn_proxy_connections_open{listener="edge"} '
    return sum(float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


@pytest.mark.slow
async def test_cdn_proxy_serve_counts_handshakes_against_max_connections(
    tmp_path: Path, origin: Origin, certs: Certificates
) -> None:
    """The same limit in ``cdn-proxy serve`` (uvloop): two silent connections hold both places
    of max_connections = 2, so curl's handshake is refused; once they close, curl is served."""
    pair = certs.issue("example.com")
    extra = f'tls_cert = "{pair.cert.name}"\ntls_key = "{pair.key.name}"'
    edge = TLS_LISTEN + "\nmax_connections = 2"
    config = write_config(tmp_path, origin.url, extra=extra, edge=edge)
    origin.reply("/page", b"served", headers=CACHEABLE)
    node = await Node.start(config, roles=3, log=tmp_path / "node.log")
    try:
        url = node.addresses["edge-tls"] + "/page"
        port = int(url.removeprefix("https://").split("/", 1)[0].rpartition(":")[2])
        silent = [await silent_connection(port) for _ in range(2)]
        code, _, _ = await curl(url, certs, "example.com", "-o", os.devnull)
        assert code != 0, "a third connection was let in"
        for writer in silent:
            writer.close()

        # /metrics is outside this process: asked until both are gone.
        async def released() -> bool:
            return await connections_open(node.api) == 0

        await until(released, every=0.05)
        code, head, err = await curl(url, certs, "example.com", "-o", os.devnull)
        assert code == 0, err
        assert head.startswith("HTTP/2 200")
    finally:
        await node.kill()


async def served_certificate(url: str, certs: Certificates, name: str) -> bytes:
    """The certificate (DER) a new TLS connection to ``url`` is given for SNI ``name``."""
    host, _, port = url.removeprefix("https://").rpartition(":")
    _, writer = await asyncio.open_connection(
        host, int(port), ssl=certs.client(), server_hostname=name
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert isinstance(der, bytes)
        return der
    finally:
        writer.close()
        await writer.wait_closed()


HOST = {"Host": "example.com"}


def certificate_der(path: Path) -> bytes:
    first = path.read_text().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"
    return ssl.PEM_cert_to_DER_cert(first)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
async def test_a_reload_serves_the_new_certificate_to_new_connections(
    tmp_path: Path, origin: Origin, certs: Certificates, workers: int
) -> None:
    """``cdn-proxy reload`` after the config names a new certificate: new TLS connections get
    it (in every worker), and one opened before the reload keeps its own and still works."""
    old, new = certs.issue("example.com"), certs.issue("example.com")
    extra = f'tls_cert = "{old.cert.name}"\ntls_key = "{old.key.name}"\n'
    config = write_config(tmp_path, origin.url, workers=workers, extra=extra, edge=TLS_LISTEN)
    origin.reply("/page", b"page", headers=CACHEABLE)
    node = await Node.start(config, roles=3, log=tmp_path / "node.log")
    try:
        tls_url = node.addresses["edge-tls"]
        assert await served_certificate(tls_url, certs, "example.com") == certificate_der(old.cert)
        async with aiohttp.ClientSession() as before:
            async with before.get(
                tls_url + "/page", ssl=certs.client(), server_hostname="example.com", headers=HOST
            ) as response:
                assert response.status == 200
            text = config.read_text()
            config.write_text(
                text.replace(old.cert.name, new.cert.name).replace(old.key.name, new.key.name)
            )
            code, out, err = await cli("reload", "--config", str(config))
            assert code == 0, (out, err)
            for _ in range(4 * workers):  # new connections, spread over the workers
                der = await served_certificate(tls_url, certs, "example.com")
                assert der == certificate_der(new.cert)
            # The connection opened before the reload is still served.
            async with before.get(
                tls_url + "/page", ssl=certs.client(), server_hostname="example.com", headers=HOST
            ) as response:
                assert response.status == 200
                assert await response.read() == b"page"
    finally:
        await node.kill()
    assert "Traceback" not in (tmp_path / "node.log").read_text()
