"""The API listener's client: behind a trusted proxy, who the proxy says it is (issue 14 §2).

``[api] trusted_proxies`` and ``forwarded_header`` are the API listener's own, apart from the
edge's: the control plane often sits behind a different proxy (or none) than the edge, and a
node may run only one of them. With none configured (the default), nothing is read and the
peer is the client, as before. Otherwise a middleware, first of all, hands every handler the
request cloned with the believed address and scheme (aiohttp's ``Request.clone``), so the
rate limits of wrong tokens and of sign-ins, the audit log and the dashboard's log lines all
see the client rather than the proxy (proxy/core/http/forwarded.py has the rule).
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from proxy.config.model import ApiConfig
from proxy.core.http.forwarded import TrustedProxies, request_client


def install(app: web.Application, api: ApiConfig) -> None:
    """Put the middleware first in ``app``, if the API trusts any proxy."""
    trusted = TrustedProxies(api.trusted_proxies, api.forwarded_header)
    if trusted:
        app.middlewares.insert(0, trusted_clients(trusted))


def trusted_clients(trusted: TrustedProxies) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.remote
        if peer is not None and trusted.trusts(peer):
            client = request_client(trusted, request)
            request = request.clone(remote=client.address, scheme=client.scheme)
        return await handler(request)

    return middleware
