"""Fixtures shared by every test: a real origin server, configs, and a running edge."""

from __future__ import annotations

import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import RawTestServer, TestServer
from hypothesis import settings
from yarl import URL

from proxy.config.model import Config, parse_config
from proxy.edge.handler import Edge
from proxy.edge.origin import new_session
from proxy.observe.telemetry import Telemetry
from proxy.store.memory import MemoryStore
from tests.nodes import Node

# Sockets a module leaves open are found when it ends, not in a later test (tests/leaks.py).
pytest_plugins = ("tests.leaks",)

# Property tests judge behaviour, not speed: a per-example deadline only makes them flaky on
# a loaded 2-core machine. Speed is measured in benchmarks/.
settings.register_profile("cdn-proxy", deadline=None)
settings.load_profile("cdn-proxy")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The modules with the longest tests (a run's --durations, issue 34), longest first. They run
# first, then the other modules with slow tests, then the rest: pytest-xdist's worksteal hands
# each worker a share of the list in this order and an idle worker takes the end of a busy
# one's, so the run ends on short tests on every core instead of one long test on one core.
LONGEST_FIRST = (
    "tests/test_benchmarks_smoke.py",
    "tests/test_benchmarks_soak.py",
    "tests/test_benchmarks_soak_h2.py",
    "tests/test_fleet_clear_calls_smoke.py",
    "tests/conformance/test_cache_tests.py",
    "tests/fleet/test_checker_peers.py",
    "tests/test_packaging.py",
    "tests/store/shared/test_pages.py",
    "tests/fleet/test_checker.py",
    "tests/fleet/test_checker_disk.py",
    "tests/fleet/test_peer_nodes.py",
    "tests/test_shared_tier.py",
)


@pytest.hookimpl(trylast=True)  # after pytest's own ordering (module-scoped parameters)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules in LONGEST_FIRST order, then the modules with a slow test, then the others;
    each module's tests stay together and in their order (module-scoped fixtures start once)."""
    rank: dict[str, tuple[int, int]] = {}
    for index, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        first = rank.get(module, (len(LONGEST_FIRST) + 1, index))
        if module in LONGEST_FIRST:
            group = LONGEST_FIRST.index(module)
        elif item.get_closest_marker("slow") is not None:
            group = len(LONGEST_FIRST)
        else:
            group = first[0]
        rank[module] = (min(group, first[0]), first[1])
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (*rank[item.nodeid.split("::", 1)[0]], order[id(item)]))


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    header_items: list[tuple[str, str]]
    body: bytes


@dataclass
class Origin:
    """A real origin server whose answers each test sets, and which records every request."""

    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    routes: dict[str, Handler] = field(default_factory=dict)
    default: Handler | None = None  # answers unrouted targets (404 when unset)

    def route(self, target: str, handler: Handler) -> None:
        self.routes[target] = handler

    def reply(
        self,
        target: str,
        body: bytes = b"hello",
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer ``target`` with a fixed response."""

        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(status=status, body=body, headers=headers or {})

        self.routes[target] = handler

    def count(self, target: str, method: str | None = None) -> int:
        return sum(
            1 for s in self.seen if s.target == target and (method is None or s.method == method)
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(
            Seen(
                method=request.method,
                target=request.raw_path,
                headers=dict(request.headers),
                header_items=list(request.headers.items()),
                body=await request.read(),
            )
        )
        handler = self.routes.get(request.raw_path, self.default)
        if handler is None:
            return web.Response(status=404, text="no such route in the test origin")
        return await handler(request)


@pytest.fixture
async def origin(aiohttp_server: Callable[..., Awaitable[TestServer]]) -> Origin:
    state = Origin()
    app = web.Application()
    app.router.add_route("*", r"/{tail:[\s\S]*}", state.handle)  # %0a in a path too
    server = await aiohttp_server(app)
    state.url = str(server.make_url("")).rstrip("/")
    return state


def make_config(tmp_path: Path, origin_url: str, **overrides: Any) -> Config:
    """A config for tests: example.com and other.test on the given origin, ports chosen by the
    OS. ``overrides`` replace whole tables (edge=..., cache=..., domains=...)."""
    data: dict[str, Any] = {
        "edge": {"listen": "127.0.0.1:0", "shutdown_timeout": 5},
        "api": {"listen": "127.0.0.1:0"},
        "cache": {"max_bytes": "16MiB", "max_object_bytes": "1MiB"},
        "state": {"path": str(tmp_path / "state.db")},
        "domains": [
            {"name": "example.com", "origin": origin_url, "read_timeout": 5},
            {"name": "other.test", "origin": origin_url, "read_timeout": 5},
        ],
    }
    data.update(overrides)
    return parse_config(data, base_dir=tmp_path)


class FakeClock:
    """Wall-clock time that tests move forward by hand: starts at the real time, so origin
    Date headers stay consistent with it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class EdgeUnderTest:
    """The edge handler on a real listener, with its store, and a client to talk to it."""

    edge: Edge
    store: MemoryStore
    url: str
    client: aiohttp.ClientSession
    clock: FakeClock
    telemetry: Telemetry

    async def get(
        self,
        path: str,
        *,
        host: str = "example.com",
        method: str = "GET",
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        all_headers = {"Host": host, **(headers or {})}
        async with self.client.request(
            method,
            URL(self.url + path, encoded=True),
            headers=all_headers,
            data=data,
            allow_redirects=False,
        ) as response:
            body = await response.read()
            return response, body


EdgeFactory = Callable[..., Awaitable[EdgeUnderTest]]


@pytest.fixture
async def make_edge(
    tmp_path: Path,
    origin: Origin,
    aiohttp_raw_server: Callable[..., Awaitable[RawTestServer]],
) -> AsyncIterator[EdgeFactory]:
    sessions: list[aiohttp.ClientSession] = []
    edges: list[Edge] = []

    async def factory(**overrides: Any) -> EdgeUnderTest:
        clock = FakeClock()
        config = make_config(tmp_path, origin.url, **overrides)
        store = MemoryStore(max_bytes=config.edge_role()[1].max_bytes)
        origin_session = new_session()
        client = aiohttp.ClientSession(auto_decompress=False)
        sessions.extend([origin_session, client])
        telemetry = Telemetry(store=store, domains=[d.name for d in config.domains], clock=clock)
        edge = Edge(
            config=config, store=store, session=origin_session, clock=clock, telemetry=telemetry
        )
        edges.append(edge)
        server = await aiohttp_raw_server(edge.handle)
        return EdgeUnderTest(
            edge=edge,
            store=store,
            url=str(server.make_url("")).rstrip("/"),
            client=client,
            clock=clock,
            telemetry=telemetry,
        )

    yield factory
    for made in edges:
        await made.close()
    for session in sessions:
        await session.close()


@pytest.fixture
async def edge(make_edge: EdgeFactory) -> EdgeUnderTest:
    return await make_edge()


@pytest.fixture
async def nodes() -> AsyncIterator[list[Node]]:
    """Nodes a test starts (tests/nodes.start), each killed when it ends."""
    started: list[Node] = []
    yield started
    for node in started:
        await node.kill()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, for a full disk (the tests run as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
