"""The whole process: both listeners, start-up failures, SIGTERM, and the CLI as a black box."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from benchmarks.ports import free_port
from proxy.core.auth.tokens import Scope
from proxy.process.service import Service, StartError, running
from tests.conftest import Origin, make_config
from tests.nodes import ENV, WORKER_COUNTS, Node, alive, cli, write_config

CACHEABLE = {"Cache-Control": "max-age=60"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def service(tmp_path: Path, origin: Origin) -> AsyncIterator[Service]:
    async with running(make_config(tmp_path, origin.url)) as running_service:
        yield running_service


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_both_listeners_serve_and_a_clear_empties_the_domain(
    service: Service, origin: Origin, client: aiohttp.ClientSession
) -> None:
    secret = await service.state.create_token("deploy", Scope(True, frozenset()), 0.0)
    origin.reply("/page", b"v1", headers=CACHEABLE)
    host = {"Host": "example.com"}
    async with client.get(service.edge_url + "/page", headers=host) as r:
        assert "stored" in r.headers["Cache-Status"]
    async with client.get(service.edge_url + "/page", headers=host) as r:
        assert "hit" in r.headers["Cache-Status"]

    async with client.get(service.api_url + "/healthz") as r:
        assert r.status == 200
        assert await r.text() == "ok"

    async with client.post(
        service.api_url + "/api/v1/cdn/clear-cache",
        json={"domain": "example.com"},
        headers={"Authorization": f"Bearer {secret}"},
    ) as r:
        assert r.status == 200
        assert await r.text() == "Cache cleared"
    async with client.get(service.edge_url + "/page", headers=host) as r:
        assert r.headers["Cache-Status"] == "cdn-proxy; fwd=uri-miss; stored"
    assert origin.count("/page") == 2


async def test_clears_are_in_the_audit_log_and_other_api_requests_in_the_access_log(
    service: Service, client: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A clear-cache request is logged once, as its audit record, not also as an access-log
    line; every other request to the API listener is in the access log."""
    secret = await service.state.create_token("deploy", Scope(True, frozenset()), 0.0)
    with caplog.at_level(logging.INFO, logger="aiohttp.access"):
        async with client.get(service.api_url + "/healthz") as r:
            assert r.status == 200
        for token in (secret, "wrong"):
            async with client.post(
                service.api_url + "/api/v1/cdn/clear-cache",
                json={"domain": "example.com"},
                headers={"Authorization": f"Bearer {token}"},
            ) as r:
                assert r.status in (200, 401)
        async with client.get(service.api_url + "/healthz") as r:
            assert r.status == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert len(lines) == 2
    assert all("GET /healthz" in line for line in lines)
    audit = await service.state.list_audit()
    assert [(a.actor, a.outcome, a.status) for a in audit] == [
        (None, "unauthorized", 401),
        ("deploy", "cleared", 200),
    ]


async def test_the_api_is_not_reachable_through_the_edge(
    service: Service, origin: Origin, client: aiohttp.ClientSession
) -> None:
    secret = await service.state.create_token("deploy", Scope(True, frozenset()), 0.0)
    origin.reply("/page", b"v1", headers=CACHEABLE)
    await client.get(service.edge_url + "/page", headers={"Host": "example.com"})
    api_host = service.api_url.removeprefix("http://")
    attempts: list[dict[str, str]] = [
        {"Host": "example.com"},
        {"Host": api_host},
        {"Host": "localhost"},
        {"Host": "127.0.0.1"},
    ]
    for path in ("/api/v1/cdn/clear-cache", "//api/v1/cdn/clear-cache", "/API/v1/cdn/clear-cache"):
        for headers in attempts:
            async with client.post(
                service.edge_url + path,
                json={"domain": "example.com"},
                headers={**headers, "Authorization": f"Bearer {secret}"},
            ) as r:
                assert await r.text() != "Cache cleared"
                if headers["Host"] != "example.com":
                    assert r.status == 421
    # What reached the origin was the domain's own traffic, and nothing was cleared.
    assert {s.target for s in origin.seen if s.method == "POST"} <= {
        "/api/v1/cdn/clear-cache",
        "//api/v1/cdn/clear-cache",
        "/API/v1/cdn/clear-cache",
    }
    assert (await service.store.lookup("example.com", "/")).key[1] == 0
    async with client.get(service.edge_url + "/page", headers={"Host": "example.com"}) as r:
        assert "hit" in r.headers["Cache-Status"]
    async with client.get(service.edge_url + "/healthz", headers={"Host": api_host}) as r:
        assert r.status == 421


async def test_the_dashboard_is_on_the_api_listener_only(
    service: Service, origin: Origin, client: aiohttp.ClientSession
) -> None:
    async with client.get(service.api_url + "/dashboard", allow_redirects=False) as r:
        assert r.status == 303
        assert r.headers["Location"] == "/dashboard/sign-in?next=/dashboard"
    async with client.get(service.api_url + "/dashboard/sign-in") as r:
        assert r.status == 200
        assert "Content-Security-Policy" in r.headers
    origin.reply("/dashboard", b"the origin's own page")
    async with client.get(service.edge_url + "/dashboard", headers={"Host": "example.com"}) as r:
        assert await r.read() == b"the origin's own page"  # proxied, like any other path
    api_host = service.api_url.removeprefix("http://")
    async with client.get(service.edge_url + "/dashboard", headers={"Host": api_host}) as r:
        assert r.status == 421


