"""Which headers cross the proxy, in each direction, and the ones the proxy adds.

- Hop-by-hop fields (RFC 9110 §7.6.1), and any field a Connection header names, describe one
  connection and are removed both ways.
- Forwarding fields (Forwarded, X-Forwarded-*, X-Real-IP, X-Original-URL, ...) are removed from
  clients: the proxy sets the X-Forwarded-* trio itself, from what it saw, so an origin never
  takes a client's claim about its address, scheme or host as truth, and a client cannot
  steer an origin that trusts them (cache poisoning through unkeyed headers).
- The rest of the X-Forwarded-* family (X-Forwarded-User, -Email, -Groups, -Client-Cert:
  how oauth2-proxy and mTLS front ends tell an application who the user is) and the
  client-address aliases of other proxies and CDNs (CF-Connecting-IP, Client-IP, ...) pass
  only from a trusted proxy (edge.trusted_proxies), the front end the operator put there to
  write them; from any other peer they are removed (issue 24).
- Method-override fields are removed from cacheable requests, so a GET cannot be turned into
  something else behind the cache's back.
- Message framing (Content-Length, Transfer-Encoding) is never the client's: the edge reads
  the client's body by the client's framing, then the origin client frames the body it
  actually sends (bytes: their length; a stream: the length the edge checked, else chunked;
  nothing: none). A client's length passed on with no body behind it made the origin read
  the next request on a pooled connection as that body (issue 30, hole 1: an HTTP/2 HEADERS
  frame with END_STREAM and ``content-length: 57``).
- Names are compared with '_' read as '-': CGI and WSGI origins map both to '_', so
  ``X_Forwarded_Host`` would reach them as X-Forwarded-Host (the CVE-2015-0219 class); a
  framing field spelled with '_' (``Content_Length``) is removed with the rest of them.

``to_origin`` is the one function that builds a request head sent to an origin: the fill,
the forward, the tunnel and the trace's fetch all take theirs from it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import http_sf

from proxy.core.http.fields import Headers

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

CLIENT_FORWARDING = frozenset(
    {
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-port",
        "x-forwarded-server",
        "x-forwarded-scheme",
        "x-forwarded-ssl",
        "x-real-ip",
        "x-client-ip",
        "x-host",
        "x-original-url",
        "x-original-host",
        "x-rewrite-url",
        "true-client-ip",
        "cdn-loop",
        "cdn-proxy-peer-scheme",  # a fleet peer's key (decision 0047): never to an origin
        # Trusted by frameworks for the path or host they generate links and routes from.
        "x-forwarded-prefix",
        "x-forwarded-uri",
        "x-forwarded-path",
        "x-original-uri",
        "x-http-host-override",
        "surrogate-capability",  # only this proxy speaks for the surrogates in front of the origin
    }
)

# Written by a front end about the client or the user (besides the X-Forwarded-* family, which
# is matched by its prefix): believed from a trusted proxy only (``to_origin``).
FRONT_END = frozenset(
    {
        "x-forwarded",
        "front-end-https",
        "x-url-scheme",
        "cf-connecting-ip",
        "x-cluster-client-ip",
        "client-ip",
        "x-originating-ip",
        "x-proxyuser-ip",
        "x-original-forwarded-for",
    }
)

# Message framing: never passed on from a client, in any spelling (``field_name``).
FRAMING = frozenset({"content-length", "transfer-encoding"})

METHOD_OVERRIDE = frozenset({"x-http-method-override", "x-http-method", "x-method-override"})

# Conditional and range fields the cache answers itself on a fill (it fetches the whole
# representation, stores it, then answers the client's condition from it).
CLIENT_CONDITIONALS = frozenset(
    {"if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range", "range"}
)


# Set by the proxy on every origin request, whatever the client sent.
PROXY_SET = frozenset({"via", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"})

_NOT_PASSED_ON_FILL = (
    HOP_BY_HOP | CLIENT_FORWARDING | METHOD_OVERRIDE | CLIENT_CONDITIONALS | PROXY_SET
)


def field_name(name: str) -> str:
    """The name an origin may read a field under: lowercase, '_' read as '-'."""
    return name.lower().replace("_", "-")


def from_front_end(name: str) -> bool:
    """Is ``name`` (as ``field_name`` gives it) one a front end writes about the client or
    the user, passed on from a trusted proxy only?"""
    return name.startswith("x-forwarded-") or name in FRONT_END


def connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Field names listed in Connection: also hop-by-hop for this message."""
    tokens: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            tokens.update(field_name(t.strip()) for t in value.split(",") if t.strip())
    return tokens


