"""Protocol upgrades (RFC 9110 §7.8): which requests the edge tunnels to their origin, and the
heads it sends on each side.

A request is tunnelled when it asks to switch, properly, to a protocol that is not HTTP:

- HTTP/1.1 only: a server MUST ignore Upgrade in an HTTP/1.0 request (§7.8), and HTTP/2 has
  no Upgrade;
- Connection names the "upgrade" option (a sender of Upgrade MUST send it, §7.8);
- Upgrade lists one or more ``protocol-name ["/" protocol-version]`` tokens;
- no body: §7.8 lets a server switch after reading one, but then the body is the client's
  first bytes on a connection the origin has not agreed to switch yet; such a request, and
  every other that fails a rule here, is forwarded as any request, its Upgrade dropped
  (hop-by-hop), so the origin answers it in HTTP/1.1;
- not CONNECT, which names a host to tunnel to, not a protocol;
- no protocol of the list is HTTP itself (h2c, HTTP/2.0) or TLS (RFC 2817, HTTP inside):
  after the switch the client would speak HTTP straight to the origin, past the edge's
  routing and its removal of forwarding fields: the "h2c smuggling" class of attacks;
- and the protocols are on the operator's allowlist (edge.upgrade_protocols, "websocket"
  unless configured: issue 24): only those of the list that are allowed are offered to the
  origin, and a request offering none of them is not tunnelled. An allowlist rather than a
  blocklist, so a protocol nobody vetted (``http2``, a private one) is not tunnelled because
  an origin happens to answer 101.

A request that asks for an upgrade and is not tunnelled is answered as any request and its
connection then closed (the edge's handler): aiohttp's parser treats only "websocket" as an
upgrade and drops whatever followed the head of any other in the same read, so a request
pipelined behind it would otherwise be lost without an answer.

What the origin is sent is the forwarded request's head (headers.to_origin) with the upgrade
put back: ``Connection: upgrade`` and the client's Upgrade. A 101 from the origin is relayed
only if it names protocols the client offered (a server MUST NOT switch to one it was not
offered, §15.2.2); its hop-by-hop fields are dropped, and Connection and Upgrade sent again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from proxy.core.http.fields import Headers
from proxy.core.http.headers import from_origin, via_value

# RFC 9110 §7.8: protocol = protocol-name ["/" protocol-version], both tokens (§5.6.2).
_TCHARS = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_PROTOCOL = re.compile(rf"({_TCHARS})(?:/({_TCHARS}))?")
# Names of protocols that carry HTTP: a tunnel to one would be an HTTP connection past the edge.
_HTTP_NAMES = frozenset({"http", "h2c", "h2", "tls"})
DEFAULT_ALLOWED = ("websocket",)


def check_allowlist(values: object) -> tuple[str, ...]:
    """The protocol names of a configured allowlist, lowercase (edge.upgrade_protocols).
    ValueError names what is wrong: not a list of tokens, or a protocol that carries HTTP."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError('must be a list of protocol names such as ["websocket"]')
    names: list[str] = []
    for value in values:
        if not re.fullmatch(_TCHARS, value):
            raise ValueError(f"{value!r} is not a protocol name (RFC 9110 §7.8: a token)")
        if value.lower() in _HTTP_NAMES:
            raise ValueError(
                f"{value!r} carries HTTP: tunnelled, it would pass the edge's routing and rules"
            )
        if value.lower() not in names:
            names.append(value.lower())
    return tuple(names)


def tunnel_protocols(
    *,
    method: str,
    version: tuple[int, int],
    has_body: bool,
    connection: Sequence[str],
    upgrade: Sequence[str],
    allowed: Sequence[str] = DEFAULT_ALLOWED,
) -> str | None:
    """The Upgrade value to send the origin when the request is to be tunnelled; None when it
    is a request like any other. ``connection`` and ``upgrade`` are the values of every
    Connection and Upgrade field line of the request, as sent; ``allowed``: the lowercase
    names of the protocols that may be tunnelled (``check_allowlist``)."""
    if not upgrade or version != (1, 1) or has_body or method == "CONNECT":
        return None
    if "upgrade" not in _options(connection):
        return None
    protocols = _protocols(upgrade)
    if not protocols or any(name.lower() in _HTTP_NAMES for name, _ in protocols):
        return None
    protocols = [(name, version) for name, version in protocols if name.lower() in allowed]
    if not protocols:
        return None
    return ", ".join(f"{name}/{version}" if version else name for name, version in protocols)


def origin_fields(forwarded: Iterable[tuple[str, str]], protocols: str) -> list[tuple[str, str]]:
    """The head fields of the upgrade request to the origin: the forwarded request's fields
    (which carry no Connection or Upgrade: headers.to_origin drops them), then the upgrade."""
    return [*forwarded, ("Connection", "upgrade"), ("Upgrade", protocols)]


def switched_fields(origin: Headers, *, offered: str, via: str) -> Headers | None:
    """The fields of the 101 relayed to the client, or None when the origin's 101 may not be
    relayed: it names no protocol, a malformed one, or one the client did not offer."""
    values = [value for name, value in origin if name.lower() == "upgrade"]
    chosen = _protocols(values)
    offered_set = {_key(protocol) for protocol in _protocols([offered])}
    if not chosen or any(_key(protocol) not in offered_set for protocol in chosen):
        return None
    fields = from_origin(origin)  # hop-by-hop fields, and any the origin's Connection names
    previous_via = [value for name, value in fields if name.lower() == "via"]
    return (
        *((name, value) for name, value in fields if name.lower() != "via"),
        ("Via", via_value(previous_via, via)),
        ("Connection", "upgrade"),
        ("Upgrade", ", ".join(values)),
    )


def _options(connection: Sequence[str]) -> set[str]:
    return {option.strip().lower() for value in connection for option in value.split(",")}


def _protocols(values: Sequence[str]) -> list[tuple[str, str | None]]:
    """The protocols a list of Upgrade values names, in order; [] if any member is not one
    (empty list members, as "a, , b", are allowed and skipped: §5.6.1)."""
    protocols: list[tuple[str, str | None]] = []
    for value in values:
        for member in value.split(","):
            member = member.strip(" \t")
            if not member:
                continue
            match = _PROTOCOL.fullmatch(member)
            if match is None:
                return []
            protocols.append((match.group(1), match.group(2)))
    return protocols


def _key(protocol: tuple[str, str | None]) -> tuple[str, str | None]:
    # Tokens are case-sensitive, but both "WebSocket" and "websocket" are registered: compared
    # without case, as RFC 6455 §4.1 does and the HTTP WG advises recipients to (http-core#8).
    name, version = protocol
    return name.lower(), version