async def test_a_port_in_use_stops_start_up_and_leaves_nothing_listening(
    tmp_path: Path, origin: Origin
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        api_port = taken.getsockname()[1]
        # Chosen while the API's port is held, so the OS cannot hand out the same one (a CI
        # run got it twice: a config error, not the start-up error under test).
        edge_port = free_port()
        config = make_config(
            tmp_path,
            origin.url,
            edge={"listen": f"127.0.0.1:{edge_port}"},
            api={"listen": f"127.0.0.1:{api_port}"},
        )
        with pytest.raises(StartError, match=r"api.listen: cannot listen on 127.0.0.1:\d+"):
            async with running(config):
                pytest.fail("must not start")
    with socket.socket() as again:
        again.bind(("127.0.0.1", edge_port))  # the edge listener was closed again


# -- the command line, as an operator runs it --------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[edge]\nlisten=8080\n[api]\nlisten="127.0.0.1:0"\n[cache]\nmax_bytes="1MiB"\n'
            '[state]\npath="s.db"\n[[domains]]\nname="example.com"\norigin="http://127.0.0.1:1"\n',
            "edge.listen: is required and must be a string",
        ),
        ("[edge\n", "is not valid TOML"),
        (
            '[edge]\nlisten="127.0.0.1:0"\n[api]\nlisten="127.0.0.1:0"\n[cache]\nmax_bytes="1MiB"\n'
            '[state]\npath="s.db"\n[[domains]]\nname="example.com"\norigin="ftp://x"\n',
            "domains[0].origin: 'ftp://x' must start with http:// or https://",
        ),
        (
            '[edge]\nlisten="127.0.0.1:0"\n[api]\nlisten="127.0.0.1:0"\n[cache]\nmax_bytes="lots"\n'
            '[state]\npath="s.db"\n[[domains]]\nname="example.com"\norigin="http://127.0.0.1:1"\n',
            "cache.max_bytes: 'lots' is not a size",
        ),
    ],
)
async def test_a_broken_config_stops_start_up_with_one_message(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    status, out, err = await cli("serve", "--config", str(path))
    assert status == 2
    assert out == ""
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.fixture(params=WORKER_COUNTS)
async def server(
    request: pytest.FixtureRequest, tmp_path: Path, origin: Origin
) -> AsyncIterator[Node]:
    """The node as an operator runs it: one process, or two edge workers and a control
    process coordinated through the embedded Valkey (the same tests hold for both)."""
    node = await Node.start(write_config(tmp_path, origin.url, workers=request.param))
    yield node
    await node.kill()  # the node, and anything of its group still running


@pytest.mark.slow
async def test_sigterm_drains_in_flight_requests_and_exits_cleanly(
    server: Node, origin: Origin, client: aiohttp.ClientSession
) -> None:
    arrived = asyncio.Event()
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        arrived.set()
        await release.wait()
        return web.Response(text="finished", headers=CACHEABLE)

    origin.route("/slow", slow)
    in_flight = asyncio.create_task(
        client.get(server.edge + "/slow", headers={"Host": "example.com"})
    )
    await arrived.wait()
    workers = server.worker_pids()
    assert len(workers) == server.workers
    server.process.send_signal(signal.SIGTERM)
    release.set()
    response = await in_flight
    assert response.status == 200
    assert await response.text() == "finished"
    response.release()
    async with asyncio.timeout(20):
        assert await server.process.wait() == 0
    assert not any(map(alive, workers))  # the node stopped them, and waited for them


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    WORKER_COUNTS,
)
async def test_the_process_exits_at_once_after_logging_stopped(
    tmp_path: Path, origin: Origin, workers: int
) -> None:
    """Issue 22 item 8: the process exited about 1.9 s after logging ``stopped``: the
    interpreter's teardown of every module and object (0.1 to 0.9 s here for a node with
    workers, under load). Everything is closed when ``stopped`` is logged, so it exits then:
    in 5 to 50 ms here, well under the bound."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--config",
        str(write_config(tmp_path, origin.url, workers=workers)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        async with asyncio.timeout(60):
            while not (await process.stdout.readline()).startswith(b"api "):
                pass
            process.send_signal(signal.SIGTERM)
            while not (line := await process.stderr.readline()).rstrip().endswith(b" stopped"):
                assert line, "it exited without logging stopped"
            stopped = time.monotonic()
            code = await process.wait()
        took = time.monotonic() - stopped
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
    assert code == 0
    assert took < 0.25, f"exited {took:.2f} s after logging stopped"


@pytest.mark.slow
async def test_tokens_from_the_cli_work_at_once_in_a_running_server(
    server: Node, tmp_path: Path, origin: Origin, client: aiohttp.ClientSession
) -> None:
    config = str(tmp_path / "proxy.toml")
    status, token, err = await cli("token", "create", "deploy", "--all-domains", "--config", config)
    assert status == 0, err
    token = token.strip()
    assert len(token.splitlines()) == 1

    async def clear(secret: str) -> tuple[int, str]:
        async with client.post(
            server.api + "/api/v1/cdn/clear-cache",
            json={"domain": "example.com"},
            headers={"Authorization": f"Bearer {secret}"},
        ) as r:
            return r.status, await r.text()

    assert await clear(token) == (200, "Cache cleared")

    status, new_token, _ = await cli("token", "regenerate", "deploy", "--config", config)
    assert status == 0
    new_token = new_token.strip()
    assert new_token != token
    old_status, _ = await clear(token)
    assert old_status == 401
    assert await clear(new_token) == (200, "Cache cleared")

    status, out, err = await cli("purge", "example.com", "--api", server.api, "--token", new_token)
    assert (status, out.strip()) == (0, "Cache cleared"), err

    status, _, _ = await cli("token", "revoke", "deploy", "--config", config)
    assert status == 0
    revoked_status, _ = await clear(new_token)
    assert revoked_status == 401
    status, out, err = await cli("purge", "example.com", "--api", server.api, "--token", new_token)
    assert status == 1
    assert out == ""
    assert err.strip()
