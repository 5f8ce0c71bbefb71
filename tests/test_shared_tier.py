"""The shared tier wired into the running edge (issue 23, decision 0030): one cache per node on
disk, used by every worker, warm after a restart or a kill -9, and every purge answered 200
still true after a kill -9 right behind it.

Real processes throughout: ``cdn-proxy serve`` (one process, or a node with two workers and
its embedded Valkey), a real origin that counts what it is asked, a real directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import ENV, Node, cli, write_config
from tests.polling import until

pytestmark = pytest.mark.slow  # nodes of real processes, restarted

HOST = {"Host": "example.com"}
DISK_HIT = 'cdn-proxy; hit; detail="disk"'  # RFC 9211 §2.8: detail is a String
FRESH_REQUESTS = 6  # per object, each on a connection of its own (the kernel picks a worker)


def tiered_config(tmp_path: Path, origin: Origin, *, workers: int) -> Path:
    return write_config(
        tmp_path,
        origin.url,
        workers=workers,
        cache=f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "64MiB"',
    )


def serve(origin: Origin, *targets: str, tag: str = "") -> None:
    """Cacheable answers for ``targets``, each body naming its target."""
    for target in targets:

        async def handler(request: web.Request, target: str = target) -> web.StreamResponse:
            headers = {"Cache-Control": "max-age=600", "ETag": f'"{target}"'}
            if tag:
                headers["Surrogate-Key"] = tag
            return web.Response(text=f"body of {target}", headers=headers)

        origin.route(target, handler)


async def get_fresh(node: Node, target: str) -> tuple[int, str, str]:
    """One GET on a connection of its own: status, Cache-Status, body."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + target, headers=HOST) as response,
    ):
        return response.status, response.headers.get("Cache-Status", ""), await response.text()


async def token(tmp_path: Path) -> str:
    config = str(tmp_path / "proxy.toml")
    status, out, err = await cli("token", "create", "deploy", "--all-domains", "--config", config)
    assert status == 0, err
    return out.strip()


async def post(node: Node, secret: str, path: str, body: dict[str, Any]) -> int:
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            node.api + path, json=body, headers={"Authorization": f"Bearer {secret}"}
        ) as response,
    ):
        await response.read()
        return response.status


async def start(nodes: list[Node], config: Path) -> Node:
    node = await Node.start(config)
    nodes.append(node)
    return node


async def stop(node: Node) -> None:
    """SIGTERM, and wait for a clean exit (the tier closed cleanly)."""
    node.process.terminate()
    assert await node.process.wait() == 0


