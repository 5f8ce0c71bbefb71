"""The control-plane application: the clear-cache API, liveness (/healthz) and readiness
(/readyz) checks, and the dashboard.

It listens on its own address (``api.listen``), never behind a proxied Host, and holds no
globals: everything it uses is passed to ``create_api_app`` and kept in ``web.AppKey``s. The
caller owns the lifecycles of ``state``, ``purger`` and ``store`` (open before, close after).
The dashboard (``proxy.api.dashboard``) is a sub-application under /dashboard.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.web_log import AccessLogger
from argon2 import PasswordHasher

from proxy.api import clients, problems
from proxy.api.clear_cache import (
    PURGE_CONTEXT,
    PurgeContext,
    clear_cache,
)
from proxy.api.dashboard import PREFIX as DASHBOARD_PREFIX
from proxy.api.dashboard import create_dashboard
from proxy.api.purge import purge
from proxy.api.readiness import READINESS, READYZ_PATH, Readiness, readiness_context, readyz
from proxy.api.trace import INSPECT, PEER_NODES, Inspect, trace_route
from proxy.config.model import Config
from proxy.core.auth.ratelimit import FailureThrottle, SlidingWindow
from proxy.core.routes import CLEAR_CACHE_PATH, PURGE_PATH, TRACE_PATH
from proxy.observe.telemetry import METRICS_PATH, TELEMETRY, StoreFigures, Telemetry, metrics
from proxy.state.async_state import AsyncState
from proxy.store.base import Purger

if TYPE_CHECKING:  # the fleet, with its Valkey client, only where a node has one
    from proxy.fleet.figures import FleetFigures

HEALTHZ_PATH = "/healthz"


_AUDITED = frozenset((CLEAR_CACHE_PATH, PURGE_PATH))


class ApiAccessLogger(AccessLogger):
    """aiohttp's access log of the control plane, but for clear and purge requests: each
    already has its audit record (who asked, from where, for which domain, the outcome, the
    status and how long it took). A second line would cost the edge's core another 26 µs
    per clear (aiohttp's AccessLogger.log with a file handler, measured warm)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        if request.path not in _AUDITED:
            super().log(request, response, time)


async def healthz(request: web.Request) -> web.Response:
    response = web.Response(text="ok", content_type="text/plain", charset="utf-8")
    response.headers["Cache-Control"] = "no-store"
    return response


def create_api_app(
    *,
    config: Config,
    state: AsyncState,
    purger: Purger,
    clock: Callable[[], float] = time.time,
    telemetry: Telemetry | None = None,
    store: StoreFigures | None = None,
    password_hasher: PasswordHasher | None = None,
    fleet: FleetFigures | None = None,
    inspect: Inspect | None = None,
) -> web.Application:
    """Build the control-plane app. ``clock`` gives wall-clock seconds (audit, rate limit,
    sessions). ``store`` gives the dashboard its per-domain entries and bytes;
    ``password_hasher`` is the argon2 hasher of dashboard passwords (tests pass a cheap one);
    ``fleet`` lists the fleet's edge processes on the Nodes page; ``inspect`` reads this
    process's store for a trace without changing it (``MemoryStore.inspect``)."""
    app = web.Application()
    problems.install(app)
    telemetry = telemetry if telemetry is not None else Telemetry()
    api, _ = config.api_role()
    clients.install(app, api)  # first: every handler sees the client a trusted proxy names
    clear = app[PURGE_CONTEXT] = PurgeContext(
        config=config,
        state=state,
        purger=purger,
        limiter=FailureThrottle(SlidingWindow(api.auth_failures_allowed, api.auth_failure_window)),
        clock=clock,
        telemetry=telemetry,
    )
    # Only POST is routed, so the router answers every other method with 405 and Allow: POST,
    # which the problem middleware turns into a problem.
    app.router.add_post(CLEAR_CACHE_PATH, clear_cache)
    app.router.add_post(PURGE_PATH, purge)
    app.router.add_post(TRACE_PATH, trace_route)
    if inspect is not None:
        app[INSPECT] = inspect
    if fleet is not None:
        app[PEER_NODES] = fleet
    app.router.add_get(HEALTHZ_PATH, healthz)
    # Readiness (the origins answer) apart from liveness (the process answers): readiness.py.
    app[READINESS] = Readiness(config)
    app.cleanup_ctx.append(readiness_context)
    app.router.add_get(READYZ_PATH, readyz)
    app[TELEMETRY] = telemetry
    app.router.add_get(METRICS_PATH, metrics)
    app.add_subapp(
        DASHBOARD_PREFIX,
        create_dashboard(
            clear=clear,
            store=store,
            telemetry=telemetry,
            clock=clock,
            hasher=password_hasher,
            fleet=fleet,
        ),
    )
    return app
