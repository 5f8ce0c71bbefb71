"""TLS server names (SNI) and the Host header: which certificate, and which requests are
misdirected. Decision 0018 says why each rule is what it is.

Theory of operation. A TLS client names the host it wants in the ClientHello (SNI, RFC 6066
§3), before any HTTP is sent; the edge picks the certificate by that name, and the client
checks the certificate against it. Inside the connection the Host header names the domain
each request is for. The two must agree: a request for one domain on a connection set up
for another (a client that reuses one connection for two names, or a client that sends the
SNI of one domain to pass a filter and the Host of another: "domain fronting") is answered
421 Misdirected Request (RFC 9110 §15.5.20, §7.4), which tells a client to retry on a
connection of its own.

Rules, in ``server_name`` and ``misdirected``:

- A name is compared in the one normal form of proxy/core/domains.py (lowercase, no trailing
  dot, IDNA A-labels); a server name that is not a host name is kept lowercased, and never
  equals a Host.
- Certificates are chosen by exact name: a domain's certificate is served for its own name
  only, whatever names the certificate covers (a wildcard one too). SNI ``www.example.com``
  with only ``example.com`` configured gets the default certificate, or no handshake when
  there is none; its requests are 421, as on the plain listener, since ``www.example.com``
  is not a configured domain.
- Without SNI (old clients, or a client connecting to an IP address; an IP address sent as
  SNI counts as none), the default
  certificate is served and each request is routed by its Host alone, as on the plain
  listener. A client that accepted that certificate has already checked it against the name
  it wanted; the edge has no other name to compare with.
"""

from __future__ import annotations

import ipaddress

from proxy.core.domains import InvalidDomain, host_from_header, normalise_domain


def server_name(sni: str | None) -> str | None:
    """The normal form of the name a ClientHello sent (None: it sent none). An IP address is
    no name: RFC 6066 §3 forbids it in SNI, yet some clients (wrk) send the address they
    connect to, and it is taken as no SNI."""
    if sni is None:
        return None
    try:
        ipaddress.ip_address(sni)
    except ValueError:
        pass
    else:
        return None
    try:
        return normalise_domain(sni)
    except InvalidDomain:
        return sni.lower()


def misdirected(sni: str | None, host: str | None) -> bool:
    """Is a request with this Host misdirected on a connection whose normal SNI is ``sni``?

    RFC 9110 §15.5.20: 421 for a request "directed at a server that is unable or unwilling to
    produce an authoritative response for the target URI" on this connection. A request
    without a Host is not judged here: the edge answers it as it does on any listener."""
    if sni is None or host is None:
        return False
    return host_from_header(host) != sni
