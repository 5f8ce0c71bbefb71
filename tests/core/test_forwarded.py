"""Which client address and scheme to believe (proxy/core/http/forwarded.py): forwarding fields
only from trusted peers, walked from the right as nginx's real_ip_recursive does."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from proxy.core.http.forwarded import (
    FORWARDED,
    X_FORWARDED_FOR,
    Client,
    TrustedProxies,
    parse_networks,
    request_client,
)

TRUSTED = TrustedProxies(parse_networks(["10.0.0.0/8", "fd00::/8", "127.0.0.1"]))


@pytest.mark.parametrize(
    ("peer", "xff", "xfp", "expected"),
    [
        # Untrusted peers: the fields are ignored, whatever they say.
        ("203.0.113.9", ["1.2.3.4"], ["https"], Client("203.0.113.9", "http")),
        ("11.0.0.1", ["1.2.3.4"], [], Client("11.0.0.1", "http")),
        # A trusted peer names the client.
        ("10.0.0.1", ["198.51.100.7"], ["https"], Client("198.51.100.7", "https")),
        ("127.0.0.1", ["198.51.100.7"], [], Client("198.51.100.7", "http")),
        # Trusted hops are skipped from the right; the first untrusted one is the client,
        # and what a client wrote to its left is never read (a spoofed chain).
        ("10.0.0.1", ["6.6.6.6, 198.51.100.7, 10.1.1.1"], [], Client("198.51.100.7", "http")),
        ("10.0.0.1", ["6.6.6.6", "198.51.100.7", "10.1.1.1"], [], Client("198.51.100.7", "http")),
        # Every hop trusted: the leftmost.
        ("10.0.0.1", ["10.2.2.2, 10.1.1.1"], [], Client("10.2.2.2", "http")),
        # Not an address: the walk stops at the hop that wrote it.
        ("10.0.0.1", ["unknown, 10.1.1.1"], [], Client("10.1.1.1", "http")),
        ("10.0.0.1", ["garbage"], ["https"], Client("10.0.0.1", "http")),
        ("10.0.0.1", ["1.2.3.4, <script>"], [], Client("10.0.0.1", "http")),
        # Ports and IPv6 spellings.
        ("10.0.0.1", ["198.51.100.7:4711"], [], Client("198.51.100.7", "http")),
        ("10.0.0.1", ["[2001:db8::1]:443"], [], Client("2001:db8::1", "http")),
        ("fd00::5", ["2001:DB8::1"], [], Client("2001:db8::1", "http")),
        # No field: the peer itself.
        ("10.0.0.1", [], ["https"], Client("10.0.0.1", "http")),
        # Proto at the client's position, else the last one; only http and https.
        ("10.0.0.1", ["198.51.100.7, 10.1.1.1"], ["https, http"], Client("198.51.100.7", "https")),
        ("10.0.0.1", ["198.51.100.7, 10.1.1.1"], ["https"], Client("198.51.100.7", "https")),
        ("10.0.0.1", ["198.51.100.7"], ["gopher"], Client("198.51.100.7", "http")),
    ],
)
def test_x_forwarded_for(peer: str, xff: list[str], xfp: list[str], expected: Client) -> None:
    assert TRUSTED.client(peer, "http", forwarded_for=xff, forwarded_proto=xfp) == expected


@pytest.mark.parametrize(
    ("forwarded", "expected"),
    [
        (["for=198.51.100.7;proto=https"], Client("198.51.100.7", "https")),
        (['for="[2001:db8::1]:4711";proto=https'], Client("2001:db8::1", "https")),
        (
            ["for=6.6.6.6, for=198.51.100.7;proto=https, for=10.1.1.1"],
            Client("198.51.100.7", "https"),
        ),
        (["for=_hidden, for=10.1.1.1;proto=https"], Client("10.1.1.1", "https")),
        (["by=10.0.0.1"], Client("10.0.0.1", "http")),
        (["For=198.51.100.7;Proto=HTTPS"], Client("198.51.100.7", "https")),
    ],
)
def test_forwarded(forwarded: list[str], expected: Client) -> None:
    """RFC 7239 §4-§6: each element's for= and proto= describe one hop."""
    proxies = TrustedProxies(parse_networks(["10.0.0.0/8"]), FORWARDED)
    assert proxies.client("10.0.0.1", "http", forwarded=forwarded) == expected


