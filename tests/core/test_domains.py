"""Host names in one normal form (RFC 1123 §2.1 host names, RFC 5890 IDNA, RFC 9110 §7.2 Host)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.domains import InvalidDomain, host_from_header, normalise_domain

LABEL_63 = "a" * 63
NAME_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])  # 63+1+63+1+63+1+61 = 253
NAME_254 = NAME_253 + "d"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("example.com", "example.com"),
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),  # one trailing dot: the root, same name
        ("EXAMPLE.com.", "example.com"),
        ("bücher.example", "xn--bcher-kva.example"),  # IDNA / UTS-46
        ("BÜCHER.example", "xn--bcher-kva.example"),  # UTS-46 maps case first
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),  # already A-labels
        ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
        ("a\u3002com", "a.com"),  # ideographic full stop is a label separator (UTS-46)
        ("localhost", "localhost"),
        ("a-b.c0m", "a-b.c0m"),
        ("1.2.3.4", "1.2.3.4"),  # four numeric labels: an IPv4 literal, allowed
        ("a.1com", "a.1com"),
        (f"{LABEL_63}.com", f"{LABEL_63}.com"),
        (NAME_253, NAME_253),
        (NAME_253 + ".", NAME_253),  # the trailing dot does not count against 253
    ],
)
def test_normal_form(text: str, expected: str) -> None:
    """One spelling per host: lowercase, no trailing dot, A-labels for non-ASCII."""
    assert normalise_domain(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        ".",
        " ",
        " example.com",
        "example.com ",
        "example.com\n",
        "exa mple.com",
        "a..b",
        ".a.com",
        "a.com..",
        "-a.com",
        "a-.com",
        "a_b.com",
        f"{'a' * 64}.com",  # label over 63 octets
        NAME_254,  # name over 253 octets
        "a.com/x",
        "a.com:80",
        "user@a.com",
        "[::1]",
        "1.2.3",  # numeric top-level label, not an IPv4 literal either
        "a.123",
        "a\u200d.com",  # ZERO WIDTH JOINER: rejected by IDNA
        "\u2100.com",  # ℀ maps to "a/c" under UTS-46
        "\udcff.com",  # a lone surrogate (surrogateescape'd byte from the wire)
    ],
)
def test_rejected(text: str) -> None:
    """Anything that is not a host name raises InvalidDomain, never something else."""
    with pytest.raises(InvalidDomain):
        normalise_domain(text)


def test_invalid_domain_is_a_value_error() -> None:
    """Callers that catch ValueError (config parsing) also catch InvalidDomain."""
    assert issubclass(InvalidDomain, ValueError)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("example.com", "example.com"),
        ("Example.COM", "example.com"),
        ("example.com:80", "example.com"),
        ("example.com:8443", "example.com"),
        ("EXAMPLE.com.:8080", "example.com"),
        ("example.com:", "example.com"),  # RFC 3986: port = *DIGIT, may be empty
        ("bücher.example:443", "xn--bcher-kva.example"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("[::1]", None),  # IPv6 literals are never CDN domains
        ("[::1]:80", None),
        ("example.com:abc", None),
        ("example.com:123456", None),
        ("example.com:-1", None),
        ("a:b:c", None),
        (":80", None),
        ("", None),
        ("exa mple.com", None),
        ("example.com/evil", None),
        ("user@example.com", None),
        ("example.com\r\nX: y", None),
    ],
)
def test_host_from_header(value: str, expected: str | None) -> None:
    """RFC 9110 §7.2: Host = uri-host [ ":" port ]; the port is ignored for routing."""
    assert host_from_header(value) == expected


_HOSTISH = st.from_regex(r"[a-zA-Z0-9.\-_:ßüé。\[\] ]{0,30}", fullmatch=True)


@given(st.one_of(st.text(), _HOSTISH))
def test_normalise_is_idempotent_or_raises_invalid_domain(text: str) -> None:
    """Property: either InvalidDomain, or a normal form that normalises to itself."""
    try:
        name = normalise_domain(text)
    except InvalidDomain:
        return
    assert normalise_domain(name) == name
    assert name == name.lower()
    assert name.isascii()
    assert not name.endswith(".")
    assert len(name) <= 253


@given(st.one_of(st.text(), _HOSTISH))
def test_host_from_header_never_raises(value: str) -> None:
    """Property: any Host value gives None or a domain already in normal form."""
    host = host_from_header(value)
    if host is not None:
        assert normalise_domain(host) == host
