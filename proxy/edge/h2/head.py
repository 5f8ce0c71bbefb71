"""An HTTP/2 request head as the edge reads an HTTP/1.1 one (RFC 9113 §8.3): the pseudo-fields
give the method and target, ``:authority`` is the Host (§8.3.1), and the cookie crumbs a
client may send as several fields are one Cookie again (§8.2.3). h2 has checked the fields
first (``malformed``: names, pseudo-fields, connection fields, RFC 9113 §8.2-8.3): a head
that fails is a stream error (RST_STREAM PROTOCOL_ERROR), never a request."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from multidict import CIMultiDict


@dataclass(frozen=True, slots=True)
class Head:
    method: str
    path: str  # :path, as sent
    headers: CIMultiDict[str]
    raw: tuple[tuple[bytes, bytes], ...]  # the regular fields, as sent (Cookie joined)

    @property
    def served(self) -> bool:
        """Whether the edge answers it: not CONNECT (extended or not: decision 0036), and
        an origin-form target, or ``*``."""
        return self.method != "CONNECT" and (self.path.startswith("/") or self.path == "*")


def read_head(fields: Iterable[tuple[bytes | str, bytes | str]]) -> Head:
    pseudo: dict[bytes, bytes] = {}
    headers: CIMultiDict[str] = CIMultiDict()
    raw: list[tuple[bytes, bytes]] = []
    cookies: list[str] = []
    for name, value in fields:
        name_b = name if isinstance(name, bytes) else name.encode()
        value_b = value if isinstance(value, bytes) else value.encode()
        if name_b[:1] == b":":
            pseudo[name_b] = value_b
        elif name_b == b"cookie":
            cookies.append(value_b.decode("latin-1"))
        else:
            headers.add(name_b.decode("latin-1"), value_b.decode("latin-1"))
            raw.append((name_b, value_b))
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
        raw.append((b"cookie", headers["Cookie"].encode("latin-1")))
    authority = pseudo.get(b":authority")
    if authority is not None:
        headers["Host"] = authority.decode("latin-1")
    method = pseudo.get(b":method", b"").decode("latin-1")
    path = pseudo.get(b":path", b"").decode("latin-1")
    return Head(method, path, headers, tuple(raw))


# RFC 9113 §8.2.1: no upper case, no controls, space, DEL or non-ASCII in a name (':' only
# as a pseudo-field's first character); no NUL, CR or LF in a value, and no white space at
# its ends.
_BAD_NAME = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9a-z]")
_BAD_VALUE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")
_REQUEST_PSEUDO = frozenset((b":method", b":scheme", b":authority", b":path"))
# §8.2.2: fields of an HTTP/1.1 connection never appear in HTTP/2.
_CONNECTION = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade")
)


# A content-length the edge reads as a number: 1 to 18 digits (nothing real is an exabyte;
# a longer one is refused before int() is asked to read it).
_LENGTH = re.compile(rb"[0-9]{1,18}")


def content_length(fields: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The request's declared content-length, once ``malformed`` has passed its head."""
    for name, value in fields:
        if name == b"content-length":
            return int(value)
    return None


def malformed(fields: Sequence[tuple[bytes, bytes]], *, trailers: bool = False) -> str | None:
    """Why a request's head (or its trailers) is malformed (RFC 9113 §8.1.1), or None.

    This is the head's one check, as nghttp2's ``http_request_on_header``: every rule about a
    single field or the set of them lives here. The rule that needs the body as well (a
    content-length equal to the DATA received) is the machine's end-of-stream hook."""
    pseudo: dict[bytes, bytes] = {}
    regular = False
    host: bytes | None = None
    length: bytes | None = None
    for name, value in fields:
        if name[:1] == b":":
            if trailers or regular:
                return "a pseudo-field after the fields, or in trailers"
            if name not in _REQUEST_PSEUDO or name in pseudo:
                return "an unknown or repeated pseudo-field"
            pseudo[name] = value
        else:
            regular = True
            if not name or _BAD_NAME.search(name):
                return "a field name that is empty, upper-case or has a forbidden character"
            if name in _CONNECTION or (name == b"te" and value != b"trailers"):
                return "a connection-specific field"
            if name == b"host":
                host = value
            elif name == b"content-length":
                # Framing is the frames'; the field is a claim checked against them, and a
                # second copy (equal or not) or a value that is no number is refused, as
                # nghttp2 does: an origin must never be told a length the edge did not check.
                if length is not None or trailers or not _LENGTH.fullmatch(value):
                    return "a content-length repeated or not a number"
                length = value
        if _BAD_VALUE.search(value):
            return "a field value with CR, LF, NUL or white space at its ends"
    if trailers:
        return None
    method = pseudo.get(b":method")
    if method is None:
        return "no :method"
    if method == b"CONNECT":
        if b":authority" not in pseudo or b":path" in pseudo or b":scheme" in pseudo:
            return "CONNECT without :authority, or with :path or :scheme"
    elif not pseudo.get(b":path") or b":scheme" not in pseudo:
        return "no :path or :scheme"
    authority = pseudo.get(b":authority")
    if host is not None and authority is not None and host != authority:
        return "Host names another entity than :authority"  # §8.3.1
    return None
