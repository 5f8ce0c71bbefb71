"""What the dashboard tests share: the real API app (dashboard mounted) on a real listener,
with a state database in tmp_path, a real store and telemetry, a hand-moved clock and a cheap
argon2 hasher; and a client that signs in and posts forms the way a browser does."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from argon2 import PasswordHasher, profiles
from multidict import CIMultiDict

from proxy.config import Config, parse_config
from proxy.state.sqlite import AsyncState, AuditRecord
from proxy.store.memory import MemoryStore
from proxy.telemetry import Telemetry
from tests.api.support import DOMAINS, START, FakeClock, stored_response

ADMIN = "alice"
PASSWORD = "correct horse battery staple"
CHEAP = PasswordHasher.from_parameters(profiles.CHEAPEST)  # tests judge logic, not cost
IDLE = 3600.0
LIFETIME = 8 * 3600.0
FREE_FAILURES = 3

AiohttpClient = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]
_CSRF = re.compile(r'name="csrf" value="([^"]*)"')
_NEW_TOKEN = re.compile(r'data-testid="new-token">([^<]*)<')


def dashboard_config(tmp_path: Path, **dashboard: Any) -> Config:
    return parse_config(
        {
            "edge": {"listen": "127.0.0.1:0"},
            "api": {"listen": "127.0.0.1:0"},
            "cache": {"max_bytes": "1MiB"},
            "state": {"path": "var/state.db"},
            "dashboard": {
                "session_idle_timeout": IDLE,
                "session_lifetime": LIFETIME,
                "signin_failures_allowed": FREE_FAILURES,
                "signin_max_delay": 60,
                **dashboard,
            },
            "domains": [
                {"name": "example.com", "origin": "http://127.0.0.1:9"},
                {"name": "other.test", "origin": "http://127.0.0.1:9"},
                {"name": "bücher.example", "origin": "http://127.0.0.1:9"},
            ],
        },
        base_dir=tmp_path,
    )


@dataclass(frozen=True)
class Page:
    status: int
    headers: CIMultiDict[str]
    text: str

    @property
    def location(self) -> str:
        return self.headers["Location"]

    @property
    def csrf(self) -> str:
        match = _CSRF.search(self.text)
        assert match, "the page has no CSRF field"
        return match.group(1)

    @property
    def new_token(self) -> str | None:
        match = _NEW_TOKEN.search(self.text)
        return match.group(1) if match else None

    def cookie(self, name: str) -> dict[str, str] | None:
        """The attributes of the Set-Cookie for ``name`` (value under "value"), if any."""
        for header in self.headers.getall("Set-Cookie", []):
            jar: SimpleCookie = SimpleCookie()
            jar.load(header)
            if name in jar:
                morsel = jar[name]
                attributes = {key: str(value) for key, value in morsel.items() if value}
                return {"value": morsel.value, **attributes}
        return None


@dataclass
class Dashboard:
    client: TestClient[web.Request, web.Application]
    config: Config
    state: AsyncState
    store: MemoryStore
    telemetry: Telemetry
    clock: FakeClock

    async def get(self, path: str, **kwargs: Any) -> Page:
        async with self.client.get(path, allow_redirects=False, **kwargs) as response:
            return Page(response.status, response.headers.copy(), await response.text())

    async def post(self, path: str, data: Any = None, **kwargs: Any) -> Page:
        async with self.client.post(path, data=data, allow_redirects=False, **kwargs) as r:
            return Page(r.status, r.headers.copy(), await r.text())

    async def sign_in(self, username: str = ADMIN, password: str = PASSWORD) -> Page:
        form = await self.get("/dashboard/sign-in")
        return await self.post(
            "/dashboard/sign-in",
            {"csrf": form.csrf, "username": username, "password": password},
        )

    async def csrf(self, path: str = "/dashboard/tokens") -> str:
        page = await self.get(path)
        assert page.status == 200, page.status
        return page.csrf

    async def act(self, path: str, fields: dict[str, str] | None = None) -> Page:
        """Post a dashboard form with this session's CSRF token, as the page would."""
        return await self.post(path, {"csrf": await self.csrf(), **(fields or {})})

    def session_cookie(self) -> str | None:
        for cookie in self.client.session.cookie_jar:
            if cookie.key == "cdnp_session":
                return cookie.value
        return None

    async def clear_via_api(self, token: str, domain: str = "example.com") -> int:
        async with self.client.post(
            "/api/v1/cdn/clear-cache",
            data=json.dumps({"domain": domain}),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        ) as response:
            return response.status

    async def put_entry(self, domain: str, target: str = "/x", body: bytes = b"cached") -> None:
        key = (await self.store.lookup(domain, target)).key
        assert await self.store.put(key, stored_response(body))

    async def audit(self) -> list[AuditRecord]:
        return await self.state.list_audit(limit=10_000)


DashboardFactory = Callable[..., Awaitable[Dashboard]]

__all__ = [
    "ADMIN",
    "CHEAP",
    "DOMAINS",
    "PASSWORD",
    "START",
    "Dashboard",
    "DashboardFactory",
    "FakeClock",
    "Page",
    "dashboard_config",
]
