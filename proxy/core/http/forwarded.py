"""Who the client is: the address and scheme to believe for a request (issue 14 §2).

Theory of operation. A request's peer is whoever opened the connection. Behind a TLS
terminator or a load balancer that is the balancer, and the client is named in a field the
balancer wrote: X-Forwarded-For with X-Forwarded-Proto, or Forwarded (RFC 7239). Anyone can
write those fields, so they are read only when the peer is one of the configured trusted
proxies (``TrustedProxies``), and then only the one kind the operator named
(``forwarded_header``): a balancer that writes X-Forwarded-For passes a client's own
Forwarded on untouched, and believing it would let any client choose its address.

The walk is nginx's ``real_ip_recursive on``: the list of addresses is read from the right
(the entry the trusted peer appended), and each hop that is itself a trusted proxy is
skipped; the first address that is not trusted is the client. If every hop is trusted, the
leftmost is the client. An entry that is not an address (``unknown``, an obfuscated
identifier, garbage) ends the walk: the client is then the last trusted hop, the one that
wrote that entry, since nothing it reported can be believed. The scheme is the
X-Forwarded-Proto (or ``proto=``) entry at the client's position in the chain, or the last
entry when the two lists differ in length; only ``http`` and ``https`` are believed.

Sans-I/O: callers pass the peer address, the connection's scheme and the fields' values.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

X_FORWARDED_FOR = "x-forwarded-for"
X_FORWARDED_PROTO = "x-forwarded-proto"
FORWARDED = "forwarded"
HEADER_KINDS = (X_FORWARDED_FOR, FORWARDED)
SCHEMES = frozenset({"http", "https"})
MAX_HOPS = 64  # a longer chain is read from its right end only


@dataclass(frozen=True, slots=True)
class Client:
    """The address and scheme believed for a request."""

    address: str
    scheme: str


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """CIDRs (IPv4 or IPv6; a bare address is a /32 or /128). ValueError names a bad one."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=True))
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a CIDR such as 10.0.0.0/8 ({exc})") from None
    return tuple(networks)


class TrustedProxies:
    """The peers whose forwarding fields are believed, and which kind of field they write."""

    __slots__ = ("_header", "_known", "_networks")

    def __init__(self, networks: Sequence[Network], header: str = X_FORWARDED_FOR) -> None:
        if header not in HEADER_KINDS:
            raise ValueError(f"unknown forwarding header {header!r}")
        self._networks = tuple(networks)
        self._header = header
        self._known: dict[str, bool] = {}  # peer address -> trusted, for the peers seen lately

    @property
    def header(self) -> str:
        """The field the trusted proxies write: ``x-forwarded-for`` or ``forwarded``."""
        return self._header

    def __bool__(self) -> bool:
        return bool(self._networks)

    def trusts(self, address: str) -> bool:
        """Is ``address`` (a peer, or a hop of a chain) one of the trusted proxies?"""
        known = self._known.get(address)
        if known is None:
            parsed = _address(address)
            known = parsed is not None and any(parsed in net for net in self._networks)
            if len(self._known) >= 4096:
                self._known.clear()  # bounded: a chain can name any address
            self._known[address] = known
        return known

    def client(
        self,
        peer: str,
        scheme: str,
        *,
        forwarded_for: Iterable[str] = (),
        forwarded_proto: Iterable[str] = (),
        forwarded: Iterable[str] = (),
    ) -> Client:
        """The client of a request from ``peer`` over ``scheme``, given the values of its
        X-Forwarded-For, X-Forwarded-Proto and Forwarded fields (each line as received)."""
        if not self._networks or not self.trusts(peer):
            return Client(peer, scheme)
        if self._header == FORWARDED:
            hops = [_forwarded_hop(element) for element in _split(forwarded)]
        else:
            addresses = _split(forwarded_for)
            protos = protos_given = _split(forwarded_proto)
            if len(protos) != len(addresses):  # only the last one is placed for sure
                protos = [""] * len(addresses)
                if addresses and protos_given:
                    protos[-1] = protos_given[-1]
            hops = list(zip(addresses, protos, strict=True))
        return self._walk(peer, scheme, hops[-MAX_HOPS:])

    def _walk(self, peer: str, scheme: str, hops: Sequence[tuple[str, str]]) -> Client:
        client = Client(peer, scheme)
        for raw, proto in reversed(hops):
            address = _address(raw)
            if address is None:
                return client  # not an address: the hop that wrote it is as far as we know
            proto = proto.lower()
            client = Client(str(address), proto if proto in SCHEMES else client.scheme)
            if not self.trusts(client.address):
                return client
        return client


class FieldLines(Protocol):
    """A request's fields, every line of a name in order: a multidict (aiohttp's headers)."""

    def getall(self, key: str, default: tuple[()], /) -> list[str] | tuple[()]: ...


class Request(Protocol):
    """What ``request_client`` reads of a request (aiohttp's ``BaseRequest`` has it): its
    peer's address, the listener's scheme and its fields."""

    @property
    def remote(self) -> str | None: ...

    @property
    def scheme(self) -> str: ...

    @property
    def headers(self) -> FieldLines: ...


def request_client(trusted: TrustedProxies, request: Request) -> Client:
    """The client of ``request``: its peer over the listener's scheme, or who a trusted proxy
    says it is in the request's forwarding fields. Used by the edge (for its keys and its
    origin requests) and by the API (for its logs and limits)."""
    peer = request.remote or ""
    if not trusted:
        return Client(peer, request.scheme)
    fields = request.headers
    return trusted.client(
        peer,
        request.scheme,
        forwarded_for=fields.getall(X_FORWARDED_FOR, ()),
        forwarded_proto=fields.getall(X_FORWARDED_PROTO, ()),
        forwarded=fields.getall(FORWARDED, ()),
    )


def _split(values: Iterable[str]) -> list[str]:
    """The comma-separated entries of every line of a field, in order, blanks dropped."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _forwarded_hop(element: str) -> tuple[str, str]:
    """``for`` and ``proto`` of one Forwarded element (RFC 7239 §4), "" when absent."""
    found = {"for": "", "proto": ""}
    for pair in element.split(";"):
        name, _, value = pair.partition("=")
        name = name.strip().lower()
        if name in found:
            found[name] = value.strip().strip('"')
    return found["for"], found["proto"]


def _address(text: str) -> Address | None:
    """An IP address from a chain entry: ``1.2.3.4``, ``1.2.3.4:80``, ``::1``, ``[::1]``,
    ``[::1]:80``; None for anything else (``unknown``, ``_hidden``, a host name)."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]  # IPv4 with a port
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
