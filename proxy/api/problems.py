"""Error responses of the control plane: RFC 9457 problem details, and the safety net.

Every error the API sends is ``application/problem+json`` with ``type``, ``title``, ``status``
and ``detail``, and ``Cache-Control: no-store`` (an error about a token must not be cached by
anything in between). ``type`` is ``about:blank``, so ``title`` is the status phrase
(RFC 9457 §4.2.1); ``detail`` says what to fix.

``problem_middleware`` turns the router's own 404/405 into problems, and anything unexpected
into a bare 500 problem: the exception is logged here, never sent to the client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler

PROBLEM_JSON = "application/problem+json"
MAX_DETAIL = 500  # details can quote client input; keep them short

log = logging.getLogger("proxy.api")


def status_phrase(status: int) -> str:
    """The reason phrase of ``status``, or 'Error' for a code HTTP does not name."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(
    status: int,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """A problem+json response for ``status`` with a human-readable ``detail``."""
    if len(detail) > MAX_DETAIL:
        detail = detail[: MAX_DETAIL - 3] + "..."
    body = {
        "type": "about:blank",
        "title": status_phrase(status),
        "status": status,
        "detail": detail,
    }
    response = web.Response(
        status=status,
        # ASCII-only JSON: any client input quoted in ``detail`` is escaped, never raw.
        body=json.dumps(body, ensure_ascii=True).encode("ascii"),
        content_type=PROBLEM_JSON,
        headers=headers,
    )
    response.headers["Cache-Control"] = "no-store"
    return response


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as a problem; nothing leaves as a stack trace."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {}
        if isinstance(exc, web.HTTPMethodNotAllowed):
            headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
            detail = f"{request.method} is not allowed here; use {headers['Allow']}"
        elif isinstance(exc, web.HTTPNotFound):
            detail = "there is no such resource"
        else:
            detail = status_phrase(exc.status)
        return problem(exc.status, detail, headers=headers)
    except Exception:
        # The safety net: tests show no input reaches it, but if one ever does, the client
        # learns nothing of the internals and the operator gets the whole traceback.
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return problem(500, "the server could not answer this request")


async def _nosniff(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.setdefault("X-Content-Type-Options", "nosniff")


def install(app: web.Application) -> None:
    """Add the problem middleware and the headers every API response carries."""
    app.middlewares.append(problem_middleware)
    app.on_response_prepare.append(_nosniff)
