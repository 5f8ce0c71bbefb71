"""Cache keys and the request-target they are built from.

The key is the tuple (domain, generation, target): the normal domain from the Host header,
the domain's current generation (see proxy.store.base), and the path and query exactly as
the client sent them. Nothing is decoded or normalised in the target: ``/a%2fb`` and ``/a/b``
may be different resources to the origin, so they are different keys. Callers pass the three
parts (``entry.CacheKey``), never a string they joined, so no Host and path can be spelled to
collide with another domain's key.

The scheme is in the key too (RFC 9111 §2: a cache key is the method and the target URI,
whose scheme is part of it). The edge tells the origin the scheme it was asked over
(``X-Forwarded-Proto``), and origins answer by it: "redirect http to https" is the common
case, and one stored response answering both schemes would serve that redirect to https
clients too, a redirect loop for the whole site. The key's target for an https request is
the request-target with ``HTTPS_MARK`` after it (``cache_target``; a space cannot occur in
a request-target, so no http target looks like one); an http request's is the
request-target as it is, so a plain-HTTP edge pays nothing. Purges and invalidations name
request-targets and cover both schemes (``scheme_targets``); prefix bans match marked
targets as they are (the mark is a suffix); tags do not look at targets; what people read
(a dry run's sample) is the request-target (``target_of``).
"""

from __future__ import annotations

from proxy.core.domains import host_from_header


def request_target(raw: str, domain: str) -> str | None:
    """The origin-form target (path and query) for a request to ``domain``, or None if the
    request-target is not acceptable (RFC 9112 §3.2).

    Origin-form is taken as is. Absolute-form (``http://host/path``) is accepted only when
    its authority is the same domain as the Host header; any other authority is refused, so a
    request cannot be routed by one name and keyed or forwarded by another.
    """
    if raw.startswith("/"):
        return raw
    scheme, sep, rest = raw.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return None  # asterisk-form, authority-form, or junk
    cut = len(rest)
    for mark in "/?":
        position = rest.find(mark)
        if position != -1:
            cut = min(cut, position)
    authority, remainder = rest[:cut], rest[cut:]
    if host_from_header(authority) != domain:
        return None
    if not remainder.startswith("/"):
        remainder = "/" + remainder
    return remainder


HTTPS_MARK = " https"


def cache_target(target: str, https: bool) -> str:
    """The key's target for a request for ``target`` over https (or http)."""
    return target + HTTPS_MARK if https else target


def target_of(stored: str) -> str:
    """The request-target a key's target was made from (either scheme)."""
    return stored[: -len(HTTPS_MARK)] if stored.endswith(HTTPS_MARK) else stored


def scheme_targets(target: str) -> tuple[str, str]:
    """A request-target's key targets: its http one and its https one."""
    return target, target + HTTPS_MARK
