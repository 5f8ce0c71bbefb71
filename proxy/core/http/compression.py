"""Compression at the edge, once per object (issue 26 §2, decision 0035): which responses the
edge compresses, and what each compressed copy says of itself.

A domain with ``compress = ["br", "gzip"]`` stores an uncompressed, cacheable response of a
compressible type once per coding it lists, plus the origin's identity copy, all as variants
of one key under ``Vary: Accept-Encoding`` (RFC 9111 §4.1). Each request's Accept-Encoding is
read against the ``compress`` list (``codings_of``; ``encodings.preferred``), so it selects
one of those copies: the best coding it accepts, else identity. Purges act on keys, so every
coding of an object goes with it; and a client can add no variant: there are at most
``len(compress) + 1`` per Vary combination.

Not compressed, and stored as today (``skip_reason``): a response already encoded (RFC 9110
§8.4), one with ``Cache-Control: no-transform`` (RFC 9111 §5.2.2.6), any status but 200 (a
206 is a Range answer from the origin: its bytes are a part of an identity body), a type not
in ``compress_types``, or a body under ``compress_min_bytes`` (a few hundred bytes gain
nothing, and cost a variant each). Decision 0046 adds two: a body over
``compress_max_bytes`` (its CPU, per miss, is bounded by the cap), and a response whose Vary
names Cookie or Authorization: it is made per user, so a secret of that user may sit in it
beside text an attacker chooses (a reflected parameter), and the compressed length then tells
the attacker, a guess at a time, whether the guess matched the secret (BREACH, 2013: 136
against 137 bytes was seen here). Such answers go out as the origin sent them.

The level is fitted to the size (``level_for``): each copy is made once and served many
times, so a small body gets a high level, but the CPU of a large one grows with its size
while the gain of a high level does not, so a larger body gets a lower level (measured on
text, decision 0046: brotli 9 makes 8 MB/s, 5 makes 35, 4 makes 42; gzip 6 makes 34, 4
makes 80, for 1 to 4 % more bytes).

The compressed copies' fields (``encoded_fields``): Content-Encoding and Content-Length of the
copy, a weak ETag (RFC 9110 §8.8.3: a strong validator changes with the bytes; a weak one
says "semantically equivalent", which a content coding is, and which the origin still matches
with If-None-Match's weak comparison, §13.1.2), and Vary listing Accept-Encoding on every copy.
The compressing itself is I/O shell work (edge/compress.py), in a thread.
"""

from __future__ import annotations

from proxy.core.http.encodings import check_codings
from proxy.core.http.fields import Headers
from proxy.core.http.httpdate import field_names

IDENTITY = "identity"
# What the edge can compress to (brotli, zlib, zstandard: edge/compress.py).
COMPRESSIBLE = ("br", "gzip", "zstd")
# Media types worth compressing (patterns: "text/*", "application/*+json"): text, and the
# structured text types that CDNs compress by default. Images, audio, video, fonts in woff2
# and archives are compressed already.
DEFAULT_COMPRESS_TYPES = (
    "text/*",
    "application/json",
    "application/*+json",
    "application/javascript",
    "application/x-javascript",
    "application/ecmascript",
    "application/xml",
    "application/*+xml",
    "image/svg+xml",
    "application/wasm",
)
DEFAULT_MIN_BYTES = 256
DEFAULT_MAX_BYTES = 4 * 1024**2
# Vary on these: made per user, never compressed (BREACH; decision 0046).
_PER_USER = frozenset({"cookie", "authorization"})
# Per coding, (up to this many bytes, level), smallest first; the last one has no bound.
LEVELS: dict[str, tuple[tuple[int | None, int], ...]] = {
    "br": ((128 * 1024, 9), (1024**2, 5), (None, 4)),
    "gzip": ((1024**2, 6), (None, 4)),
    "zstd": ((128 * 1024, 12), (1024**2, 6), (None, 3)),
}

# The fields that describe the identity bytes only: dropped from a compressed copy.
_OF_THE_BYTES = frozenset(
    {"content-length", "content-md5", "content-digest", "content-encoding", "etag"}
)


def codings_of(encodings: tuple[str, ...], compress: tuple[str, ...]) -> tuple[str, ...]:
    """The codings a domain's requests are read against (``encodings.preferred``): its
    ``compress`` list when it compresses (the copies it holds), else its ``encodings``."""
    return compress if compress else encodings


