"""The Domains page's Trace form: why one URL would be a hit, a miss or a bypass (issue 25 §3).

``POST /dashboard/domains/trace`` is a form post like the others (``auth.action``: a live
admin session and its CSRF token). Its fields: ``url`` (an http(s) URL of a configured
domain), ``headers`` (a textarea, one ``Name: value`` per line) and ``fetch`` (a checkbox:
ask the origin once, assess its answer, store nothing). The form becomes the API's trace body
and goes through the API's own reading (``proxy.api.trace.read_trace``: the same checks and
messages) and its own trace (``proxy.api.trace.traced``: this process's store, read changing
nothing, and the edge's origin health). An admin may trace every configured domain.

The answer is the trace page (trace.html): the form again, filled as posted, and the report
as tables. Bad input shows the trace page with the form, the message and a 400; nothing is
traced. Like the API's, a trace changes nothing and writes no audit record.
"""

from __future__ import annotations

import json

from aiohttp import web
from multidict import MultiDict

from proxy.api import gate
from proxy.api.dashboard.auth import action
from proxy.api.dashboard.context import DASHBOARD, Session
from proxy.api.dashboard.pages import render
from proxy.api.trace import (
    INSPECT,
    PEER_NODES,
    TraceRequest,
    read_trace,
    traced,
    via_of,
    with_owner,
)

# What a line of the textarea may be wrapped in: a browser sends CRLF, people paste spaces.
_LINE_PADDING = " \t\r"
MAX_HEADER_LINES = 64
# Fields that a client sends once, joined with these when a line repeats one (RFC 9110 §5.3;
# Cookie's lines are joined as one Cookie field, RFC 6265 §5.4).
_JOINERS = {"cookie": "; "}


class FormError(Exception):
    """The form cannot become a trace; the message says why, for the page."""


def form_headers(text: str) -> dict[str, str]:
    """The textarea's fields, ``Name: value`` one per line, blank lines skipped; a name given
    twice is one field, its values joined. FormError names the first bad line."""
    fields: dict[str, str] = {}
    names: dict[str, str] = {}  # lowered name -> the name as first written
    lines = [line.strip(_LINE_PADDING) for line in text.split("\n")]
    lines = [line for line in lines if line]
    if len(lines) > MAX_HEADER_LINES:
        raise FormError(f"At most {MAX_HEADER_LINES} header lines.")
    for number, line in enumerate(lines, 1):
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise FormError(f"Header line {number} is not “Name: value”: {line!r}.")
        if name != name.rstrip():
            raise FormError(f"Header line {number}: no space may come before the colon.")
        value = value.strip(" \t")
        lowered = name.lower()
        if lowered in names:
            first = names[lowered]
            fields[first] = fields[first] + _JOINERS.get(lowered, ", ") + value
        else:
            names[lowered] = name
            fields[name] = value
    return fields


def form_trace(url: str, headers: str, *, fetch: bool) -> TraceRequest:
    """The checked trace the form asks for (the API's checks), or FormError."""
    body = {"url": url.strip(_LINE_PADDING), "headers": form_headers(headers), "fetch": fetch}
    try:
        return read_trace(json.dumps(body).encode())
    except gate.Rejected as rejected:  # the API's words, made a sentence
        detail = rejected.detail.replace("the field 'url'", "the URL")
        detail = detail.replace("the field 'headers'", "the headers")
        raise FormError(f"{detail[:1].upper()}{detail[1:]}.") from None


@action
async def trace_page(
    request: web.Request, session: Session, form: MultiDict[str]
) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    url, headers, fetch = form.get("url", ""), form.get("headers", ""), "fetch" in form
    fill = {"url": url, "headers": headers, "fetch": fetch}
    try:
        asked = form_trace(url, headers, fetch=fetch)
        config = ctx.config.by_name.get(asked.domain)
        if config is None:
            raise FormError(f"{asked.domain} is not a domain of this edge.")
    except FormError as exc:
        return _page(request, session, fill, error=str(exc), status=400)
    # The dashboard is a sub-application: the store's inspect and the edge's origin health
    # are the API app's, which config_dict reaches.
    inspect = request.config_dict.get(INSPECT)
    answer = await traced(
        request.config_dict,
        config,
        asked,
        inspect,
        ctx.clock,
        client_address=request.remote or "",
        via=via_of(ctx.config),
    )
    await with_owner(answer, request.config_dict.get(PEER_NODES), ctx.config, config)
    return _page(request, session, fill, answer=answer)


def _page(
    request: web.Request,
    session: Session,
    fill: dict[str, object],
    *,
    answer: dict[str, object] | None = None,
    error: str | None = None,
    status: int = 200,
) -> web.Response:
    return render(
        request,
        "trace.html",
        {"title": "Trace", "active": "domains", "trace": fill, "answer": answer, "error": error},
        session=session,
        status=status,
    )


def add_routes(app: web.Application) -> None:
    app.router.add_post("/domains/trace", trace_page)
