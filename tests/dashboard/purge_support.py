"""What the purge form tests share: posting the Domains page's purge form and its Confirm
the way a browser does, in-process (tests/dashboard/support.Dashboard) or against a real
``cdn-proxy serve`` in a child process (``DashboardNode``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict, MultiDict

from proxy.state.admins import hash_password
from proxy.state.sqlite import StateDB
from tests.api.purge_support import PurgeNode, purge_node
from tests.dashboard.support import ADMIN, CHEAP, PASSWORD, Dashboard, Page

PREVIEW = "/dashboard/domains/purge"
CONFIRM = "/dashboard/domains/purge/confirm"


def purge_fields(
    domain: str, kind: str, items: str = "", *, soft: bool = False, csrf: str | None = None
) -> MultiDict[str]:
    """The purge form of ``domain``'s row as filled in (``items``: the textarea)."""
    fields: MultiDict[str] = MultiDict(domain=domain, kind=kind, items=items)
    if soft:
        fields["soft"] = "1"
    if csrf is not None:
        fields["csrf"] = csrf
    return fields


def confirm_fields(preview: Page) -> MultiDict[str]:
    """The preview's Confirm form, as the browser posts it: its hidden fields, in order."""
    form = preview.html.find("form", action=CONFIRM)
    return MultiDict(
        (field.attrs["name"], field.attrs["value"])
        for field in form.find_all("input", type="hidden")
    )


def receipt_figure(page: Page, testid: str) -> str:
    return page.html.find("dl", data_testid="receipt").find("dd", data_testid=testid).text


def alert(page: Page) -> str:
    return page.html.find(role="alert").text


async def preview(dashboard: Dashboard, fields: MultiDict[str]) -> Page:
    """Post the Domains page's purge form with this session's CSRF token."""
    fields.setdefault("csrf", await dashboard.csrf("/dashboard/domains"))
    return await dashboard.post(PREVIEW, fields)


async def preview_and_confirm(dashboard: Dashboard, fields: MultiDict[str]) -> tuple[Page, Page]:
    shown = await preview(dashboard, fields)
    assert shown.status == 200, shown.words
    return shown, await dashboard.post(CONFIRM, confirm_fields(shown))


# -- a real node -------------------------------------------------------------------------------


@dataclass
class DashboardNode:
    """A real node (tests/api/purge_support.PurgeNode: a versioned origin, a token) whose
    dashboard an admin is signed in to, through a session with its own cookie jar."""

    purge: PurgeNode
    browser: aiohttp.ClientSession

    async def page(self, method: str, path: str, data: MultiDict[str] | None = None) -> Page:
        async with self.browser.request(
            method, self.purge.node.api + path, data=data, allow_redirects=False
        ) as response:
            return Page(response.status, CIMultiDict(response.headers), await response.text())

    async def preview(self, fields: MultiDict[str]) -> Page:
        domains = await self.page("GET", "/dashboard/domains")
        fields.setdefault("csrf", domains.csrf)
        return await self.page("POST", PREVIEW, fields)

    async def confirm(self, shown: Page) -> Page:
        return await self.page("POST", CONFIRM, confirm_fields(shown))


@asynccontextmanager
async def dashboard_node(
    tmp_path: Path, aiohttp_server: Callable[..., Awaitable[TestServer]]
) -> AsyncIterator[DashboardNode]:
    # The admin is in the state file before the node opens it (a cheap hash: the node
    # verifies any argon2 hash, then rehashes it with its own parameters).
    with StateDB(tmp_path / "state.db") as db:
        db.admins.create(ADMIN, hash_password(CHEAP, PASSWORD), 0.0)
    async with (
        purge_node(tmp_path, aiohttp_server) as node,
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser,
    ):
        live = DashboardNode(node, browser)
        form = await live.page("GET", "/dashboard/sign-in")
        fields = MultiDict(csrf=form.csrf, username=ADMIN, password=PASSWORD)
        signed = await live.page("POST", "/dashboard/sign-in", fields)
        assert signed.status == 303, signed.words
        yield live
