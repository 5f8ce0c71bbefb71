"""How every dashboard response is made: rendering, error pages, and the security headers.

Every response under /dashboard carries:

- ``Content-Security-Policy``: scripts, styles and images only from this origin, no inline
  script or style, no plugins, forms only to this origin, and no framing;
- ``X-Frame-Options: DENY`` for browsers that predate frame-ancestors;
- ``Cache-Control: no-store``: pages show tokens and audit data, and a new token is shown in
  exactly one response, which nothing may keep;
- ``Referrer-Policy: no-referrer``, ``Cross-Origin-Opener-Policy: same-origin``.

Errors are HTML pages, not the API's problem+json: a 404 or 405 from the router, a 4xx a
handler raises, the state database failing (503), and anything unexpected (500, logged here,
never shown).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp_jinja2
from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.api.dashboard.context import Session
from proxy.api.problems import status_phrase
from proxy.core.purge.receipts import number_text
from proxy.errors import StateError

log = logging.getLogger("proxy.dashboard")

SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


class PageError(Exception):
    """A 4xx or 5xx the dashboard answers with its error page and this message."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers: Mapping[str, str] = headers or {}


def render(
    request: web.Request,
    template: str,
    context: Mapping[str, Any],
    *,
    session: Session | None,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    response = aiohttp_jinja2.render_template(
        template, request, {**context, "session": session}, status=status
    )
    if headers:
        response.headers.update(headers)
    return response


def when(at: float | None) -> str:
    """A time for a table: UTC to the second, or "never"."""
    if at is None:
        return "never"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def clock_number(number: int) -> str:
    """A clear's or purge's number for people, as the CLI says it (``number_text``), to the
    millisecond: a table's cell has the whole number in its title."""
    return number_text(number, digits=3)


def clear_number(number: int) -> str:
    """The last clear a process applied: ``clock_number``, or "none yet" for 0."""
    return "none yet" if number <= 0 else clock_number(number)


def size(count: int) -> str:
    """Bytes for people: 1023 B, 1.0 KiB, 12.3 MiB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def percent(ratio: float | None) -> str:
    return "no requests yet" if ratio is None else f"{ratio * 100:.1f} %"


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    try:
        return render(
            request,
            "error.html",
            {
                "title": f"{status} {status_phrase(status)}",
                "status": status,
                "phrase": status_phrase(status),
                "message": message,
            },
            session=None,
            status=status,
        )
    except Exception:  # a template that cannot render must not hide the error it reports
        log.exception("the error page could not be rendered")
        return web.Response(status=status, text=message, content_type="text/plain")


_ROUTER_MESSAGES = {
    404: "There is no such page.",
    405: "This page does not take that method.",
    413: "The form is too large.",
}


@web.middleware
async def error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as an HTML page with a clear message; no stack trace leaves."""
    try:
        return await handler(request)
    except PageError as exc:
        response = error_page(request, exc.status, exc.message)
        response.headers.update(exc.headers)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error_page(request, exc.status, _ROUTER_MESSAGES.get(exc.status, exc.reason))
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except StateError as exc:
        log.error("dashboard: the state database failed: %s", exc)
        return error_page(request, 503, "The state database is unavailable; try again.")
    except Exception:
        log.exception("dashboard: unexpected error answering %s %s", request.method, request.path)
        return error_page(request, 500, "The dashboard could not answer this request.")
