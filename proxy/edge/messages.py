"""The messages edge/handler.py's paths make outside the fast hit path: the request head an
origin is given (core/http/headers.py's ``to_origin``, with the client as the trusted proxies
describe it), the way it is sent (edge/upstreams.py), and a client's answer from a stored
entry (respond.from_stored, with the domain's rules and a Range applied)."""

from __future__ import annotations

from aiohttp import hdrs, web

from proxy.config.model import DomainConfig
from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.rules import Applied, browser_fields
from proxy.core.cache.targeted import surrogate_capability
from proxy.core.http.fields import Headers
from proxy.core.http.forwarded import TrustedProxies, request_client
from proxy.core.http.headers import to_origin
from proxy.edge import ranges, respond
from proxy.edge.forward import AskOrigin
from proxy.edge.upstreams import Upstreams


class Messages:
    """``headers`` for an origin request's head, ``ask`` to send it, ``from_stored`` to answer
    a client from the store. ``trusted`` is set again on a reload (Edge.reconfigure)."""

    def __init__(
        self, *, name: str, via: str, trusted: TrustedProxies, upstreams: Upstreams
    ) -> None:
        self._capability = surrogate_capability(name)
        self._via = via
        self.trusted = trusted
        # One request to one of the domain's origin servers (edge/upstreams.py), with
        # everything every such request shares: the session, the server's connection slots,
        # the telemetry and the domain's TLS trust.
        self.ask: AskOrigin = upstreams.request

    def headers(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        *,
        cacheable: bool,
        coding: str | None = None,
    ) -> list[tuple[str, str]]:
        """The head the origin is given for ``request``."""
        trusted = self.trusted
        client = request_client(trusted, request)
        headers = to_origin(
            request.headers.items(),
            domain=config.name,
            client_address=client.address,
            scheme=client.scheme,
            via=self._via,
            cacheable=cacheable,
            accept_encoding=coding,
            trusted_peer=bool(trusted) and trusted.trusts(request.remote or ""),
        )
        headers.append(("Surrogate-Capability", self._capability))
        return headers

    def from_stored(
        self,
        request: web.BaseRequest,
        entry: StoredResponse,
        now: float,
        status: str,
        *,
        headers: Headers | None = None,
        rules: Applied | None = None,
    ) -> web.Response:
        if rules is not None and rules.browser_ttl is not None:
            # The answer's Cache-Control, not the stored one (core/cache/rules.py).
            headers = browser_fields(entry.headers if headers is None else headers, rules)
        response = respond.from_stored(
            request, entry, now=now, via=self._via, status=status, headers=headers
        )
        if hdrs.RANGE in request.headers:
            return ranges.answer(request, response, entry.body)
        return response