def skip_reason(
    status: int,
    headers: Headers,
    length: int,
    types: tuple[str, ...],
    min_bytes: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> str | None:
    """Why a storable response is stored as the origin sent it, or None to compress it.
    ``headers``: its fields; ``length``: its body's length."""
    if status != 200:
        return "status"  # 206 included: a part of an identity body (RFC 9110 §14.3)
    content_type = ""
    for name, value in headers:
        lowered = name.lower()
        if lowered == "content-encoding" and value.strip().lower() not in ("", IDENTITY):
            return "encoded"
        if lowered == "content-range":
            return "status"
        if lowered == "cache-control" and "no-transform" in value.lower():
            return "no-transform"  # RFC 9111 §5.2.2.6
        if lowered == "content-type":
            content_type = value
        if lowered == "vary" and _PER_USER.intersection(field_names(value)):
            return "per-user"  # BREACH
    if length < min_bytes:
        return "small"
    if length > max_bytes:
        return "large"
    if not type_matches(content_type, types):
        return "type"
    return None


def level_for(coding: str, size: int) -> int:
    """The level a body of ``size`` bytes is compressed at in ``coding`` (``LEVELS``)."""
    for upto, level in LEVELS[coding]:
        if upto is None or size <= upto:
            return level
    raise AssertionError("LEVELS ends with an unbounded step")


def type_matches(content_type: str, types: tuple[str, ...]) -> bool:
    """Does the media type of a Content-Type value (parameters aside, any case) match one of
    ``types``: exactly, by ``type/*``, or by a structured suffix ``type/*+suffix``?"""
    media = content_type.partition(";")[0].strip().lower()
    kind, slash, subtype = media.partition("/")
    if not slash or not kind or not subtype:
        return False
    for pattern in types:
        want_kind, _, want_sub = pattern.partition("/")
        if want_kind != kind:
            continue
        if want_sub in ("*", subtype):
            return True
        if want_sub.startswith("*+") and subtype.endswith(want_sub[1:]):
            return True
    return False


def encoded_fields(headers: Headers, coding: str, length: int) -> Headers:
    """The fields of the copy in ``coding`` (``identity``: the origin's bytes) of a response
    with ``headers``, ``length`` bytes long: Vary lists Accept-Encoding; a compressed copy has
    its own Content-Encoding and Content-Length and a weak ETag."""
    fields = with_vary(headers)
    if coding == IDENTITY:
        return fields
    kept = [(name, value) for name, value in fields if name.lower() not in _OF_THE_BYTES]
    etag = _last(headers, "etag")
    if etag is not None:
        kept.append(("ETag", weak(etag)))
    kept.append(("Content-Encoding", coding))
    kept.append(("Content-Length", str(length)))
    return tuple(kept)


def with_vary(headers: Headers) -> Headers:
    """The fields with Accept-Encoding in Vary (added to the last Vary, or as a new one)."""
    listed = [n for name, value in headers if name.lower() == "vary" for n in field_names(value)]
    if "accept-encoding" in listed:
        return headers
    fields = list(headers)
    for index in range(len(fields) - 1, -1, -1):
        name, value = fields[index]
        if name.lower() == "vary":
            fields[index] = (
                name,
                f"{value}, Accept-Encoding" if value.strip() else "Accept-Encoding",
            )
            return tuple(fields)
    fields.append(("Vary", "Accept-Encoding"))
    return tuple(fields)


def weak(etag: str) -> str:
    """The entity tag as a weak one (RFC 9110 §8.8.3): ``"x"`` becomes ``W/"x"``."""
    etag = etag.strip()
    return etag if etag.startswith("W/") else f"W/{etag}"


def check_compress(value: object) -> tuple[str, ...]:
    """A domain's ``compress`` list, checked: codings the edge can produce, each once; empty
    (the default) compresses nothing. Raises ValueError with the reason."""
    return check_codings(value, COMPRESSIBLE)


def check_compress_types(value: object) -> tuple[str, ...]:
    """A domain's ``compress_types``: media types (``type/subtype``, ``type/*`` or
    ``type/*+suffix``), lowercased. Raises ValueError with the reason."""
    if not isinstance(value, list):
        raise ValueError('must be a list of media types such as "text/*" or "application/json"')
    types: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise ValueError(f"{item!r} is not a media type")
        kind, slash, subtype = item.strip().lower().partition("/")
        token = kind.replace("-", "").replace(".", "").replace("+", "")
        rest = subtype.removeprefix("*+") if subtype.startswith("*+") else subtype
        valid_sub = subtype == "*" or (rest and all(c.isalnum() or c in "-.+" for c in rest))
        if not slash or not token.isalnum() or not valid_sub:
            raise ValueError(f"{item!r} is not a media type such as text/* or application/json")
        types.append(f"{kind}/{subtype}")
    return tuple(dict.fromkeys(types))


def _last(headers: Headers, lowered_name: str) -> str | None:
    found = None
    for name, value in headers:
        if name.lower() == lowered_name:
            found = value
    return found
