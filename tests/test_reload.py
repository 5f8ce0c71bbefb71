"""Config reload against real processes: ``cdn-proxy serve`` in a child process, SIGHUP or
``cdn-proxy reload``, real origins that record what they were asked (decision 0020).

What must hold: domains are added, removed and re-pointed without a restart; entries of
unchanged domains stay cached (the origin is not asked again) and a connection opened before
the reload keeps working; a removed or re-pointed domain's entries never answer again; a bad
config is refused, the process says why in one line and keeps serving the old config; and
the same with two edge workers.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.process.reload import find_running
from tests.conftest import Origin
from tests.nodes import Node, cli
from tests.polling import until

CACHEABLE = {"Cache-Control": "max-age=600"}


def write(tmp_path: Path, domains: dict[str, str], *, workers: int = 1, edge: str = "") -> Path:
    """The node's config: ``domains`` maps each name to its origin."""
    tables = "".join(
        f'[[domains]]\nname = "{name}"\norigin = "{origin}"\n' for name, origin in domains.items()
    )
    path = tmp_path / "proxy.toml"
    path.write_text(
        f"""
[edge]
listen = "127.0.0.1:0"
shutdown_timeout = 10
workers = {workers}
{edge}
[api]
listen = "127.0.0.1:0"
[cache]
max_bytes = "8MiB"
[state]
path = "state.db"
{tables}""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
async def second(aiohttp_server: Callable[..., Awaitable[TestServer]]) -> Origin:
    """Another origin, to re-point a domain to."""
    state = Origin()
    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", state.handle)
    server = await aiohttp_server(app)
    state.url = str(server.make_url("")).rstrip("/")
    return state


async def fetch(node: Node, path: str, host: str) -> tuple[int, str, str]:
    """One GET on a connection of its own (with workers, the kernel picks the worker)."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + path, headers={"Host": host}) as response,
    ):
        return response.status, await response.text(), response.headers.get("Cache-Status", "")


