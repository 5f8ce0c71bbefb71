"""An HTTP/2 request head as the edge reads an HTTP/1.1 one (RFC 9113 §8.3): the pseudo-fields
give the method and target, ``:authority`` is the Host (§8.3.1), and the cookie crumbs a
client may send as several fields are one Cookie again (§8.2.3). ``malformed`` checks the
fields first (names, values, pseudo-fields, connection fields, the method and the target:
RFC 9113 §8.2-8.3, and what an HTTP/1.1 origin request can carry: decision 0044): a head
that fails is a stream error (RST_STREAM PROTOCOL_ERROR), never a request."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from multidict import CIMultiDict

from proxy.core.http.requests import METHODS, is_token, target_allowed

CONNECT_REFUSED = b"501 Not Implemented: CONNECT (and WebSocket over HTTP/2) is not served\n"
UNKNOWN_METHOD = b"400 Bad Request: a method this edge does not take\n"


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

    @property
    def refusal(self) -> tuple[int, bytes] | None:
        """The status and text the stream is answered with instead of the handler, or None:
        a method that is a token but not one the edge takes gets HTTP/1.1's answer to it,
        400 (``get`` included: it is never forwarded as some unknown, unsafe method); CONNECT,
        or a target not origin-form, 501."""
        if self.method not in METHODS:
            return 400, UNKNOWN_METHOD
        if not self.served:
            return 501, CONNECT_REFUSED
        return None


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
            cookies.append(value_b.decode())
        else:
            headers.add(name_b.decode("latin-1"), value_b.decode())
            raw.append((name_b, value_b))
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
        raw.append((b"cookie", headers["Cookie"].encode()))
    authority = pseudo.get(b":authority")
    if authority is not None:
        headers["Host"] = authority.decode()
    method = pseudo.get(b":method", b"").decode("latin-1")
    path = pseudo.get(b":path", b"").decode("latin-1")
    return Head(method, path, headers, tuple(raw))


# RFC 9113 §8.2.1: no upper case, no controls, space, DEL or non-ASCII in a name (':' only
# as a pseudo-field's first character); no white space at a value's ends. And no control
# but HTAB in a value (RFC 9110 §5.5): RFC 9113 refuses only NUL, CR and LF, but a VT or a
# DEL cannot be sent on in HTTP/1.1 (aiohttp's client raises on it; issue 30, hole 5).
_BAD_NAME = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9a-z]")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]|^[ \t]|[ \t]$")
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
            return "a field value with a control but HTAB, or white space at its ends"
        if not value.isascii() and not _utf8(value):
            # obs-text (RFC 9110 §5.5) is read as UTF-8, as aiohttp's HTTP/1.1 parser reads
            # it, so that the origin client sends the bytes received; other bytes past 0x7f
            # could not be sent as they came.
            return "a field value past ASCII that is not UTF-8"
    if trailers:
        return None
    method = pseudo.get(b":method")
    if method is None:
        return "no :method"
    if not is_token(method):
        return "a :method that is not a token"  # RFC 9110 §9.1; issue 30, holes 3 and 5
    if method == b"CONNECT":
        if b":authority" not in pseudo or b":path" in pseudo or b":scheme" in pseudo:
            return "CONNECT without :authority, or with :path or :scheme"
    else:
        path = pseudo.get(b":path")
        if not path or b":scheme" not in pseudo:
            return "no :path or :scheme"
        if not target_allowed(path, method):
            # Space, tab, controls, bytes past 0x7f or '#' (issue 30, hole 2), as nghttp2
            # and nginx refuse them: the key and the origin's target are the same bytes.
            return "a :path not origin-form, or with a character no target may have"
    authority = pseudo.get(b":authority")
    if host is not None and authority is not None and host != authority:
        return "Host names another entity than :authority"  # §8.3.1
    return None


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True
