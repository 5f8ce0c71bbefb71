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
clients too, a redirect loop for the whole site.

The scheme is a field of the key target, in the one place no request-target can fill: its
first character. Every request-target the edge keys is in origin-form and so begins with
"/" (``request_target`` makes it so; the fast path keys only a path that does); an http
request's key target is the request-target as it is (a plain-HTTP edge pays nothing), an
https request's is ``HTTPS_MARK`` followed by it. So the two sets of key targets are
disjoint by construction, whatever bytes a target holds (decision 0041). It used to be a
suffix, " https", which a target with a space could spell: ``/p https`` over http read and
wrote the https entry of ``/p`` (issue 30 item 2). ``cache_target`` is the one function
that decides the key target; ``target_of`` and ``scheme_targets`` are its inverses. Purges
and invalidations name request-targets and cover both schemes (``scheme_targets``); prefix
bans and URL purges match ``target_of`` a key target; tags do not look at targets; what
people read (a dry run's sample) is the request-target (``target_of``).
"""

from __future__ import annotations

from proxy.core.domains import host_from_header


def request_target(raw: str, domain: str) -> str | None:
    """The origin-form target (path and query) for a request to ``domain``, or None if the
    request-target is not acceptable (RFC 9112 §3.2).

    Origin-form is taken as is, but for an empty query: ``/a?`` is ``/a``, because that is
    what the origin is sent (the origin client's URL has no empty query), and the key must be
    the bytes the origin gets. Absolute-form (``http://host/path``) is accepted only when its
    authority is the same domain as the Host header; any other authority is refused, so a
    request cannot be routed by one name and keyed or forwarded by another.
    """
    if raw.startswith("/"):
        return _without_empty_query(raw)
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
    return _without_empty_query(remainder)


def _without_empty_query(target: str) -> str:
    return target[:-1] if target.endswith("?") and target.find("?") == len(target) - 1 else target


HTTPS_MARK = "https:"  # before the request-target, which begins with "/": never spelled by one


def cache_target(target: str, https: bool) -> str:
    """The key's target for a request for ``target`` (origin-form: it begins with "/") over
    https (or http)."""
    return HTTPS_MARK + target if https else target


def target_of(stored: str) -> str:
    """The request-target a key's target was made from (either scheme)."""
    return stored if stored[:1] == "/" else stored[len(HTTPS_MARK) :]


def scheme_targets(target: str) -> tuple[str, str]:
    """A request-target's key targets: its http one and its https one."""
    return target, HTTPS_MARK + target