def test_only_the_configured_kind_is_read() -> None:
    """A balancer that writes X-Forwarded-For passes a client's Forwarded on untouched."""
    spoof = ["for=6.6.6.6"]
    assert TRUSTED.client("10.0.0.1", "http", forwarded=spoof) == Client("10.0.0.1", "http")
    proxies = TrustedProxies(parse_networks(["10.0.0.0/8"]), FORWARDED)
    assert proxies.client("10.0.0.1", "http", forwarded_for=["6.6.6.6"]) == Client(
        "10.0.0.1", "http"
    )


def test_nothing_trusted_reads_nothing() -> None:
    proxies = TrustedProxies(())
    assert not proxies
    assert proxies.client("127.0.0.1", "https", forwarded_for=["1.2.3.4"]) == Client(
        "127.0.0.1", "https"
    )


@pytest.mark.parametrize(
    ("trusted", "peer", "fields", "expected"),
    [
        # Each line of a field is read, in order, whatever the spelling of its name.
        (
            TRUSTED,
            "10.0.0.1",
            [("X-Forwarded-For", "6.6.6.6"), ("x-forwarded-for", "198.51.100.7")],
            Client("198.51.100.7", "http"),
        ),
        (
            TRUSTED,
            "10.0.0.1",
            [("X-Forwarded-For", "198.51.100.7"), ("X-Forwarded-Proto", "https")],
            Client("198.51.100.7", "https"),
        ),
        (
            TrustedProxies(parse_networks(["10.0.0.0/8"]), FORWARDED),
            "10.0.0.1",
            [("Forwarded", "for=198.51.100.7;proto=https")],
            Client("198.51.100.7", "https"),
        ),
        # Nobody trusted, or an untrusted peer: the peer and the listener's scheme.
        (
            TrustedProxies(()),
            "10.0.0.1",
            [("X-Forwarded-For", "1.2.3.4")],
            Client("10.0.0.1", "http"),
        ),
        (TRUSTED, "203.0.113.9", [("X-Forwarded-For", "1.2.3.4")], Client("203.0.113.9", "http")),
    ],
)
def test_request_client_reads_a_requests_fields(
    trusted: TrustedProxies, peer: str, fields: list[tuple[str, str]], expected: Client
) -> None:
    """The edge and the API ask ``request_client`` with their request (its peer, scheme and
    fields in a multidict, as aiohttp's)."""
    assert request_client(trusted, FakeRequest(peer, "http", CIMultiDict(fields))) == expected


def test_request_client_without_a_peer() -> None:
    """A request whose transport is gone has no peer: nobody to trust, an empty address."""
    request = FakeRequest(None, "https", CIMultiDict([("X-Forwarded-For", "1.2.3.4")]))
    assert request_client(TRUSTED, request) == Client("", "https")


@dataclass(frozen=True)
class FakeRequest:
    remote: str | None
    scheme: str
    headers: CIMultiDict[str]


@pytest.mark.parametrize("bad", ["10.0.0.1/8", "not-an-ip", "10.0.0.0/33", "", "::1/129"])
def test_bad_networks_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a CIDR"):
        parse_networks([bad])


def test_networks() -> None:
    assert [str(n) for n in parse_networks(["10.0.0.0/8", "::1", "192.0.2.1"])] == [
        "10.0.0.0/8",
        "::1/128",
        "192.0.2.1/32",
    ]
    assert TrustedProxies(()).header == X_FORWARDED_FOR


@given(st.lists(st.text(max_size=20), max_size=8), st.lists(st.text(max_size=8), max_size=4))
def test_any_chain_gives_an_address_never_an_error(xff: list[str], xfp: list[str]) -> None:
    client = TRUSTED.client("10.0.0.1", "http", forwarded_for=xff, forwarded_proto=xfp)
    assert client.scheme in ("http", "https")
    assert client.address == "10.0.0.1" or "," not in client.address


@given(st.lists(st.text(max_size=30), max_size=6))
def test_any_forwarded_gives_an_address(values: list[str]) -> None:
    proxies = TrustedProxies(parse_networks(["10.0.0.0/8"]), FORWARDED)
    assert proxies.client("10.0.0.1", "http", forwarded=values).scheme in ("http", "https")
