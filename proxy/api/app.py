"""The control-plane application: the clear-cache API and a health check.

It listens on its own address (``api.listen``), never behind a proxied Host, and holds no
globals: everything it uses is passed to ``create_api_app`` and kept in ``web.AppKey``s. The
caller owns the lifecycles of ``state`` and ``purger`` (open before, close after).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web

from proxy.api import problems
from proxy.api.clear_cache import (
    CLEAR_CACHE_CONTEXT,
    CLEAR_CACHE_PATH,
    ClearCacheContext,
    clear_cache,
)
from proxy.config import Config
from proxy.core.ratelimit import FailureLimiter
from proxy.state.sqlite import AsyncState
from proxy.store.base import Purger

HEALTHZ_PATH = "/healthz"


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
) -> web.Application:
    """Build the control-plane app. ``clock`` gives wall-clock seconds (audit, rate limit)."""
    app = web.Application()
    problems.install(app)
    app[CLEAR_CACHE_CONTEXT] = ClearCacheContext(
        config=config,
        state=state,
        purger=purger,
        limiter=FailureLimiter(config.api.auth_failures_allowed, config.api.auth_failure_window),
        clock=clock,
    )
    # Only POST is routed, so the router answers every other method with 405 and Allow: POST,
    # which the problem middleware turns into a problem.
    app.router.add_post(CLEAR_CACHE_PATH, clear_cache)
    app.router.add_get(HEALTHZ_PATH, healthz)
    return app
