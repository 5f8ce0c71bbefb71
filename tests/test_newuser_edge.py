"""What an operator trying the README saw on the edge that was wrong, each with its repro.
Real processes: ``cdn-proxy serve`` against a real origin.
"""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import Node, write_config

pytestmark = pytest.mark.slow  # nodes of real processes, restarted

HOST = {"Host": "example.com"}


async def get(node: Node, target: str) -> tuple[int, str]:
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + target, headers=HOST) as response,
    ):
        await response.read()
        return response.status, response.headers.get("Cache-Status", "")


async def test_a_disk_hit_under_rules_says_disk_then_the_rules(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """README "The shared tier": a disk hit says ``detail="disk"``; "Caching rules": the
    detail names the rules (``detail="bypass-cookie; rules=wp"``). Quick start config with a
    rule, a fill, a restart, the same URL: Cache-Status said ``detail="rules=r disk"``, where
    the collapsed path and every other detail join with "; "."""

    async def page(request: web.Request) -> web.StreamResponse:
        return web.Response(text="no cache headers")  # the rule's edge_ttl makes it storable

    origin.route("/page", page)
    config = write_config(
        tmp_path,
        origin.url,
        cache=f'disk_path = "{tmp_path / "cache"}"',
        extra='[[domains.rules]]\nname = "r"\nedge_ttl = "5m"',
    )
    node = await Node.start(config)
    nodes.append(node)
    assert await get(node, "/page") == (200, 'cdn-proxy; fwd=uri-miss; stored; detail="rules=r"')
    node.process.terminate()
    assert await node.process.wait() == 0
    node = await Node.start(config)
    nodes.append(node)
    assert await get(node, "/page") == (200, 'cdn-proxy; hit; detail="disk; rules=r"')
    assert origin.count("/page") == 1


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_one_origin_down_is_not_retried_on_another_server(
    tmp_path: Path, nodes: list[Node]
) -> None:
    """The quick start with the demo origin stopped: one request logged ``example.com:
    origin unreachable (...) (http://127.0.0.1:9000); retrying on another origin server``
    then the same failure again, for a domain with one server: there is no other."""
    log = tmp_path / "node.log"
    config = write_config(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    node = await Node.start(config, log=log)
    nodes.append(node)
    assert (await get(node, "/"))[0] == 502
    node.process.terminate()
    assert await node.process.wait() == 0
    text = log.read_text(encoding="utf-8")
    assert "origin unreachable" in text
    assert "retrying on" not in text
