"""TLS for tests: trustme certificates written to files, configs with TLS, an HTTPS origin,
and TLS clients (the ssl module, aiohttp, curl) that name the server they want (SNI)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import trustme
from aiohttp import web

from proxy.config.model import Config, parse_config


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class Certificates:
    """A test CA, and the certificate and key files it issues into ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA()
        self.directory = directory
        self.bundle = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.bundle))
        self._issued = 0

    def issue(self, *names: str) -> Pair:
        self._issued += 1
        leaf = self.ca.issue_cert(*names)
        cert = self.directory / f"cert{self._issued}.pem"
        key = self.directory / f"key{self._issued}.pem"
        cert.write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(str(key))
        return Pair(cert, key)

    def client(self, **settings: Any) -> ssl.SSLContext:
        """A client context that trusts this CA (and checks names), with ``settings`` set on it
        (minimum_version, maximum_version...)."""
        context = ssl.create_default_context(cafile=str(self.bundle))
        for name, value in settings.items():
            setattr(context, name, value)
        return context


def tls_config(
    tmp_path: Path,
    origin_url: str,
    *,
    edge: dict[str, Any] | None = None,
    domains: dict[str, dict[str, Any]] | None = None,
) -> Config:
    """A node with both roles and TLS on ports chosen by the OS: example.com and other.test
    on ``origin_url``, each with the extra keys ``domains`` gives it."""
    extra = domains or {}
    data: dict[str, Any] = {
        "edge": {
            "listen": "127.0.0.1:0",
            "tls_listen": "127.0.0.1:0",
            "shutdown_timeout": 5,
            **(edge or {}),
        },
        "api": {"listen": "127.0.0.1:0"},
        "cache": {"max_bytes": "16MiB", "max_object_bytes": "1MiB"},
        "state": {"path": str(tmp_path / "state.db")},
        "domains": [
            {"name": name, "origin": origin_url, "read_timeout": 5, **extra.get(name, {})}
            for name in ("example.com", "other.test")
        ],
    }
    return parse_config(data, base_dir=tmp_path)


def pair_keys(pair: Pair) -> dict[str, str]:
    return {"tls_cert": str(pair.cert), "tls_key": str(pair.key)}


@dataclass(frozen=True)
class Handshake:
    names: tuple[str, ...]  # the DNS names of the certificate the server sent
    alpn: str | None
    version: str | None
    cipher: str


async def handshake(
    url: str, context: ssl.SSLContext, sni: str | None, *, check_name: bool = True
) -> Handshake:
    """Set up a TLS connection to ``url`` (https://HOST:PORT) naming ``sni`` (None: no SNI)
    and report what the server chose; ssl.SSLError (or a reset) when it refuses."""
    host, port = _address(url)
    if sni is None or not check_name:
        context.check_hostname = False
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=context, server_hostname=sni or ""), 5
    )
    try:
        connection = writer.get_extra_info("ssl_object")
        names = tuple(v for k, v in connection.getpeercert()["subjectAltName"] if k == "DNS")
        return Handshake(
            names, connection.selected_alpn_protocol(), connection.version(), connection.cipher()[0]
        )
    finally:
        writer.close()
        await writer.wait_closed()


def _address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("https://").rpartition(":")
    return host, int(port)


async def get(
    session: aiohttp.ClientSession,
    url: str,
    context: ssl.SSLContext,
    *,
    sni: str,
    host: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """GET ``url`` (an https:// URL with the listener's address) with SNI ``sni`` and Host
    ``host`` (``sni`` when left out)."""
    async with session.get(
        url,
        ssl=context,
        server_hostname=sni,
        headers={"Host": host or sni},
        timeout=aiohttp.ClientTimeout(total=10),
    ) as response:
        return response.status, dict(response.headers), await response.read()


@asynccontextmanager
async def https_origin(
    pair: Pair,
    body: bytes = b"secret origin",
    handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]] | None = None,
) -> AsyncIterator[str]:
    """An HTTPS origin serving ``body`` (cacheable), or answering with ``handler``, with the
    certificate ``pair``; yields its URL with the name ``localhost`` (127.0.0.1), which the
    certificate must cover."""

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(body=body, headers={"Cache-Control": "max-age=60"})

    server = web.Server(handler or handle)
    runner = web.ServerRunner(server)
    await runner.setup()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    try:
        await site.start()
        port = runner.addresses[0][1]
        yield f"https://localhost:{port}"
    finally:
        await runner.cleanup()
