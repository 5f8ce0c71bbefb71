"""TLS on the edge: the listener's contexts, the certificate SNI chooses, the Host-vs-SNI
check, and the contexts that verify https:// origins (decision 0018).

``EdgeTls`` holds every context the edge uses, loaded from the config (the files are read
by proxy/config/tls.py, which names the key of a bad one):

- the listener's context: made once, it holds no certificate of its own. Its SNI callback
  (``ssl.SSLContext.sni_callback``) hands each new connection the context of the domain its
  ClientHello names, or the default certificate's, or refuses the handshake with the
  ``unrecognized_name`` alert when there is no default (RFC 6066 §3). Which name gets which
  certificate is proxy/core/http/sni.py's rule.
- one client context per domain with ``origin_ca``: it trusts that bundle instead of the
  system store. Every other https:// origin is verified against the system store (``True``:
  aiohttp's default context). The origin session is shared by every domain, so the context
  is passed with each request, and connections are pooled per context.

``reconfigure(config)`` loads every context of the new config first and swaps them in one
assignment: a bad file leaves the running ones in force (ConfigError), new connections get
the new certificates, and connections already open keep the ones they were set up with.

All contexts are TLS 1.2 or later, ECDHE key exchange with AEAD ciphers for TLS 1.2 (TLS 1.3
suites are all AEAD), no compression, no renegotiation. ALPN offers h2 then http/1.1, or
http/1.1 alone with ``[edge] http2 = false`` (decision 0036): a connection that chose h2 is
served by proxy/edge/h2/. Every context offers the same list, as the one a connection ends
with after the SNI callback is the one whose ALPN choice counts.
"""

from __future__ import annotations

import ssl
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import hdrs, web

from proxy.config.model import Config
from proxy.config.tls import load_origin_ca, load_server_pair
from proxy.core.http.sni import misdirected, server_name
from proxy.edge import respond

# TLS 1.2 suites: forward secrecy (ECDHE) and authenticated encryption (GCM, ChaCha20-Poly1305),
# for RSA and ECDSA certificates alike; the CBC and SHA-1 suites are left out.
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL"
ALPN = ("h2", "http/1.1")
ALPN_HTTP1 = ("http/1.1",)
MISDIRECTED = "421 Misdirected Request: this connection was set up for another host"


def server_context(*, http2: bool = True) -> ssl.SSLContext:
    """A server context with the edge's settings and no certificate yet; ALPN offers h2
    with ``http2``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(CIPHERS)
    context.set_alpn_protocols(list(ALPN if http2 else ALPN_HTTP1))
    context.options |= (
        ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION | ssl.OP_CIPHER_SERVER_PREFERENCE
    )
    return context


@dataclass(frozen=True, slots=True)
class _Contexts:
    default: ssl.SSLContext | None  # [edge] tls_cert
    by_name: Mapping[str, ssl.SSLContext]  # domains with a tls_cert of their own
    origins: Mapping[str, ssl.SSLContext]  # domains with an origin_ca


def _load(config: Config) -> _Contexts:
    default = None
    http2 = http2_on(config)
    if config.edge is not None and config.edge.tls_cert and config.edge.tls_key:
        default = server_context(http2=http2)
        load_server_pair(default, config.edge.tls_cert, config.edge.tls_key, "edge")
    by_name: dict[str, ssl.SSLContext] = {}
    origins: dict[str, ssl.SSLContext] = {}
    for index, domain in enumerate(config.domains):
        where = f"domains[{index}]"
        if domain.tls_cert is not None and domain.tls_key is not None:
            by_name[domain.name] = context = server_context(http2=http2)
            load_server_pair(context, domain.tls_cert, domain.tls_key, where)
        if domain.origin_ca is not None:
            origins[domain.name] = load_origin_ca(domain.origin_ca, where)
    return _Contexts(default, by_name, origins)


def http2_on(config: Config) -> bool:
    """Whether the TLS listener offers h2 (``[edge] http2``, on by default)."""
    return config.edge is None or config.edge.http2


class EdgeTls:
    """Every TLS context of one edge process; ``reconfigure`` swaps them all at once."""

    def __init__(self, config: Config) -> None:
        self._contexts = _load(config)
        self._http2 = http2_on(config)  # the listener's, for the process's life
        self._listener: ssl.SSLContext | None = None
        # The normal SNI of each TLS connection that sent one, for the Host check; an entry
        # goes with its connection's SSL object.
        self._names: weakref.WeakKeyDictionary[ssl.SSLObject, str] = weakref.WeakKeyDictionary()
        self.url: str | None = None  # https://HOST:PORT once the listener is up

    def reconfigure(self, config: Config) -> None:
        """Load the new config's contexts, then swap them in (ConfigError: nothing changes)."""
        self._contexts = _load(config)

    def listener_context(self) -> ssl.SSLContext:
        """The context the TLS listener is made with (the same one for the process's life:
        certificates are swapped by the SNI callback, never in it)."""
        if self._listener is None:
            self._listener = server_context(http2=self._http2)
            self._listener.sni_callback = self._choose
        return self._listener

    def _choose(self, connection: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> int | None:
        """The SNI callback: set the connection's certificate (its context) by name."""
        contexts = self._contexts
        sni = server_name(name)
        chosen = contexts.by_name.get(sni) if sni is not None else None
        if chosen is None:
            chosen = contexts.default
        if chosen is None:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        connection.context = chosen
        if sni is not None:
            self._names[connection] = sni
        return None

    def sni(self, request: web.BaseRequest) -> str | None:
        """The normal SNI of the request's connection (None: it sent none)."""
        transport = request.transport
        connection = transport.get_extra_info("ssl_object") if transport is not None else None
        return None if connection is None else self._names.get(connection)

    def sni_of(self, transport: object) -> str | None:
        """``sni`` of a connection's transport (the hit lane's: it has no request)."""
        get = getattr(transport, "get_extra_info", None)
        connection = get("ssl_object") if get is not None else None
        return None if connection is None else self._names.get(connection)

    def origin(self, domain: str) -> ssl.SSLContext | bool:
        """How the domain's https:// origin is verified: its own CA bundle, else the system
        store (True). Ignored for an http:// origin."""
        return self._contexts.origins.get(domain, True)


Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class TlsHandler:
    """The TLS listener's handler: the edge's, behind the Host-vs-SNI check (421)."""

    def __init__(self, handle: Handler, tls: EdgeTls) -> None:
        self._handle = handle
        self._tls = tls

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if misdirected(self._tls.sni(request), request.headers.get(hdrs.HOST)):
            return respond.text(421, MISDIRECTED)
        return await self._handle(request)
