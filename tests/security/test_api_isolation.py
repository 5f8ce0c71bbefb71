"""The control plane (clear-cache API, health check, metrics, dashboard) is never reachable
through the edge listener, whatever Host, path spelling or request-target form is used.

These run the real service (``running(config)``, both listeners, as ``cdn-proxy serve``
does) with a valid all-domains token in every attempt, so a single route leaking through
would clear the cache. Through the edge, a proxied domain's Host gets its origin's answer
(the path is the domain's own), and any other Host gets 421 without reaching anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from proxy.core.auth.tokens import Scope
from proxy.process.service import Service
from tests.security.conftest import Site
from tests.security.support import exchange

CONTROL_PATHS = [
    "/api/v1/cdn/clear-cache",
    "//api/v1/cdn/clear-cache",
    "/API/v1/cdn/clear-cache",
    "/api/v1/cdn/clear-cache/",
    "/api/v1/cdn/clear-cache?",
    "/api/v1/cdn/clear-cache;x",
    "/api/v1/cdn/clear-cache%00",
    "/%61pi/v1/cdn/clear-cache",
    "/api%2fv1%2fcdn%2fclear-cache",
    "/%2e/api/v1/cdn/clear-cache",
    "/./api/v1/cdn/clear-cache",
    "/x/../api/v1/cdn/clear-cache",
    "/api/v1/cdn/clear-cache%2f..%2f..%2f..%2fhealthz",
    "/healthz",
    "/HEALTHZ",
    "/metrics",
    "/dashboard",
    "/dashboard/",
    "/dashboard/login",
    "/dashboard/static/app.css",
]
DOMAINS = ["example.com", "EXAMPLE.COM.", "other.test:8080"]
CLEARED = b"Cache cleared"


async def origin_marker(request: web.Request) -> web.StreamResponse:
    return web.Response(text=f"origin {request.raw_path}", headers={"Cache-Control": "no-store"})


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def token(service: Service) -> str:
    return await service.state.create_token("deploy", Scope.everything(), 0.0)


def other_hosts(service: Service) -> list[str]:
    """Every name the control plane could be addressed by on this machine."""
    api = URL(service.api_url)
    edge = URL(service.edge_url)
    return [
        f"{api.host}:{api.port}",
        f"localhost:{api.port}",
        f"{edge.host}:{edge.port}",
        "127.0.0.1",
        "localhost",
        "[::1]",
        "cdn-proxy",
        "",
    ]


async def assert_nothing_cleared(service: Service) -> None:
    for domain in ("example.com", "other.test"):
        assert (await service.store.lookup(domain, "/")).key[1] == 0
    assert await service.state.list_audit(limit=10) == []


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_control_paths_on_a_domain_host_go_to_that_domain_s_origin(
    service: Service, origin: Site, client: aiohttp.ClientSession, token: str, method: str
) -> None:
    origin.default = origin_marker
    for path in CONTROL_PATHS:
        for host in DOMAINS:
            async with client.request(
                method,
                URL(service.edge_url + path, encoded=True),
                json={"domain": "example.com"},
                headers={"Host": host, "Authorization": f"Bearer {token}"},
            ) as response:
                body = await response.read()
            # An empty query reaches the origin without its '?' (decision 0004).
            assert body == f"origin {path.removesuffix('?')}".encode(), (path, host)
    assert len(origin.seen) == len(CONTROL_PATHS) * len(DOMAINS)
    await assert_nothing_cleared(service)


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_control_paths_under_any_other_host_are_refused(
    service: Service, origin: Site, client: aiohttp.ClientSession, token: str, method: str
) -> None:
    origin.default = origin_marker
    for path in CONTROL_PATHS:
        for host in other_hosts(service):
            async with client.request(
                method,
                URL(service.edge_url + path, encoded=True),
                json={"domain": "example.com"},
                headers={"Host": host, "Authorization": f"Bearer {token}"},
            ) as response:
                body = await response.read()
                assert response.status == 421, (path, host)
            assert CLEARED not in body
            assert body != b"ok"
    assert origin.seen == []
    await assert_nothing_cleared(service)


async def test_absolute_form_naming_the_api_listener_is_refused(
    service: Service, origin: Site, token: str
) -> None:
    api = URL(service.api_url)
    assert api.host is not None and api.port is not None
    body = b'{"domain": "example.com"}'
    for host in (f"{api.host}:{api.port}", "example.com"):
        for path in ("/api/v1/cdn/clear-cache", "/healthz", "/metrics"):
            request = (
                b"POST http://%s:%d%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n%s"
                % (
                    api.host.encode(),
                    api.port,
                    path.encode(),
                    host.encode(),
                    token.encode(),
                    len(body),
                    body,
                )
            )
            answer = await exchange(service.edge_url, request)
            [response] = answer.responses
            assert response.status in (400, 421), (host, path)
            assert CLEARED not in response.body
    assert origin.seen == []
    await assert_nothing_cleared(service)


@pytest.mark.slow
async def test_the_api_itself_works_on_its_own_listener(
    service: Service, client: aiohttp.ClientSession, token: str
) -> None:
    """Control: the token and body used above do clear, when sent to the API listener."""
    async with client.get(service.api_url + "/healthz") as response:
        assert (response.status, await response.text()) == (200, "ok")
    async with client.post(
        service.api_url + "/api/v1/cdn/clear-cache",
        json={"domain": "example.com"},
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        assert (response.status, await response.read()) == (200, CLEARED)
    assert (await service.store.lookup("example.com", "/")).key[1] == 1
