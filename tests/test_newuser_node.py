"""Starting the quick start twice (a second ``./scripts/serve config/proxy.toml`` while the
first runs, as a new user or a careless unit file does): the second must fail and leave the
first one working. Found by the README try-out: the second start took the running node's
embedded Valkey for one a killed node left behind, and stopped it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import ENV, Node, cli, write_config

pytestmark = pytest.mark.slow  # a node of two workers, and a second start of it

HOST = {"Host": "example.com"}


async def test_a_second_start_of_a_running_node_leaves_it_working(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    async def page(request: web.Request) -> web.StreamResponse:
        return web.Response(text="cached", headers={"Cache-Control": "max-age=600"})

    origin.route("/page", page)
    config = write_config(tmp_path, origin.url, workers=2)
    status, token, err = await cli(
        "token", "create", "ops", "--all-domains", "--config", str(config)
    )
    assert status == 0, err
    node = await Node.start(config)
    nodes.append(node)

    # Before the fix the second process also hangs (its Valkey's socket is gone too), so it
    # runs in a session of its own, ended with everything it started whatever happens.
    second = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", "--config", str(config),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=ENV,
        start_new_session=True,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            _, refused = await second.communicate()
    finally:
        if second.returncode is None:
            os.killpg(second.pid, signal.SIGKILL)
            await second.wait()
    assert second.returncode != 0
    assert b"this node is already running" in refused

    async with aiohttp.ClientSession() as client:
        async with client.post(
            node.api + "/api/v1/cdn/clear-cache",
            json={"domain": "example.com"},
            headers={"Authorization": f"Bearer {token.strip()}"},
        ) as response:
            assert (response.status, await response.text()) == (200, "Cache cleared")
        for _ in range(2):
            async with client.get(node.edge + "/page", headers=HOST) as response:
                assert response.status == 200
                cache_status = response.headers["Cache-Status"]
        assert "fenced" not in cache_status, cache_status
