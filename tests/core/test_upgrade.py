"""RFC 9110 §7.8 (Upgrade) as the edge applies it: which requests are tunnelled, and the
heads on each side (proxy/core/http/upgrade.py, decision 0022)."""

from __future__ import annotations

import pytest

from proxy.core.http.upgrade import (
    check_allowlist,
    origin_fields,
    switched_fields,
    tunnel_protocols,
)


@pytest.mark.parametrize(
    ("method", "version", "has_body", "connection", "upgrade", "expected"),
    [
        ("GET", (1, 1), False, ["Upgrade"], ["websocket"], "websocket"),
        ("GET", (1, 1), False, ["keep-alive, Upgrade"], ["WebSocket"], "WebSocket"),
        ("GET", (1, 1), False, ["close", "upgrade"], ["echo/1, chat"], "echo/1, chat"),
        ("GET", (1, 1), False, ["upgrade"], ["a", "b/2"], "a, b/2"),  # two field lines
        ("GET", (1, 1), False, ["upgrade"], ["a, , b"], "a, b"),  # empty members (§5.6.1)
        ("POST", (1, 1), False, ["upgrade"], ["tcp"], "tcp"),  # any method but CONNECT
        # §7.8: a server MUST ignore Upgrade in an HTTP/1.0 request.
        ("GET", (1, 0), False, ["upgrade"], ["websocket"], None),
        # §7.8: a sender of Upgrade MUST send the "upgrade" connection option.
        ("GET", (1, 1), False, [], ["websocket"], None),
        ("GET", (1, 1), False, ["keep-alive"], ["websocket"], None),
        ("GET", (1, 1), False, ["upgrade"], [], None),
        ("GET", (1, 1), False, ["upgrade"], [" , "], None),
        # A request with a body is forwarded plain (decision 0022).
        ("POST", (1, 1), True, ["upgrade"], ["websocket"], None),
        ("CONNECT", (1, 1), False, ["upgrade"], ["websocket"], None),
        # Malformed members: not an Upgrade this edge can reason about.
        ("GET", (1, 1), False, ["upgrade"], ["web socket"], None),
        ("GET", (1, 1), False, ["upgrade"], ["a/b/c"], None),
        ("GET", (1, 1), False, ["upgrade"], ["websocket/"], None),
        # HTTP itself, or TLS carrying it: a tunnel would let HTTP past the edge.
        ("GET", (1, 1), False, ["Upgrade, HTTP2-Settings"], ["h2c"], None),
        ("GET", (1, 1), False, ["upgrade"], ["HTTP/2.0"], None),
        ("GET", (1, 1), False, ["upgrade"], ["websocket, H2C"], None),
        ("OPTIONS", (1, 1), False, ["upgrade"], ["TLS/1.2"], None),
    ],
)
def test_which_requests_are_tunnelled(
    method: str,
    version: tuple[int, int],
    has_body: bool,
    connection: list[str],
    upgrade: list[str],
    expected: str | None,
) -> None:
    assert (
        tunnel_protocols(
            method=method,
            version=version,
            has_body=has_body,
            connection=connection,
            upgrade=upgrade,
            allowed=("websocket", "echo", "chat", "a", "b", "tcp", "h2c", "http", "tls"),
        )
        == expected
    )


@pytest.mark.parametrize(
    ("upgrade", "allowed", "expected"),
    [
        # Issue 24: an allowlist, "websocket" by default; only allowed protocols are offered.
        (["websocket"], None, "websocket"),
        (["WebSocket/13"], None, "WebSocket/13"),
        (["http2"], None, None),  # tunnelled before if the origin answered 101
        (["foo"], None, None),
        (["foo, websocket"], None, "websocket"),
        (["foo"], ("foo",), "foo"),
        (["websocket"], ("foo",), None),
    ],
)
def test_only_allowed_protocols_are_tunnelled(
    upgrade: list[str], allowed: tuple[str, ...] | None, expected: str | None
) -> None:
    extra = {} if allowed is None else {"allowed": allowed}
    protocols = tunnel_protocols(
        method="GET",
        version=(1, 1),
        has_body=False,
        connection=["upgrade"],
        upgrade=upgrade,
        **extra,
    )
    assert protocols == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["websocket"], ("websocket",)),
        (["WebSocket", "websocket", "echo"], ("websocket", "echo")),
        ([], ()),  # no upgrades at all
    ],
)
def test_check_allowlist(value: list[str], expected: tuple[str, ...]) -> None:
    assert check_allowlist(value) == expected


@pytest.mark.parametrize("value", ["websocket", [1], ["web socket"], ["h2c"], ["HTTP"], ["tls"]])
def test_check_allowlist_refuses(value: object) -> None:
    with pytest.raises(ValueError):
        check_allowlist(value)


def test_the_origin_is_asked_with_the_upgrade_put_back() -> None:
    forwarded = [("Host", "example.com"), ("X-Forwarded-For", "192.0.2.1")]
    assert origin_fields(forwarded, "websocket") == [
        *forwarded,
        ("Connection", "upgrade"),
        ("Upgrade", "websocket"),
    ]


def test_a_101_is_relayed_without_its_hop_by_hop_fields() -> None:
    """§7.6.1: Connection, and the fields it names, are the origin's hop only; Via gains this
    proxy (§7.6.3); Connection and Upgrade are sent again for the client's hop."""
    origin = (
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade, X-Hop"),
        ("X-Hop", "secret"),
        ("Keep-Alive", "timeout=5"),
        ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        ("Via", "1.1 origin-lb"),
    )
    assert switched_fields(origin, offered="websocket", via="edge-1") == (
        ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        ("Via", "1.1 origin-lb, 1.1 edge-1"),
        ("Connection", "upgrade"),
        ("Upgrade", "websocket"),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("offered", "chosen", "relayed"),
    [
        ("websocket", "websocket", True),
        ("websocket", "WebSocket", True),  # compared without case (RFC 6455 §4.1)
        ("echo/1, chat", "chat", True),
        ("echo/1", "echo/2", False),  # §15.2.2: only a protocol the client offered
        ("websocket", "h2c", False),
        ("websocket", "", False),  # §15.2.2: a 101 MUST name the protocol
        ("websocket", "web socket", False),
    ],
)
def test_a_101_is_relayed_only_for_a_protocol_the_client_offered(
    offered: str, chosen: str, relayed: bool
) -> None:
    origin = (("Upgrade", chosen), ("Connection", "upgrade")) if chosen else ()
    result = switched_fields(origin, offered=offered, via="cdn-proxy")
    assert (result is not None) is relayed
