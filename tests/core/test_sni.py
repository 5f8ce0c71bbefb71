"""The Host-vs-SNI rule of the TLS listener (proxy/core/http/sni.py, decision 0018)."""

from __future__ import annotations

import pytest

from proxy.core.http.sni import misdirected, server_name


@pytest.mark.parametrize(
    ("sni", "expected"),
    [
        (None, None),  # no SNI sent
        ("example.com", "example.com"),
        ("Example.COM.", "example.com"),  # one normal form, as Host and config have
        ("bücher.example", "xn--bcher-kva.example"),
        ("not a name", "not a name"),
        ("127.0.0.1", None),  # RFC 6066 §3: no IP literals in SNI; wrk sends them anyway
        ("::1", None),  # kept, lowercased: it never equals a Host
    ],
)
def test_server_name_is_the_domain_normal_form(sni: str | None, expected: str | None) -> None:
    assert server_name(sni) == expected


@pytest.mark.parametrize(
    ("sni", "host", "expected"),
    [
        ("example.com", "example.com", False),
        ("example.com", "EXAMPLE.com:443", False),  # the port and case do not matter
        ("example.com", "example.com.", False),
        ("example.com", "other.test", True),  # RFC 9110 §15.5.20: 421
        ("example.com", "www.example.com", True),  # names are exact: no wildcard matching
        ("www.example.com", "example.com", True),
        ("example.com", "[::1]", True),
        ("example.com", "exa mple.com", True),  # not a host name at all
        (None, "example.com", False),  # no SNI: the Host alone routes
        (None, "other.test", False),
        ("example.com", None, False),  # no Host: the edge's own answer (421 for any listener)
    ],
)
def test_a_host_other_than_the_sni_name_is_misdirected(
    sni: str | None, host: str | None, expected: bool
) -> None:
    assert misdirected(sni, host) is expected