async def test_two_workers_fill_each_object_once_and_both_serve_it(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    targets = [f"/o{i}" for i in range(20)]
    serve(origin, *targets)
    node = await start(nodes, tiered_config(tmp_path, origin, workers=2))
    statuses = []
    for target in targets:
        for _ in range(FRESH_REQUESTS):
            status, cache_status, body = await get_fresh(node, target)
            assert (status, body) == (200, f"body of {target}")
            statuses.append(cache_status)
    assert {target: origin.count(target) for target in targets} == dict.fromkeys(targets, 1)
    # The worker that did not fill an object answered it from the shared tier.
    assert statuses.count(DISK_HIT) >= 1, statuses
    fills = statuses.count("cdn-proxy; fwd=uri-miss; stored")
    assert fills == len(targets), statuses
    assert all(s.startswith("cdn-proxy; hit") for s in statuses if "fwd=" not in s)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
async def test_stored_objects_are_hits_after_a_restart(
    tmp_path: Path, origin: Origin, nodes: list[Node], workers: int, how: str
) -> None:
    targets = [f"/r{i}" for i in range(10)]
    serve(origin, *targets)
    config = tiered_config(tmp_path, origin, workers=workers)
    node = await start(nodes, config)
    for target in targets:
        assert (await get_fresh(node, target))[0] == 200
    if how == "sigterm":
        await stop(node)
    else:
        await node.kill()  # every process of the node, at once
    node = await start(nodes, config)
    for target in targets:
        status, cache_status, body = await get_fresh(node, target)
        assert (status, cache_status, body) == (
            200,
            DISK_HIT,
            f"body of {target}",
        )
    assert {target: origin.count(target) for target in targets} == dict.fromkeys(targets, 1)
    async with aiohttp.ClientSession() as client, client.get(node.api + "/metrics") as response:
        metrics = (await response.text()).splitlines()
    assert "cdn_proxy_shared_tier_entries 10.0" in metrics
    if workers == 1:  # a node's workers do not report their hits by tier yet
        assert 'cdn_proxy_tier_hits_total{tier="disk"} 10.0' in metrics
        assert 'cdn_proxy_tier_hits_total{tier="memory"} 0.0' in metrics, [
            m for m in metrics if "tier" in m
        ]


async def test_a_disk_hit_is_then_served_from_memory_by_the_fast_path(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    serve(origin, "/hot")
    config = tiered_config(tmp_path, origin, workers=1)
    node = await start(nodes, config)
    assert (await get_fresh(node, "/hot"))[0] == 200
    await stop(node)
    node = await start(nodes, config)  # its memory tier empty, the shared tier warm
    async with aiohttp.ClientSession() as client:  # one keep-alive connection: the fast path
        answers = []
        for _ in range(3):
            async with client.get(node.edge + "/hot", headers=HOST) as response:
                answers.append(
                    (response.status, response.headers["Cache-Status"], await response.text())
                )
                assert 0 <= int(response.headers["Age"]) < 600
        async with client.get(node.api + "/metrics") as response:
            metrics = (await response.text()).splitlines()
    hit = (200, "cdn-proxy; hit", "body of /hot")
    assert answers == [(200, DISK_HIT, "body of /hot"), hit, hit]
    assert origin.count("/hot") == 1
    # Only the first was read from the shared tier; the later ones from the memory copy,
    # which keeps the hit lines the fast path writes (tests/store/shared/test_tiered.py).
    assert 'cdn_proxy_tier_hits_total{tier="disk"} 1.0' in metrics
    assert 'cdn_proxy_tier_hits_total{tier="memory"} 2.0' in metrics


def purge_of(kind: str, page: str, tag: str) -> tuple[str, dict[str, Any]]:
    """The API call of each kind that covers ``page`` (``/DIR/p/x``, tagged ``tag``)."""
    prefix = page.rsplit("/", 1)[0] + "/"
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "clear-cache": ("/api/v1/cdn/clear-cache", {"domain": "example.com"}),
        "url": ("/api/v1/cdn/purge", {"domain": "example.com", "urls": [page]}),
        "prefix": ("/api/v1/cdn/purge", {"domain": "example.com", "prefixes": [prefix]}),
        "tag": ("/api/v1/cdn/purge", {"domain": "example.com", "tags": [tag]}),
        "soft": ("/api/v1/cdn/purge", {"domain": "example.com", "urls": [page], "soft": True}),
        "all": ("/api/v1/cdn/purge", {"domain": "example.com", "all": True}),
    }
    return calls[kind]


PURGE_KINDS = ("all", "clear-cache", "prefix", "soft", "tag", "url")


@dataclass
class KilledAndRestarted:
    """A node on one directory, shared by the tests of one worker count: each kills it
    (kill -9) and starts it again, which leaves it running for the next."""

    node: Node
    config: Path
    secret: str
    origin: Origin


@contextlib.asynccontextmanager
async def served(origin: Origin) -> AsyncIterator[Origin]:
    """``origin`` on a listener of its own (loopback), for a whole module."""
    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", origin.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    origin.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield origin
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture(
    scope="module", loop_scope="module", params=[1, 2], ids=["workers=1", "workers=2"]
)
async def killed_and_restarted(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[KilledAndRestarted]:
    directory = tmp_path_factory.mktemp("killed")
    async with served(Origin()) as origin:
        config = tiered_config(directory, origin, workers=request.param)
        secret = await token(directory)
        shared = KilledAndRestarted(await Node.start(config), config, secret, origin)
        try:
            yield shared
        finally:
            await shared.node.kill()


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("kind", PURGE_KINDS)
async def test_a_purge_answered_200_holds_after_a_kill_right_behind_it(
    killed_and_restarted: KilledAndRestarted, kind: str
) -> None:
    """Each kind on pages of its own (``/KIND/...``), on the node the kinds share."""
    shared, page, keep, tag = killed_and_restarted, f"/{kind}/p/x", f"/{kind}/keep", f"t-{kind}"
    origin = shared.origin
    serve(origin, page, tag=tag)
    serve(origin, keep)
    for target in (page, keep):
        assert (await get_fresh(shared.node, target))[0] == 200
    path, body = purge_of(kind, page, tag)
    assert await post(shared.node, shared.secret, path, body) == 200
    await shared.node.kill()  # at once: nothing written behind the 200 gets a chance
    shared.node = await Node.start(shared.config)
    status, cache_status, text = await get_fresh(shared.node, page)
    assert (status, text) == (200, f"body of {page}")
    assert "hit" not in cache_status.split("; ")[1:], cache_status  # the origin was asked
    assert origin.count(page) == 2
    if kind not in ("clear-cache", "all"):  # what the purge did not cover is still a hit
        assert (await get_fresh(shared.node, keep))[1] == DISK_HIT
        assert origin.count(keep) == 1


async def test_a_second_node_on_the_same_directory_exits_2_naming_it(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    first = await start(nodes, tiered_config(tmp_path, origin, workers=1))
    other = tmp_path / "other"
    other.mkdir()
    second = write_config(
        other, origin.url, cache=f'disk_path = "{tmp_path / "cache"}"\n'
    )  # its own ports and state, the first node's cache directory
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", "--config", str(second),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=ENV,
    )  # fmt: skip
    async with asyncio.timeout(60):
        _, err = await process.communicate()
    assert process.returncode == 2
    line = err.decode().strip().splitlines()[-1]
    holder = f"cdn-proxy: cache directory {tmp_path / 'cache'} is locked by pid {first.process.pid}"
    assert line.startswith(holder + " (instance ") and line.endswith(")"), line
    serve(origin, "/still")
    assert (await get_fresh(first, "/still"))[0] == 200  # the first node still answers


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_deleted_directory_costs_no_5xx_and_readyz_says_degraded(
    tmp_path: Path, origin: Origin, nodes: list[Node], workers: int
) -> None:
    serve(origin, "/before", "/after")
    node = await start(nodes, tiered_config(tmp_path, origin, workers=workers))
    assert (await get_fresh(node, "/before"))[0] == 200
    shutil.rmtree(tmp_path / "cache")
    for target in ["/before", "/after"] * 6:
        status, _, body = await get_fresh(node, target)
        assert (status, body) == (200, f"body of {target}")
    async with aiohttp.ClientSession() as client:
        async with client.get(node.api + "/readyz") as response:
            assert response.status == 200  # a warning: the edge answers from memory and origin
            ready = json.loads(await response.text())
        async with client.get(node.api + "/metrics") as response:
            metrics = await response.text()
    assert ready["disk"]["ok"] is False and ready["disk"]["stopped"] is True, ready
    assert ready["warnings"][0].startswith("shared tier degraded: "), ready
    assert "cdn_proxy_shared_tier_stopped 1.0" in metrics.splitlines()


PURGE_BUDGET = 256 * 1024  # cache.purge_state_max_bytes: the node's tier and its memory tier


def metric(lines: list[str], name: str) -> float:
    (line,) = [line for line in lines if line.startswith(name + " ")]
    return float(line.split()[1])


async def test_a_purge_flood_keeps_the_tiers_purge_records_within_the_budget(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """Issue 24 §2 on the shared tier: 40 purges of 256 distinct 100-character URLs (about
    4 MB of records without the fold); the purged object is not served after a kill -9."""
    serve(origin, "/p/x", "/other")
    config = write_config(
        tmp_path,
        origin.url,
        workers=1,
        cache=f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "64MiB"\n'
        f"purge_state_max_bytes = {PURGE_BUDGET}",
    )
    secret = await token(tmp_path)
    node = await start(nodes, config)
    assert (await get_fresh(node, "/p/x"))[0] == 200
    assert (await get_fresh(node, "/other"))[0] == 200
    purged = {"domain": "example.com", "urls": ["/p/x"]}
    assert await post(node, secret, "/api/v1/cdn/purge", purged) == 200
    for n in range(40):
        urls = [f"/flood/{n}/{i}/" + "y" * 100 for i in range(256)]
        body = {"domain": "example.com", "urls": urls}
        assert await post(node, secret, "/api/v1/cdn/purge", body) == 200
    async with aiohttp.ClientSession() as client, client.get(node.api + "/metrics") as response:
        metrics = (await response.text()).splitlines()
    assert 0 < metric(metrics, "cdn_proxy_shared_tier_purge_state_bytes") <= PURGE_BUDGET
    assert metric(metrics, "cdn_proxy_shared_tier_purge_state_max_bytes") == PURGE_BUDGET
    assert metric(metrics, "cdn_proxy_shared_tier_purge_folds_total") >= 1
    await node.kill()
    node = await start(nodes, config)
    status, cache_status, text = await get_fresh(node, "/p/x")
    assert (status, text) == (200, "body of /p/x")
    assert "hit" not in cache_status.split("; ")[1:], cache_status  # the origin was asked
    assert origin.count("/p/x") == 2


def _body_files(tmp_path: Path) -> list[str]:
    """The committed body files of the node's tier (not those being written)."""
    return sorted(path.name for path in (tmp_path / "cache" / "bodies").glob("*.body"))


async def test_a_hard_url_purge_removes_the_urls_body_files_from_the_directory(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """Issue 31 item 3: a hard URL purge answered 200 has removed the URL's entries from the
    shared tier, their body files with them (not left until evicted); the next GET goes to
    the origin. Bodies past INLINE_MAX, so each is a file of bodies/."""
    for target in ("/a", "/b"):

        async def large(request: web.Request, target: str = target) -> web.StreamResponse:
            body = f"{target} ".encode() * 50_000  # 100 KB or more
            return web.Response(body=body, headers={"Cache-Control": "max-age=600"})

        origin.route(target, large)
    config = tiered_config(tmp_path, origin, workers=2)
    secret = await token(tmp_path)
    node = await start(nodes, config)
    for target in ("/a", "/b"):
        assert (await get_fresh(node, target))[0] == 200
    await until(lambda: len(_body_files(tmp_path)) == 2, every=0.05)  # both fills committed
    files = _body_files(tmp_path)
    purged = {"domain": "example.com", "urls": ["/a"]}
    assert await post(node, secret, "/api/v1/cdn/purge", purged) == 200
    left = _body_files(tmp_path)
    assert len(left) == 1 and left[0] in files  # /b's, still stored
    status, cache_status, text = await get_fresh(node, "/a")
    assert (status, text[:3]) == (200, "/a ")
    assert "hit" not in cache_status.split("; ")[1:], cache_status
    assert origin.count("/a") == 2
    assert (await get_fresh(node, "/b"))[1].startswith("cdn-proxy; hit")
    assert origin.count("/b") == 1


async def _metrics(node: Node) -> list[str]:
    async with aiohttp.ClientSession() as client, client.get(node.api + "/metrics") as response:
        return (await response.text()).splitlines()


@pytest.mark.parametrize("workers", [1, 2])
async def test_old_url_purges_retire_and_what_they_covered_stays_purged(
    tmp_path: Path, origin: Origin, nodes: list[Node], workers: int
) -> None:
    """Issue 31 item 3, decision 0059: the node retires URL purge records older than
    ``url_purge_keep``. The purge state shrinks back to the domain's small record, and a page
    a soft purge made stale, still stored on disk, goes with its record: after a restart
    (memory empty, disk warm) it is asked of the origin, not served as a fresh disk hit."""
    serve(origin, "/soft", "/kept")
    config = write_config(
        tmp_path,
        origin.url,
        workers=workers,
        cache=f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "64MiB"\nurl_purge_keep = 0.2',
    )
    secret = await token(tmp_path)
    node = await start(nodes, config)
    for target in ("/soft", "/kept"):
        assert (await get_fresh(node, target))[0] == 200

    async def stored() -> bool:
        return metric(await _metrics(node), "cdn_proxy_shared_tier_entries") == 2

    await until(stored, every=0.05)
    soft = {"domain": "example.com", "urls": ["/soft"], "soft": True}
    assert await post(node, secret, "/api/v1/cdn/purge", soft) == 200
    for n in range(20):
        purged = {"domain": "example.com", "urls": [f"/gone/{n}/" + "z" * 50]}
        assert await post(node, secret, "/api/v1/cdn/purge", purged) == 200
    assert metric(await _metrics(node), "cdn_proxy_shared_tier_purge_state_bytes") > 20 * 60

    async def retired() -> bool:
        lines = await _metrics(node)
        small = metric(lines, "cdn_proxy_shared_tier_purge_state_bytes") < 200
        counted = metric(lines, "cdn_proxy_shared_tier_url_purges_retired_total") == 21
        return small and counted and metric(lines, "cdn_proxy_shared_tier_entries") == 1

    await until(retired, every=0.1)
    await stop(node)
    node = await start(nodes, config)
    assert (await get_fresh(node, "/kept"))[1] == DISK_HIT
    status, cache_status, text = await get_fresh(node, "/soft")
    assert (status, text) == (200, "body of /soft")
    assert "hit" not in cache_status.split("; ")[1:], cache_status
    assert origin.count("/soft") == 2
    assert origin.count("/kept") == 1
