"""The HTTP/2 fast hit (decision 0036): a fresh stored response without Vary or no-cache is
sent from the entry's precomputed lines (respond.Hit) as HEADERS and DATA, with the fields,
Age and Cache-Status the full path gives; a purge is honoured on the next stream; a Vary'd
entry still takes the full path. The fast hit is told apart by its field order: Age last
(hit_lines' order), where the full path's aiohttp response writes Age before Cache-Status."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from h2.settings import SettingCodes

from proxy.core.auth.tokens import Scope
from proxy.process.service import Service, running
from tests.conftest import Origin
from tests.edge.h2_support import RawH2
from tests.edge.tls_support import Certificates, pair_keys, tls_config
from tests.polling import until

CACHEABLE = {"Cache-Control": "max-age=60", "Content-Type": "text/plain"}


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
async def service(tmp_path: Path, origin: Origin, certs: Certificates) -> AsyncIterator[Service]:
    config = tls_config(
        tmp_path,
        origin.url,
        edge={**pair_keys(certs.issue("example.com")), "access_log": "access.log"},
    )
    async with running(config) as running_service:
        yield running_service


async def h2(service: Service, certs: Certificates) -> RawH2:
    assert service.tls_url is not None
    return await RawH2.open(service.tls_url, certs.client(), sni="example.com")


def without_age(headers: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name != "age"}


async def test_a_fast_hit_sends_what_the_full_path_sends(
    service: Service, origin: Origin, certs: Certificates, tmp_path: Path
) -> None:
    origin.reply("/fast", b"fast body" * 100, headers=CACHEABLE)
    client = await h2(service, certs)
    miss = await client.answer(client.request("/fast"))
    assert miss.headers["cache-status"] == "cdn-proxy; fwd=uri-miss; stored"
    fast = await client.answer(client.request("/fast"))
    # A request directive that changes nothing for a fresh entry sends it the full rules.
    full = await client.answer(client.request("/fast", headers=[("cache-control", "max-stale=5")]))
    await client.close()
    assert list(fast.headers)[-1] == "age" and list(full.headers)[-1] != "age"
    assert (fast.status, fast.body) == (full.status, full.body) == (200, b"fast body" * 100)
    assert without_age(fast.headers) == without_age(full.headers)
    assert fast.headers["cache-status"] == "cdn-proxy; hit"
    assert fast.headers["content-length"] == "900"
    assert fast.headers["content-type"] == "text/plain"
    assert abs(int(fast.headers["age"]) - int(full.headers["age"])) <= 1
    assert "connection" not in fast.headers and "transfer-encoding" not in fast.headers
    assert origin.count("/fast") == 1
    # Logged and counted as any answer: the access log has each stream, with its body size.
    log = tmp_path / "access.log"

    def logged() -> int:
        lines = log.read_text().splitlines() if log.exists() else []
        return sum('"GET /fast HTTP/2.0" 200 900 ' in line for line in lines)

    assert await until(lambda: logged() == 3)


async def test_a_purge_is_honoured_on_the_next_stream(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    origin.reply("/purged", b"before", headers=CACHEABLE)
    client = await h2(service, certs)
    await client.answer(client.request("/purged"))
    hit = await client.answer(client.request("/purged"))
    assert (hit.body, list(hit.headers)[-1]) == (b"before", "age")
    secret = await service.state.create_token("deploy", Scope(True, frozenset()), 0.0)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            service.api_url + "/api/v1/cdn/clear-cache",
            json={"domain": "example.com"},
            headers={"Authorization": f"Bearer {secret}"},
        ) as response,
    ):
        assert response.status == 200
    origin.reply("/purged", b"after", headers=CACHEABLE)
    again = await client.answer(client.request("/purged"))
    await client.close()
    assert (again.body, again.headers["cache-status"]) == (
        b"after",
        "cdn-proxy; fwd=uri-miss; stored",
    )
    assert origin.count("/purged") == 2


async def test_a_varied_entry_takes_the_full_path(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    origin.reply("/varied", b"varied", headers={**CACHEABLE, "Vary": "Accept-Language"})
    client = await h2(service, certs)
    await client.answer(client.request("/varied", headers=[("accept-language", "fr")]))
    hit = await client.answer(client.request("/varied", headers=[("accept-language", "fr")]))
    await client.close()
    assert (hit.body, hit.headers["cache-status"]) == (b"varied", "cdn-proxy; hit")
    assert list(hit.headers)[-1] != "age"  # built by the full path's aiohttp response
    assert origin.count("/varied") == 1


async def test_a_fast_hit_larger_than_the_window_waits_for_it(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    """A fast hit goes out as HEADERS and one DATA frame when the client's windows take its
    body; a client that grants less (here 100 bytes a stream) gets it as the windows open."""
    origin.reply("/windowed", b"w" * 1000, headers=CACHEABLE)
    client = await h2(service, certs)
    client.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 100})
    client.flush()
    await client.answer(client.request("/windowed"))
    fast = await client.answer(client.request("/windowed"))
    assert (fast.status, fast.body, fast.headers["cache-status"]) == (
        200,
        b"w" * 1000,
        "cdn-proxy; hit",
    )
    assert list(fast.headers)[-1] == "age"  # the fast path's field order
    await client.close()
