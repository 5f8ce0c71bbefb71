"""Cache keys and the request-target they are built from.

The key is the tuple (domain, generation, target): the normal domain from the Host header,
the domain's current generation (see proxy.store.base), and the path and query exactly as
the client sent them. Nothing is decoded or normalised in the target: ``/a%2fb`` and ``/a/b``
may be different resources to the origin, so they are different keys. Callers pass the three
parts (``entry.CacheKey``), never a string they joined, so no Host and path can be spelled to
collide with another domain's key.
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
