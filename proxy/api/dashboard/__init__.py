"""The dashboard: server-rendered pages under /dashboard on the API listener.

It is an aiohttp sub-application of the control-plane app, so its middlewares (HTML error
pages) and response hook (security headers) apply to every response under /dashboard and to
nothing else. Templates (Jinja2, autoescaped) and the static files (style, script, icon)
are package data.

Layout: ``context`` (what handlers share), ``pages`` (rendering, errors, headers), ``auth``
(sign-in, sessions, CSRF), ``tokens``, ``views`` (overview, domains, history, nodes), ``chart``,
``purge_form`` (the Domains page's purge, dry run first), ``receipt_view`` (receipts for
people, on the purge page and in History) and ``trace_form`` (the Domains page's trace).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING

import aiohttp_jinja2
import jinja2
from aiohttp import web
from argon2 import PasswordHasher

from proxy.api.clear_cache import PurgeContext
from proxy.api.dashboard import auth, purge_form, tokens, trace_form, views
from proxy.api.dashboard.context import DASHBOARD, PREFIX, DashboardContext, DummyHash
from proxy.api.dashboard.pages import (
    clear_number,
    error_pages,
    percent,
    security_headers,
    size,
    when,
)
from proxy.core.auth.ratelimit import DoublingDelay, FailureThrottle
from proxy.core.auth.sessions import SessionPolicy
from proxy.observe.telemetry import StoreFigures, Telemetry
from proxy.state.admins import password_hasher

if TYPE_CHECKING:  # the fleet, with its Valkey client, only where a node has one
    from proxy.fleet.figures import FleetFigures

__all__ = ["PREFIX", "create_dashboard"]

HASHING_AT_ONCE = 2  # concurrent argon2 verifications (64 MiB each)
_STATIC = {
    "dashboard.css": "text/css",
    "dashboard.js": "text/javascript",
    "favicon.svg": "image/svg+xml",  # named by base.html: a browser asked /favicon.ico, a 404
}


def create_dashboard(
    *,
    clear: PurgeContext,
    store: StoreFigures | None,
    telemetry: Telemetry | None,
    clock: Callable[[], float] = time.time,
    hasher: PasswordHasher | None = None,
    fleet: FleetFigures | None = None,
) -> web.Application:
    """The dashboard app, to mount at PREFIX. ``hasher`` checks passwords (any argon2 hash
    verifies whatever its parameters) and rehashes those made with other parameters."""
    config = clear.config.dashboard
    hasher = hasher or password_hasher()
    signin_delays = DoublingDelay(
        free=config.signin_failures_allowed, max_delay=config.signin_max_delay
    )
    app = web.Application(middlewares=[error_pages])
    app.on_response_prepare.append(security_headers)
    app[DASHBOARD] = DashboardContext(
        state=clear.state,
        store=store,
        telemetry=telemetry,
        fleet=fleet,
        clear=clear,
        clock=clock,
        policy=SessionPolicy(config.session_idle_timeout, config.session_lifetime),
        hasher=hasher,
        dummy_hash=DummyHash(hasher),
        failed_names=FailureThrottle(signin_delays),
        failed_addresses=FailureThrottle(signin_delays),
        hashing=asyncio.Semaphore(HASHING_AT_ONCE),
    )
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("proxy.api.dashboard", "templates"),
        default_helpers=False,
        undefined=jinja2.StrictUndefined,
        filters={"when": when, "size": size, "percent": percent, "clear_number": clear_number},
    )
    app.router.add_get("/sign-in", auth.sign_in_page)
    app.router.add_post("/sign-in", auth.sign_in)
    app.router.add_post("/sign-out", auth.sign_out)
    app.router.add_get("/", _to_overview)
    views.add_routes(app)
    purge_form.add_routes(app)
    trace_form.add_routes(app)
    tokens.add_routes(app)
    for name, content_type in _STATIC.items():
        app.router.add_get(f"/static/{name}", _static(name, content_type))
    return app


async def _to_overview(request: web.Request) -> web.Response:
    return auth.see_other(PREFIX)


def _static(name: str, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    body = resources.files("proxy.api.dashboard").joinpath("static", name).read_bytes()

    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type, charset="utf-8")

    return serve
