"""What a request asks of the cache: whether it may be answered from a stored response at all,
and whether it is the plain kind that a fresh stored response answers exactly as stored.

Both the edge's full path and its fresh-hit fast path ask these two questions here, so the
rules have one home (the fast path only adds what its way of writing needs: HTTP/1.1 and a
connection kept open).
"""

from __future__ import annotations

import re
from typing import Protocol

from multidict import istr

# RFC 9110 §9.2.1. Any other method is unsafe: sent to the origin, and a success invalidates
# the URL (RFC 9111 §4.4).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# The methods this cache stores and answers (RFC 9111 §2: GET; a HEAD is answered from the
# stored GET, §4). POST responses are never stored here, whatever their freshness (§9.3.3).
CACHEABLE_METHODS = frozenset({"GET", "HEAD"})

# The methods the edge takes, on HTTP/1.1 and HTTP/2 alike (issue 30, hole 3; decision
# 0044): llhttp's, which aiohttp's HTTP/1.1 parser holds every request to (any other,
# lower case or unknown, gets a 400 there). A method is case-sensitive (RFC 9110 §9.1): an
# HTTP/2 ``get`` forwarded as an unknown, unsafe method became aiohttp's client's ``GET``
# at the origin, and its success invalidated the URL for everyone. Every method here is
# upper case already, so the one sent is the one judged.
METHODS = frozenset(
    {
        *("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"),
        *("COPY", "LOCK", "MKCOL", "MOVE", "PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK"),
        *("BIND", "REBIND", "UNBIND", "ACL", "REPORT", "MKACTIVITY", "CHECKOUT", "MERGE"),
        *("M-SEARCH", "NOTIFY", "SUBSCRIBE", "UNSUBSCRIBE", "PURGE", "MKCALENDAR", "LINK"),
        *("UNLINK", "SOURCE", "QUERY"),
    }
)
# RFC 9110 §5.6.2: a method is a token.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# An origin-form target (RFC 9112 §3.2.1) of the characters llhttp takes in HTTP/1.1's
# (the visible ASCII: no space, control, DEL or byte past 0x7f), but '#': a fragment is no
# part of a request (RFC 9110 §7.1), and the origin client would cut it where the cache key
# keeps it. RFC 3986 alone would also refuse '"', '<', '{', '|', '^' and the like, which
# browsers send unencoded (the WHATWG URL standard leaves them so in a query).
_ORIGIN_FORM = re.compile(rb"/[!\"$-~]*")


def is_token(method: bytes) -> bool:
    """Whether ``method`` is a token (RFC 9110 §5.6.2): no space, control or separator."""
    return _TOKEN.fullmatch(method) is not None


def target_allowed(target: bytes, method: bytes) -> bool:
    """Whether an HTTP/2 request's ``:path`` may reach the cache and an origin: origin-form
    of visible ASCII but '#' (the key and the origin's request line are then the same
    bytes), or '*' for OPTIONS (RFC 9113 §8.3.1)."""
    if target == b"*":
        return method == b"OPTIONS"
    return _ORIGIN_FORM.fullmatch(target) is not None


# Case-insensitive names (multidict's istr): a header mapping looks them up without
# lowering them on every request.
_CACHE_CONTROL = istr("Cache-Control")
_PRAGMA = istr("Pragma")
_IF_NONE_MATCH = istr("If-None-Match")
_IF_MODIFIED_SINCE = istr("If-Modified-Since")
_RANGE = istr("Range")
_UPGRADE = istr("Upgrade")
# The same names in lower case: the fields ``plain_get`` refuses, for a mapping whose names
# are lower case already (the hit lane's: core/http/lane.py).
PLAIN_GET_BARRED = frozenset(
    name.lower()
    for name in (_CACHE_CONTROL, _PRAGMA, _IF_NONE_MATCH, _IF_MODIFIED_SINCE, _RANGE, _UPGRADE)
)


class FieldNames(Protocol):
    """A request's header mapping, as far as these rules read it."""

    def __contains__(self, name: object, /) -> bool: ...


def may_use_cache(method: str, headers: FieldNames, *, has_body: bool) -> bool:
    """May the cache look this request up (and store what answers it)? Only GET and HEAD
    without a body. A Range request is answered from the whole stored response (core/ranges.py,
    decision 0021); only whole responses are stored (RFC 9111 §3.3 allows, never requires,
    storing partial ones)."""
    return method in CACHEABLE_METHODS and not has_body


def plain_get(method: str, headers: FieldNames, *, has_body: bool) -> bool:
    """A GET that a fresh stored response answers exactly as stored: no body, no request
    directives (RFC 9111 §5.2.1, Pragma §5.4), no validators of the client's own (RFC 9110
    §13.1: answered with a 304 by the full path), no Range, and no Upgrade (which the origin
    may answer by switching protocols: core/upgrade.py). For any other request the full rules
    decide (policy.py)."""
    return (
        method == "GET"
        and not has_body
        and _CACHE_CONTROL not in headers
        and _PRAGMA not in headers
        and _IF_NONE_MATCH not in headers
        and _IF_MODIFIED_SINCE not in headers
        and _RANGE not in headers
        and _UPGRADE not in headers
    )
