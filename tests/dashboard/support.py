"""What the dashboard tests share: the real API app (dashboard mounted) on a real listener,
with a state database in tmp_path, a real store and telemetry, a hand-moved clock and a cheap
argon2 hasher; and a client that signs in and posts forms the way a browser does."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from argon2 import PasswordHasher, profiles
from multidict import CIMultiDict

from proxy.config.model import Config, parse_config
from proxy.observe.telemetry import Telemetry
from proxy.state.async_state import AsyncState
from proxy.state.sqlite import AuditRecord
from proxy.store.memory import MemoryStore
from tests.api.support import DOMAINS, START, FakeClock, stored_response

ADMIN = "alice"
PASSWORD = "correct horse battery staple"
CHEAP = PasswordHasher.from_parameters(profiles.CHEAPEST)  # tests judge logic, not cost
IDLE = 3600.0
LIFETIME = 8 * 3600.0
FREE_FAILURES = 3

AiohttpClient = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]


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


# Elements that have no end tag (HTML's void elements) among those the templates use.
_VOID = frozenset({"br", "hr", "img", "input", "link", "meta", "col", "source", "wbr"})


@dataclass
class Element:
    """An element of a parsed page: tests ask for elements and their text, not markup."""

    tag: str
    attrs: dict[str, str]  # an attribute without a value maps to ""
    children: list[Element | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The text inside, with runs of whitespace made one space, as a reader sees it."""
        parts = [c if isinstance(c, str) else c.text for c in self.children]
        return " ".join(" ".join(parts).split())

    def find_all(self, tag: str | None = None, **attrs: str | None) -> list[Element]:
        """Elements below, in document order, with ``tag`` and ``attrs`` (``data_token`` is
        ``data-token``, ``for_`` is ``for``; None matches any value of a present attribute)."""
        wanted = {key.rstrip("_").replace("_", "-"): value for key, value in attrs.items()}
        found = []
        for child in self.children:
            if isinstance(child, str):
                continue
            if (tag is None or child.tag == tag) and all(
                key in child.attrs and value in (None, child.attrs[key])
                for key, value in wanted.items()
            ):
                found.append(child)
            found.extend(child.find_all(tag, **attrs))
        return found

    def find(self, tag: str | None = None, **attrs: str | None) -> Element:
        """The one element that matches; fails the test if there are none or several."""
        [element] = self.find_all(tag, **attrs)
        return element


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self._open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {key: value or "" for key, value in attrs})
        self._open[-1].children.append(element)
        if tag not in _VOID:
            self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._open) - 1, 0, -1):
            if self._open[depth].tag == tag:
                del self._open[depth:]
                return

    def handle_data(self, data: str) -> None:
        self._open[-1].children.append(data)


def parse_html(text: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


@dataclass(frozen=True)
class Page:
    status: int
    headers: CIMultiDict[str]
    text: str

    @property
    def location(self) -> str:
        return self.headers["Location"]

    @functools.cached_property
    def html(self) -> Element:
        return parse_html(self.text)

    @property
    def words(self) -> str:
        """What a reader sees on the page: its text without markup, whitespace made one space."""
        return self.html.text

    @property
    def csrf(self) -> str:
        """The CSRF token the page's forms carry (every form carries the same one)."""
        [token] = {input.attrs["value"] for input in self.html.find_all("input", name="csrf")}
        return token

    @property
    def new_token(self) -> str | None:
        shown = self.html.find_all(data_testid="new-token")
        return shown[0].text if shown else None

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
