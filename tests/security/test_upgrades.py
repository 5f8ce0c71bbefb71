"""Issue 24, "Decide": which upgrades are tunnelled (an allowlist, "websocket" unless
configured), and what becomes of a request pipelined behind one that is not.

aiohttp's parser treats only "websocket" as an upgrade, and drops what followed the head of
any other request with ``Connection: upgrade`` in the same read: a request pipelined behind
``Upgrade: foo`` or ``h2c`` was never answered nor forwarded. The edge now answers the
upgrade request as any request and closes the connection, so the client sees the close and
retries, and the origin saw exactly one plain request."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config.model import parse_config
from proxy.errors import ConfigError
from proxy.process.service import Service
from tests.conftest import EdgeFactory
from tests.security.conftest import RawOriginFactory, Site
from tests.security.support import exchange

HOST = b"Host: example.com\r\n"


def upgrade_request(protocol: bytes, target: bytes = b"/first") -> bytes:
    h2c = protocol == b"h2c"
    connection = b"Upgrade, HTTP2-Settings" if h2c else b"Upgrade"
    settings = b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n" if h2c else b""
    return (
        b"GET " + target + b" HTTP/1.1\r\n" + HOST + b"Connection: " + connection + b"\r\n"
        b"Upgrade: " + protocol + b"\r\n" + settings + b"\r\n"
    )


@pytest.mark.parametrize("protocol", [b"foo", b"h2c", b"http2"])
async def test_a_request_pipelined_behind_an_upgrade_is_never_silently_lost(
    service: Service, origin: Site, protocol: bytes
) -> None:
    origin.reply("/first", b"first", headers={"Cache-Control": "no-store"})
    origin.reply("/second", b"second", headers={"Cache-Control": "no-store"})
    pipelined = b"GET /second HTTP/1.1\r\n" + HOST + b"\r\n"
    answer = await exchange(service.edge_url, upgrade_request(protocol) + pipelined)
    first, *rest = answer.responses
    assert (first.status, first.body) == (200, b"first")
    if rest:  # answered: the second request got its own answer
        assert [(r.status, r.body) for r in rest] == [(200, b"second")]
    else:  # or refused visibly: the connection was closed after the first answer
        assert first.header("Connection") == "close"
        assert answer.closed
    [seen] = [s for s in origin.seen if s.target == "/first"]
    assert "Upgrade" not in seen.headers
    assert "HTTP2-Settings" not in seen.headers
    assert origin.count("/second") == len(rest)


async def test_a_protocol_off_the_allowlist_is_not_tunnelled_even_if_the_origin_switches(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    """``Upgrade: http2`` used to be tunnelled whenever the origin answered 101. Now it is
    forwarded as a plain request (no Upgrade); an origin answering that with a 101 anyway
    gets the client a 502, never a switched connection."""
    switched = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: http2\r\n\r\n"
    server = await raw_origin(lambda request: switched)
    edge = await make_edge(domains=[{"name": "example.com", "origin": server.url}])
    answer = await exchange(edge.url, upgrade_request(b"http2"))
    assert answer.statuses == [502]
    assert answer.closed
    [request] = server.requests
    assert request.header("Upgrade") == []
    assert all("upgrade" not in value.lower() for value in request.header("Connection"))


@pytest.mark.slow
async def test_a_configured_protocol_is_tunnelled(
    make_edge: EdgeFactory, raw_origin: RawOriginFactory
) -> None:
    switched = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: foo\r\n\r\n"
    server = await raw_origin(lambda request: switched)
    edge = await make_edge(
        edge={"listen": "127.0.0.1:0", "upgrade_protocols": ["websocket", "foo"]},
        domains=[{"name": "example.com", "origin": server.url}],
    )
    answer = await exchange(edge.url, upgrade_request(b"foo"))
    assert answer.data.startswith(b"HTTP/1.1 101 ")
    [request] = server.requests
    assert request.header("Upgrade") == ["foo"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["h2c"], "carries HTTP"),
        (["websocket", "HTTP"], "carries HTTP"),
        (["web socket"], "not a protocol name"),
        ("websocket", "must be a list"),
    ],
)
def test_the_allowlist_is_checked_when_the_config_is_read(
    tmp_path: Path, value: object, message: str
) -> None:
    data = {
        "edge": {"listen": "127.0.0.1:0", "upgrade_protocols": value},
        "cache": {"max_bytes": "1MiB"},
        "domains": [{"name": "example.com", "origin": "http://127.0.0.1:9"}],
    }
    with pytest.raises(ConfigError, match=message) as raised:
        parse_config(data, base_dir=tmp_path)
    assert "edge.upgrade_protocols" in str(raised.value)
