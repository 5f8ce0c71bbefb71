"""Compression at the edge (decision 0035): which responses are compressed, and the fields of
each copy. RFC 9110 §8.4 (content codings), §8.8.3 (entity tags), RFC 9111 §5.2.2.6
(no-transform), §4.1 (Vary)."""

from __future__ import annotations

import pytest

from proxy.core.http.compression import (
    DEFAULT_COMPRESS_TYPES,
    check_compress,
    check_compress_types,
    codings_of,
    encoded_fields,
    level_for,
    skip_reason,
    type_matches,
    with_vary,
)
from proxy.core.http.fields import Headers

HTML: Headers = (("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "max-age=60"))


@pytest.mark.parametrize(
    ("status", "extra", "length", "expected"),
    [
        (200, (), 1000, None),
        (200, (("Content-Encoding", "gzip"),), 1000, "encoded"),  # §8.4: already encoded
        (200, (("Content-Encoding", "identity"),), 1000, None),
        (200, (("Cache-Control", "public, no-transform"),), 1000, "no-transform"),  # §5.2.2.6
        (200, (), 255, "small"),
        (200, (), 256, None),
        (206, (("Content-Range", "bytes 0-9/1000"),), 10, "status"),  # a Range answer
        (200, (("Content-Range", "bytes 0-999/1000"),), 1000, "status"),
        (404, (), 1000, "status"),
        # Decision 0046: made per user, so never compressed (BREACH), and a size cap.
        (200, (("Vary", "Cookie"),), 1000, "per-user"),
        (200, (("Vary", "accept-language, AUTHORIZATION"),), 1000, "per-user"),
        (200, (("Vary", "Accept-Language"),), 1000, None),
        (200, (), 4096, None),
        (200, (), 4097, "large"),
    ],
)
def test_what_is_compressed(status: int, extra: Headers, length: int, expected: str | None) -> None:
    headers = HTML + tuple(extra)
    assert skip_reason(status, headers, length, DEFAULT_COMPRESS_TYPES, 256, 4096) == expected


@pytest.mark.parametrize(
    ("coding", "size", "level"),
    [
        ("br", 1000, 9),
        ("br", 128 * 1024, 9),
        ("br", 128 * 1024 + 1, 5),
        ("br", 1024**2 + 1, 4),
        ("br", 1024**3, 4),
        ("gzip", 1024**2, 6),
        ("gzip", 1024**2 + 1, 4),
        ("zstd", 1000, 12),
        ("zstd", 1024**2, 6),
        ("zstd", 8 * 1024**2, 3),
    ],
)
def test_the_level_is_fitted_to_the_size(coding: str, size: int, level: int) -> None:
    """Decision 0046: high levels for small bodies, lower ones as the CPU grows with size."""
    assert level_for(coding, size) == level


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/html", True),
        ("TEXT/CSS; charset=utf-8", True),
        ("application/json", True),
        ("application/problem+json", True),  # application/*+json
        ("application/javascript", True),
        ("image/svg+xml", True),
        ("application/atom+xml", True),
        ("application/wasm", True),
        ("image/png", False),
        ("application/octet-stream", False),
        ("font/woff2", False),
        ("", False),
        ("text", False),
        ("application/jsonx", False),
    ],
)
def test_default_types(content_type: str, expected: bool) -> None:
    assert type_matches(content_type, DEFAULT_COMPRESS_TYPES) is expected
    headers = (("Content-Type", content_type),)
    reason = skip_reason(200, headers, 1000, DEFAULT_COMPRESS_TYPES, 1)
    assert (reason is None) is expected


def test_compressed_copy_fields() -> None:
    """§8.8.3: the br copy's ETag is weak; its length and coding are its own; Vary lists
    Accept-Encoding (added to the origin's Vary)."""
    origin: Headers = (
        ("Content-Type", "text/html"),
        ("ETag", '"v1"'),
        ("Content-Length", "5000"),
        ("Vary", "Accept-Language"),
        ("Content-MD5", "x"),
    )
    br = dict(encoded_fields(origin, "br", 1200))
    assert br == {
        "Content-Type": "text/html",
        "Vary": "Accept-Language, Accept-Encoding",
        "ETag": 'W/"v1"',
        "Content-Encoding": "br",
        "Content-Length": "1200",
    }
    identity = encoded_fields(origin, "identity", 5000)
    assert dict(identity)["ETag"] == '"v1"'  # the origin's bytes: its strong validator holds
    assert dict(identity)["Vary"] == "Accept-Language, Accept-Encoding"
    assert dict(encoded_fields((("ETag", 'W/"w"'),), "gzip", 3))["ETag"] == 'W/"w"'


@pytest.mark.parametrize(
    ("fields", "vary"),
    [
        ((), ["Accept-Encoding"]),
        ((("Vary", "accept-encoding"),), ["accept-encoding"]),
        ((("Vary", "Origin"),), ["Origin, Accept-Encoding"]),
        ((("Vary", ""),), ["Accept-Encoding"]),
    ],
)
def test_vary_lists_accept_encoding_once(fields: Headers, vary: list[str]) -> None:
    assert [v for n, v in with_vary(fields) if n == "Vary"] == vary


def test_requests_are_read_against_the_compressed_codings() -> None:
    assert codings_of(("br", "gzip", "zstd"), ()) == ("br", "gzip", "zstd")
    assert codings_of(("br", "gzip", "zstd"), ("gzip", "br")) == ("gzip", "br")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("br", "must be a list"),
        (["deflate"], "'deflate' is not one of"),
        (["br", "br"], "listed twice"),
        (["identity"], "not one of"),
    ],
)
def test_compress_is_checked(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_compress(value)
    assert check_compress([]) == ()
    assert check_compress(["br", "gzip", "zstd"]) == ("br", "gzip", "zstd")


@pytest.mark.parametrize("value", ["text/*", ["text"], ["/json"], [3], ["text/ html"], ["a/*x"]])
def test_compress_types_are_checked(value: object) -> None:
    with pytest.raises(ValueError):
        check_compress_types(value)


def test_compress_types_are_lowercased_and_kept_once() -> None:
    assert check_compress_types(["Text/HTML", "text/html", "application/*+json"]) == (
        "text/html",
        "application/*+json",
    )
