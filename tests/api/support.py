"""What the control-plane tests share: a config, a hand-moved clock, the app under test and
the check every rejection must pass."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict

from proxy.config.model import Config, parse_config
from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.state.async_state import AsyncState
from proxy.state.sqlite import AuditRecord
from proxy.store.memory import MemoryStore

CLEAR_CACHE = "/api/v1/cdn/clear-cache"
DOMAIN = "example.com"
OTHER = "other.test"
IDN = "xn--bcher-kva.example"  # bücher.example
DOMAINS = (DOMAIN, OTHER, IDN)
START = 1_700_000_000.0

AiohttpClient = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]

# The config file the CLI tests run the command with: two domains, state beside it.
CLI_CONFIG = """\
[edge]
listen = "127.0.0.1:0"

[api]
listen = "127.0.0.1:0"

[cache]
max_bytes = "1MiB"

[state]
path = "var/state.db"

[[domains]]
name = "example.com"
origin = "http://127.0.0.1:9"

[[domains]]
name = "other.test"
origin = "http://127.0.0.1:9"
"""


def write_cli_config(tmp_path: Path) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(CLI_CONFIG, encoding="utf-8")
    return path


def table_rows(out: str) -> list[dict[str, str]]:
    """The rows of a table the CLI printed, as {column heading: cell}. Cells are whatever
    stands between runs of two or more spaces, so widths and padding do not matter."""
    header, *rows = (re.split(r" {2,}", line.strip()) for line in out.splitlines())
    assert all(len(row) == len(header) for row in rows), out
    return [dict(zip(header, row, strict=True)) for row in rows]


def api_config(tmp_path: Path, **api: Any) -> Config:
    """A config with three domains (one international) and ``api`` settings overridden."""
    return parse_config(
        {
            "edge": {"listen": "127.0.0.1:0"},
            "api": {"listen": "127.0.0.1:0", **api},
            "cache": {"max_bytes": "1MiB"},
            "state": {"path": "var/state.db"},
            "domains": [
                {"name": "example.com", "origin": "http://127.0.0.1:9"},
                {"name": "other.test", "origin": "http://127.0.0.1:9"},
                {"name": "bücher.example", "origin": "http://127.0.0.1:9"},
            ],
        },
        base_dir=tmp_path,
    )


@dataclass
class FakeClock:
    """Wall-clock time the test moves by hand, so windows pass without sleeping."""

    now: float = START

    def __call__(self) -> float:
        return self.now


def stored_response(body: bytes = b"cached body") -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Content-Type", "text/plain"),),
        body=body,
        birth=START,
        freshness_lifetime=3600.0,
    )


@dataclass(frozen=True)
class Answer:
    status: int
    headers: CIMultiDict[str]
    body: bytes

    def problem(self) -> dict[str, Any]:
        assert self.headers["Content-Type"] == "application/problem+json"
        data = json.loads(self.body)
        assert isinstance(data, dict)
        return data


@dataclass
class ApiUnderTest:
    client: TestClient[web.Request, web.Application]
    config: Config
    state: AsyncState
    store: MemoryStore
    clock: FakeClock
    tokens: dict[str, str] = field(default_factory=dict)  # name -> token
    keys: dict[str, CacheKey] = field(default_factory=dict)  # domain -> its stored entry

    @property
    def state_path(self) -> Path:
        return self.config.api_role()[1].path

    async def post(
        self,
        body: bytes | None = None,
        *,
        domain: str | None = DOMAIN,
        token: str | None = "deploy",
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
        path: str = CLEAR_CACHE,
    ) -> Answer:
        """POST to clear-cache (or ``path``). ``token`` is a token *name* from ``tokens`` (or
        None); by default the body is ``{"domain": domain}``."""
        all_headers: dict[str, str] = {}
        if content_type is not None:
            all_headers["Content-Type"] = content_type
        if token is not None:
            all_headers["Authorization"] = f"Bearer {self.tokens[token]}"
        all_headers.update(headers or {})
        if body is None:
            body = json.dumps({"domain": domain}).encode()
        return await self.send("POST", path, data=body, headers=all_headers)

    async def send(
        self, method: str, path: str = CLEAR_CACHE, data: Any = None, headers: Any = None
    ) -> Answer:
        async with self.client.request(
            method,
            path,
            data=data,
            headers=headers,
            # Without this, aiohttp would add Content-Type: application/octet-stream.
            skip_auto_headers=["Content-Type"],
        ) as response:
            return Answer(response.status, response.headers.copy(), await response.read())

    async def put_entry(self, domain: str, target: str = "/x") -> CacheKey:
        key = (await self.store.lookup(domain, target)).key
        assert await self.store.put(key, stored_response())
        self.keys[domain] = key
        return key

    async def is_untouched(self, domain: str) -> bool:
        """The entry put for ``domain`` is still served: same generation, still stored."""
        key = self.keys[domain]
        found = await self.store.lookup(domain, key[2])
        return found.key == key and bool(found.variants)

    async def is_cleared(self, domain: str) -> bool:
        """Nothing stored for ``domain`` can be looked up any more."""
        key = self.keys[domain]
        found = await self.store.lookup(domain, key[2])
        stats = await self.store.domain_stats(domain)
        return found.key[1] > key[1] and not found.variants and stats.entries == 0

    async def audit(self) -> list[AuditRecord]:
        """Every audit record, newest first."""
        return await self.state.list_audit(limit=10_000)


ApiFactory = Callable[..., Awaitable[ApiUnderTest]]

CHALLENGE = 'Bearer realm="cdn-proxy"'
INVALID_REQUEST = f'{CHALLENGE}, error="invalid_request"'
INVALID_TOKEN = f'{CHALLENGE}, error="invalid_token"'
INSUFFICIENT_SCOPE = f'{CHALLENGE}, error="insufficient_scope"'


async def assert_rejected(
    api: ApiUnderTest,
    answer: Answer,
    status: int,
    outcome: str,
    *,
    headers: dict[str, str] | None = None,
    detail: str = "",
) -> AuditRecord:
    """The request was refused as ``status`` and changed nothing but the audit log."""
    assert answer.status == status, answer.body
    for name, value in (headers or {}).items():
        assert answer.headers.getall(name) == [value], name
    if status not in (400, 401, 403):
        assert "WWW-Authenticate" not in answer.headers
    assert answer.headers["Cache-Control"] == "no-store"
    problem = answer.problem()
    assert problem == {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": problem["detail"],
    }
    assert detail in problem["detail"]
    for domain in DOMAINS:
        assert await api.is_untouched(domain), domain
    [record] = await api.audit()
    assert (record.outcome, record.status, record.entries_dropped) == (outcome, status, 0)
    assert record.client == "127.0.0.1"
    assert record.at == START
    return record


ServerFactory = Callable[..., Awaitable[TestServer]]


async def recording_api(aiohttp_server: ServerFactory, seen: list[str]) -> str:
    """A stand-in API that records every request it gets and clears nothing."""

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.host}{request.path}")
        return web.Response(text="Cache cleared")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")
