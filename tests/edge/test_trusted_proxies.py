"""``trusted_proxies`` (issue 14 §2): only from a trusted peer are X-Forwarded-For / -Proto or
Forwarded believed; from it come the address and scheme the origin sees, and the API's rate
limits. Real processes: ``cdn-proxy serve`` in a child, a real origin; the test client is
127.0.0.1, trusted or not as each config says."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import Origin
from tests.edge.access_support import get, node_config
from tests.nodes import Node, cli, start

Start = Callable[..., "AsyncIterator[Node]"]


async def seen_by_origin(
    node: Node, origin: Origin, target: str, headers: dict[str, str]
) -> dict[str, str]:
    origin.reply(target, b"x", headers={"Cache-Control": "no-store"})
    status, _, _ = await get(node.edge + target, headers=headers)
    assert status == 200
    seen = [s for s in origin.seen if s.target == target]
    assert len(seen) == 1
    return seen[0].headers


@pytest.mark.slow
async def test_a_trusted_peer_names_the_client(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    config = node_config(tmp_path, origin.url, edge='trusted_proxies = ["127.0.0.1/32"]')
    node = await start(nodes, config)
    headers = await seen_by_origin(
        node,
        origin,
        "/a",
        {"X-Forwarded-For": "198.51.100.7", "X-Forwarded-Proto": "https"},
    )
    assert headers["X-Forwarded-For"] == "198.51.100.7"
    assert headers["X-Forwarded-Proto"] == "https"
    assert headers["X-Forwarded-Host"] == "example.com"


@pytest.mark.slow
async def test_an_untrusted_peer_is_the_client_whatever_it_says(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    config = node_config(tmp_path, origin.url, edge='trusted_proxies = ["10.0.0.0/8", "::1"]')
    node = await start(nodes, config)
    headers = await seen_by_origin(
        node,
        origin,
        "/b",
        {
            "X-Forwarded-For": "198.51.100.7",
            "X-Forwarded-Proto": "https",
            "Forwarded": "for=198.51.100.8;proto=https",
        },
    )
    assert headers["X-Forwarded-For"] == "127.0.0.1"
    assert headers["X-Forwarded-Proto"] == "http"
    assert "Forwarded" not in headers


@pytest.mark.slow
async def test_a_spoofed_chain_yields_the_first_untrusted_hop(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """The client wrote 6.6.6.6; the trusted balancers appended what they saw, from the right."""
    config = node_config(
        tmp_path, origin.url, edge='trusted_proxies = ["127.0.0.1/32", "10.0.0.0/8"]'
    )
    node = await start(nodes, config)
    chain = {"X-Forwarded-For": "6.6.6.6, 198.51.100.7, 10.1.1.1"}
    headers = await seen_by_origin(node, origin, "/c", chain)
    assert headers["X-Forwarded-For"] == "198.51.100.7"
    # Not an address where a hop should be: the walk stops at the balancer that wrote it.
    headers = await seen_by_origin(node, origin, "/d", {"X-Forwarded-For": "junk, 10.1.1.1"})
    assert headers["X-Forwarded-For"] == "10.1.1.1"


@pytest.mark.slow
async def test_forwarded_when_configured_and_only_then(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    config = node_config(
        tmp_path,
        origin.url,
        edge='trusted_proxies = ["127.0.0.1/32"]\nforwarded_header = "forwarded"',
    )
    node = await start(nodes, config)
    headers = await seen_by_origin(
        node,
        origin,
        "/e",
        {"Forwarded": 'for="[2001:db8::7]:4711";proto=https', "X-Forwarded-For": "6.6.6.6"},
    )
    assert headers["X-Forwarded-For"] == "2001:db8::7"
    assert headers["X-Forwarded-Proto"] == "https"
    assert "Forwarded" not in headers  # the proxy sets the X-Forwarded trio only, as before


@pytest.mark.slow
async def test_a_bad_cidr_is_refused_at_start(tmp_path: Path, origin: Origin) -> None:
    config = node_config(tmp_path, origin.url, edge='trusted_proxies = ["10.0.0.1/8"]')
    status, _, err = await cli("serve", "--config", str(config))
    assert status == 2
    assert "edge.trusted_proxies: '10.0.0.1/8' is not a CIDR" in err


async def wrong_token(node: Node, forwarded_for: str) -> int:
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            node.api + "/api/v1/cdn/clear-cache",
            json={"domain": "example.com"},
            headers={"Authorization": "Bearer wrong", "X-Forwarded-For": forwarded_for},
        ) as response,
    ):
        return response.status


@pytest.mark.slow
@pytest.mark.parametrize("trusted", [True, False])
async def test_api_rate_limits_count_the_forwarded_client(
    tmp_path: Path, origin: Origin, nodes: list[Node], trusted: bool
) -> None:
    """Wrong tokens past auth_failures_allowed are refused (429) per client: behind a trusted
    proxy, per forwarded client; otherwise every claim is the one peer's."""
    networks = '["127.0.0.1/32"]' if trusted else '["10.0.0.0/8"]'
    config = node_config(
        tmp_path,
        origin.url,
        api=f"auth_failures_allowed = 2\ntrusted_proxies = {networks}",
    )
    node = await start(nodes, config)
    assert [await wrong_token(node, "198.51.100.1") for _ in range(3)] == [401, 401, 429]
    assert await wrong_token(node, "198.51.100.2") == (401 if trusted else 429)