class KeptAlive:
    """One HTTP/1.1 connection to the edge, written and read by hand, so the test knows the
    requests after the reload went over the very connection opened before it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, node: Node) -> KeptAlive:
        host, port = node.edge.removeprefix("http://").rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def get(self, path: str, host: str) -> tuple[int, dict[str, str], bytes]:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        async with asyncio.timeout(10):
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            fields = dict(line.split(": ", 1) for line in lines[1:] if line)
            headers = {name.lower(): value for name, value in fields.items()}
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return int(lines[0].split()[1]), headers, body

    async def close(self) -> None:
        """Closed and waited for: no transport is left for the collector to find later, in
        another test."""
        self.writer.close()
        await self.writer.wait_closed()


async def reload(config: Path) -> tuple[int, str, str]:
    return await cli("reload", "--config", str(config))


async def clear(node: Node, config: Path, domain: str) -> int:
    name = f"t-{domain}"  # one token a clear: a name is taken once
    status, out, err = await cli("token", "create", name, "--all-domains", "--config", str(config))
    assert status == 0, err
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            node.api + "/api/v1/cdn/clear-cache",
            json={"domain": domain},
            headers={"Authorization": f"Bearer {out.strip()}"},
        ) as response,
    ):
        return response.status


# -- one process --------------------------------------------------------------------------------


@pytest.mark.slow
async def test_sighup_adds_a_domain_while_a_hit_stays_a_hit_on_the_same_connection(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    origin.reply("/page", b"cached", headers=CACHEABLE)
    origin.reply("/new", b"new domain", headers=CACHEABLE)
    config = write(tmp_path, {"example.com": origin.url})
    node = await Node.start(config, log=tmp_path / "node.log")
    nodes.append(node)
    connection = await KeptAlive.open(node)
    assert (await connection.get("/page", "example.com"))[2] == b"cached"
    assert (await connection.get("/new", "new.test"))[0] == 421

    write(tmp_path, {"example.com": origin.url, "new.test": origin.url})
    os.kill(node.process.pid, signal.SIGHUP)
    await until(lambda: find_running(config).reloads == 1, within=10, every=0.05)

    status, headers, body = await connection.get("/page", "example.com")
    assert (status, body) == (200, b"cached")
    assert headers["cache-status"] == "cdn-proxy; hit"
    assert origin.count("/page") == 1  # still the one fill from before the reload
    status, _, body = await connection.get("/new", "new.test")
    assert (status, body) == (200, b"new domain")
    await connection.close()
    assert node.process.returncode is None
    log = (tmp_path / "node.log").read_text()
    assert "config reloaded" in log and "added new.test" in log
    # The control plane sees the new domain too: a clear of it is accepted.
    assert await clear(node, config, "new.test") == 200


@pytest.mark.slow
async def test_reload_command_repoints_a_domain_and_its_old_entry_never_answers_again(
    tmp_path: Path, origin: Origin, second: Origin, nodes: list[Node]
) -> None:
    origin.reply("/page", b"from the first origin", headers=CACHEABLE)
    second.reply("/page", b"from the second origin", headers=CACHEABLE)
    origin.reply("/kept", b"kept", headers=CACHEABLE)
    config = write(tmp_path, {"example.com": origin.url, "other.test": origin.url})
    node = await Node.start(config)
    nodes.append(node)
    assert (await fetch(node, "/page", "example.com"))[1] == "from the first origin"
    assert (await fetch(node, "/kept", "other.test"))[1] == "kept"

    write(tmp_path, {"example.com": second.url, "other.test": origin.url})
    status, out, err = await reload(config)
    assert status == 0, err
    assert "re-pointed (cleared) example.com" in out and "1 domain unchanged" in out

    status, body, cache_status = await fetch(node, "/page", "example.com")
    assert (status, body) == (200, "from the second origin")
    assert "fwd=uri-miss" in cache_status
    assert (second.count("/page"), origin.count("/page")) == (1, 1)
    # The unchanged domain's entry stayed.
    assert (await fetch(node, "/kept", "other.test"))[2] == "cdn-proxy; hit"
    assert origin.count("/kept") == 1


@pytest.mark.slow
async def test_a_removed_domain_gets_421_and_its_clears_404(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    origin.reply("/page", b"page", headers=CACHEABLE)
    config = write(tmp_path, {"example.com": origin.url, "other.test": origin.url})
    node = await Node.start(config)
    nodes.append(node)
    assert (await fetch(node, "/page", "other.test"))[0] == 200

    write(tmp_path, {"example.com": origin.url})
    status, out, err = await reload(config)
    assert status == 0, err
    assert "removed other.test" in out

    assert (await fetch(node, "/page", "other.test"))[0] == 421
    assert (await fetch(node, "/page", "example.com"))[0] == 200
    assert await clear(node, config, "other.test") == 404


@pytest.mark.slow
async def test_a_bad_config_is_refused_in_one_line_and_the_old_one_keeps_serving(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    origin.reply("/page", b"page", headers=CACHEABLE)
    config = write(tmp_path, {"example.com": origin.url})
    node = await Node.start(config, log=tmp_path / "node.log")
    nodes.append(node)
    assert (await fetch(node, "/page", "example.com"))[0] == 200

    config.write_text(config.read_text().replace(origin.url, "ftp://127.0.0.1:1"))
    # The command checks the file first, as serve does, and signals nothing.
    status, out, err = await reload(config)
    assert status == 2
    assert err.startswith("cdn-proxy: config error: domains[0].origin: ")
    assert err.count("\n") == 1 and out == ""
    assert find_running(config).reloads == 0

    # SIGHUP from elsewhere (systemd's ExecReload): the process refuses it and says why.
    os.kill(node.process.pid, signal.SIGHUP)
    await until(lambda: find_running(config).reloads == 1, within=10, every=0.05)
    log = (tmp_path / "node.log").read_text()
    refusals = [line for line in log.splitlines() if "config error" in line]
    assert len(refusals) == 1
    assert "cdn-proxy: config error: domains[0].origin: 'ftp://127.0.0.1:1'" in refusals[0]
    assert "the running config stays" in refusals[0]
    status, _, cache_status = await fetch(node, "/page", "example.com")
    assert (status, cache_status) == (200, "cdn-proxy; hit")
    assert node.process.returncode is None


@pytest.mark.slow
async def test_a_change_that_needs_a_restart_is_refused_and_reload_exits_non_zero(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """The file is valid, so only the process can refuse: the command must say so."""
    origin.reply("/page", b"page", headers=CACHEABLE)
    config = write(tmp_path, {"example.com": origin.url})
    node = await Node.start(config)
    nodes.append(node)
    write(tmp_path, {"example.com": origin.url, "new.test": origin.url}, edge='via = "other"')
    status, out, err = await reload(config)
    assert status == 1
    assert err.strip() == (
        "cdn-proxy: reload refused: edge.via changed, which needs a restart"
        " (the running config stays)"
    )
    assert out == ""
    assert (await fetch(node, "/page", "new.test"))[0] == 421  # nothing of it was applied


async def test_reload_without_a_running_process_says_so(tmp_path: Path, origin: Origin) -> None:
    config = write(tmp_path, {"example.com": origin.url})
    status, _, err = await reload(config)
    assert status == 1
    assert err.startswith("cdn-proxy: no running `cdn-proxy serve --config ")


# -- two workers --------------------------------------------------------------------------------


async def from_both_workers(node: Node, origin: Origin, path: str, host: str) -> None:
    """Fetch over fresh connections until both workers have filled ``path`` (the origin saw
    it twice): the kernel spreads connections among the workers as it likes."""
    for _ in range(200):
        await fetch(node, path, host)
        if origin.count(path) == 2:
            return
    raise AssertionError("the connections all reached one worker")


@pytest.mark.slow
async def test_with_two_workers_every_worker_reloads(
    tmp_path: Path, origin: Origin, second: Origin, nodes: list[Node]
) -> None:
    origin.reply("/page", b"page", headers=CACHEABLE)
    origin.reply("/moved", b"old origin", headers=CACHEABLE)
    origin.reply("/gone", b"gone soon", headers=CACHEABLE)
    second.reply("/moved", b"new origin", headers=CACHEABLE)
    version = ["v1"]

    async def new_page(request: web.Request) -> web.StreamResponse:
        return web.Response(text=version[0], headers=CACHEABLE)

    origin.route("/new", new_page)
    config = write(
        tmp_path,
        {"example.com": origin.url, "moved.test": origin.url, "gone.test": origin.url},
        workers=2,
    )
    node = await Node.start(config, log=tmp_path / "node.log")
    nodes.append(node)
    pids = node.worker_pids()
    assert len(pids) == 2
    await from_both_workers(node, origin, "/page", "example.com")
    await from_both_workers(node, origin, "/moved", "moved.test")
    await from_both_workers(node, origin, "/gone", "gone.test")

    write(
        tmp_path,
        {"example.com": origin.url, "moved.test": second.url, "new.test": origin.url},
        workers=2,
    )
    status, out, err = await reload(config)
    assert status == 0, err
    assert "added new.test" in out and "removed gone.test" in out
    assert node.worker_pids() == pids  # reloaded, not restarted

    for _ in range(40):  # over fresh connections: both workers answer, neither stale
        assert (await fetch(node, "/page", "example.com"))[2] == "cdn-proxy; hit"
        assert (await fetch(node, "/moved", "moved.test"))[1] == "new origin"
        assert (await fetch(node, "/gone", "gone.test"))[0] == 421
        assert (await fetch(node, "/new", "new.test"))[1] == "v1"
    assert origin.count("/page") == 2  # both workers kept their entries
    assert origin.count("/moved") == 2  # the old origin was not asked again
    assert second.count("/moved") <= 2  # each worker filled it once from the new one
    assert origin.count("/new") <= 2
    # A fleet clear of the added domain is true on both workers: each applies it to its
    # store before it acknowledges it (FleetMember.set_domains).
    version[0] = "v2"
    assert await clear(node, config, "new.test") == 200
    assert {(await fetch(node, "/new", "new.test"))[1] for _ in range(20)} == {"v2"}
    assert await clear(node, config, "gone.test") == 404

    config.write_text(config.read_text().replace(second.url, "ftp://127.0.0.1:1"))
    os.kill(node.process.pid, signal.SIGHUP)
    await until(lambda: find_running(config).reloads == 2, within=10, every=0.05)
    assert "cdn-proxy: config error: domains[1].origin" in (tmp_path / "node.log").read_text()
    assert (await fetch(node, "/moved", "moved.test"))[1] == "new origin"
    assert node.worker_pids() == pids
