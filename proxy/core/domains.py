"""Host names: one normal form for config, the Host header and the clear-cache body.

A CDN domain is compared in one form only: lowercase ASCII (IDNA/UTS-46 for non-ASCII),
without a trailing dot, without a port. ``normalise_domain`` is for names given on their own
(config, API body); ``host_from_header`` is for the Host header, which may carry a port.
"""

from __future__ import annotations

import re
from functools import lru_cache

import idna

MAX_DOMAIN_LENGTH = 253
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_PORT = re.compile(r"^[0-9]{0,5}$")


class InvalidDomain(ValueError):
    """The text is not a host name."""


def normalise_domain(text: str) -> str:
    """Return the normal form of a host name, or raise InvalidDomain.

    Lowercases, drops one trailing dot and converts non-ASCII labels with IDNA (UTS-46).
    Rejects ports, paths, empty labels, bad characters and names over 253 octets.
    """
    name = text.strip() if text else ""
    if name != text:
        raise InvalidDomain("surrounding white space")
    if name.endswith("."):
        name = name[:-1]
    if not name:
        raise InvalidDomain("empty host name")
    if not name.isascii():
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise InvalidDomain(f"not a valid international host name ({exc})") from None
    name = name.lower()
    if len(name) > MAX_DOMAIN_LENGTH:
        raise InvalidDomain("longer than 253 characters")
    labels = name.split(".")
    for label in labels:
        if not _LABEL.match(label):
            raise InvalidDomain(f"label {label!r} is not a host name label")
    if labels[-1].isdigit() and len(labels) != 4:
        raise InvalidDomain("a numeric top-level label is not a host name")
    return name


@lru_cache(maxsize=4096)
def host_from_header(value: str) -> str | None:
    """The normal domain of a Host header value (port and trailing dot ignored), or None.

    Cached: the edge calls this for every request, and real traffic repeats a handful of
    spellings. The cache is bounded, so junk Host values cannot grow it.
    """
    host = value
    if host.startswith("["):
        return None  # IPv6 literals are never CDN domains.
    if ":" in host:
        host, _, port = host.rpartition(":")
        if not _PORT.match(port):
            return None
    try:
        return normalise_domain(host)
    except InvalidDomain:
        return None