def not_passed_on_fill(connection: Iterable[str]) -> frozenset[str]:
    """Names of the request fields a fill does not pass to the origin as the client sent
    them: removed (hop-by-hop, forwarding, method override, conditionals, and what this
    request's ``connection`` values name) or set by the proxy itself.

    A response that varies on one of them must not be stored: the origin chose it by a value
    other than the one the request carried, and it would be served to every client sending
    the value it was stored under (hop-by-hop abuse: ``Connection: Accept-Language``)."""
    return _NOT_PASSED_ON_FILL | connection_tokens(("connection", value) for value in connection)


def to_origin(
    headers: Iterable[tuple[str, str]],
    *,
    domain: str,
    client_address: str,
    scheme: str,
    via: str,
    cacheable: bool,
    accept_encoding: str | None = None,
    trusted_peer: bool = False,
) -> list[tuple[str, str]]:
    """The request headers sent to the origin. ``accept_encoding``, when given, replaces the
    client's Accept-Encoding: the one coding the request is keyed by (``encodings``).
    ``trusted_peer``: the request came from a trusted proxy, whose ``from_front_end`` fields
    are passed on."""
    items = list(headers)
    drop = HOP_BY_HOP | CLIENT_FORWARDING | FRAMING | connection_tokens(items) | {"host"}
    if cacheable:
        drop = drop | METHOD_OVERRIDE | CLIENT_CONDITIONALS
    if accept_encoding is not None:
        drop = drop | {"accept-encoding"}
    out = []
    for name, value in items:
        field = field_name(name)
        if field in drop or (not trusted_peer and from_front_end(field)):
            continue
        out.append((name, value))
    if accept_encoding is not None:
        out.append(("Accept-Encoding", accept_encoding))
    previous_via = [value for name, value in out if name.lower() == "via"]
    out = [(name, value) for name, value in out if name.lower() != "via"]
    out.append(("Host", domain))
    out.append(("Via", via_value(previous_via, via)))
    out.append(("X-Forwarded-For", client_address))
    out.append(("X-Forwarded-Proto", scheme))
    out.append(("X-Forwarded-Host", domain))
    return out


def via_value(previous: Iterable[str], via: str) -> str:
    """Via once this proxy, named ``via``, has passed the message on (RFC 9110 §7.6.3): the
    values it arrived with, in order, then this proxy's own entry, for HTTP/1.1. Requests and
    responses alike; a proxy adds one entry per message."""
    return ", ".join([*previous, f"1.1 {via}"])


def from_origin(headers: Iterable[tuple[str, str]]) -> Headers:
    """The origin's response headers minus hop-by-hop fields, and minus Content-Length,
    which the proxy sets from the body it actually sends."""
    items = list(headers)
    drop = HOP_BY_HOP | connection_tokens(items) | {"content-length", "cache-status"}
    return tuple((name, value) for name, value in items if name.lower() not in drop)


# Few distinct members are ever made (a name, a handful of fwd and detail values), and
# serialising one costs far more than looking it up.
@lru_cache(maxsize=256)
def cache_status(
    name: str,
    *,
    hit: bool = False,
    fwd: str | None = None,
    stored: bool = False,
    collapsed: bool = False,
    ttl: int | None = None,
    detail: str | None = None,
) -> str:
    """An RFC 9211 Cache-Status member for this cache: its name, then its parameters, each
    serialised as RFC 8941 says (``http_sf``), so any name or detail reads back as sent.

    The name is a Token when it can be one, else a String (§2); ``fwd`` is a Token (§2.2);
    ``detail`` a String (§2.8), with any character a String cannot carry (outside printable
    ASCII) replaced by '?'. Members are joined with "; " as in RFC 9211's own examples, which
    RFC 8941 §3.1.2 allows. Callers on the hit path still compute theirs once."""
    params: list[tuple[str, http_sf.types.BareItemType]] = []
    if hit:
        params.append(("hit", True))
    if fwd is not None:
        params.append(("fwd", http_sf.Token(fwd)))
    if stored:
        params.append(("stored", True))
    if collapsed:
        params.append(("collapsed", True))
    if ttl is not None:
        params.append(("ttl", ttl))
    if detail is not None:
        params.append(("detail", _NOT_STRING.sub("?", detail)))
    parts = [http_sf.ser(http_sf.Token(name) if _TOKEN.fullmatch(name) else name)]
    parts.extend(key if value is True else f"{key}={http_sf.ser(value)}" for key, value in params)
    return "; ".join(parts)


# RFC 8941 §3.3.4 (sf-token) and §3.3.3 (the characters an sf-string may hold).
_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9:/!#$%&'*+\-.^_`|~]*")
_NOT_STRING = re.compile(r"[^\x20-\x7e]")
