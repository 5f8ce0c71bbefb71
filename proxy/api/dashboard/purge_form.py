"""The Domains page's purge form: a dry run first, then the purge it previewed.

Two form posts, both CSRF-checked (``auth.action``) and both through
``proxy.api.purge.audited_purge``, the API's own path, with the admin as the caller:

1. ``POST /dashboard/domains/purge`` reads the form (kind, items one per line, soft), builds
   the ``Purge`` with ``core.purges.purge_request`` (the API's checks and limits) and runs it
   as a **dry run**. The preview shows the exact entries and bytes it would drop and its
   sample, and a Confirm form whose hidden fields hold the purge as checked: the domain, the
   kind, each item once (one field per item, so no item can be split or joined on the way)
   and soft. Cancel is a link back: nothing to undo, the dry run changed nothing.
2. ``POST /dashboard/domains/purge/confirm`` checks those fields again the same way (a
   confirm is a form like any other) and runs the purge; the page shows its receipt.

Bad input shows the Domains page again, its form open and filled as it was, with the message
and a 4xx; it does not reach the purge path, so it changes nothing and writes no audit record
(the dry run and the purge each write one). A failure of the purge path itself (a domain
not configured, the fleet unavailable) shows its status and detail the same way.
"""

from __future__ import annotations

import logging

from aiohttp import web
from multidict import MultiDict

from proxy.api.dashboard.auth import ActionHandler, Handler, action
from proxy.api.dashboard.context import DASHBOARD, Session
from proxy.api.dashboard.pages import render
from proxy.api.dashboard.receipt_view import KIND_LABELS, receipt_view
from proxy.api.dashboard.views import PurgeFill, render_domains
from proxy.api.gate import as_admin
from proxy.api.purge import PurgeAnswer, audited_purge
from proxy.core.purge.purges import InvalidPurge, Purge, purge_request

log = logging.getLogger("proxy.dashboard")

# A purge form may carry 256 targets: more than the other forms' 16 KiB, as much as the
# purge API's default body (api.max_purge_body_bytes) and aiohttp's client_max_size.
MAX_PURGE_FORM_BYTES = 1024 * 1024
# What a line of the textarea may be wrapped in: a browser sends CRLF, people paste spaces.
_LINE_PADDING = " \t\r"


class FormError(Exception):
    """The form cannot become a purge; the message says why, for the page."""


def form_items(text: str) -> list[str]:
    """The textarea's items: one per line, padding stripped, blank lines skipped. Only
    line feeds split: any other character stays in its item, for purge_request to judge."""
    items = (line.strip(_LINE_PADDING) for line in text.split("\n"))
    return [item for item in items if item]


def form_purge(kind: str, items: list[str], *, soft: bool, dry_run: bool) -> Purge:
    """The checked ``Purge`` the form asks for, or FormError saying what to fix."""
    if kind not in KIND_LABELS:
        raise FormError(f"Choose what to purge: {', '.join(KIND_LABELS.values())}.")
    if kind == "all" and items:
        raise FormError("A purge of everything takes no items: empty the list.")
    try:
        return purge_request(kind, items, soft=soft, dry_run=dry_run)
    except InvalidPurge as exc:  # purge_request's words, as the API's, made a sentence
        message = str(exc)
        message = "URL" + message[3:] if message.startswith("url ") else message
        message = message.replace("a url purge", "a URL purge")
        raise FormError(f"{message[:1].upper()}{message[1:]}.") from None


def purge_action(handler: ActionHandler) -> Handler:
    return action(handler, max_form_bytes=MAX_PURGE_FORM_BYTES)


@purge_action
async def preview(
    request: web.Request, session: Session, form: MultiDict[str]
) -> web.StreamResponse:
    text = form.get("items", "")
    return await _purge(request, session, form, text, form_items(text), dry_run=True)


@purge_action
async def confirm(
    request: web.Request, session: Session, form: MultiDict[str]
) -> web.StreamResponse:
    items = form.getall("item", [])
    return await _purge(request, session, form, "\n".join(items), items, dry_run=False)


async def _purge(
    request: web.Request,
    session: Session,
    form: MultiDict[str],
    text: str,
    items: list[str],
    *,
    dry_run: bool,
) -> web.StreamResponse:
    """Check the form's purge, run it (or its dry run), and show the preview or receipt;
    or show the form again with what went wrong."""
    domain, kind, soft = form.get("domain", ""), form.get("kind", ""), "soft" in form
    try:
        wanted = form_purge(kind, items, soft=soft, dry_run=dry_run)
    except FormError as exc:
        fill = PurgeFill(domain, kind, text, soft, str(exc))
        return await render_domains(request, session, purge=fill, status=400)
    answer = await _run(request, session, domain, wanted)
    if answer.receipt is None:
        what = "The dry run was not done" if dry_run else "Nothing was purged"
        fill = PurgeFill(domain, kind, text, soft, f"{what}: {answer.detail}.")
        return await render_domains(request, session, purge=fill, status=answer.status)
    if not dry_run:
        log.info(
            "dashboard: %s purged %s of %s (%d items, soft=%s)",
            session.admin,
            kind,
            answer.domain,
            len(wanted.items),
            soft,
        )
    return _page(request, session, answer, wanted)


async def _run(request: web.Request, session: Session, domain: str, wanted: Purge) -> PurgeAnswer:
    ctx = request.app[DASHBOARD]
    return await audited_purge(
        ctx.clear, client=request.remote, authorise=as_admin(session.admin, domain), purge=wanted
    )


def _page(
    request: web.Request, session: Session, answer: PurgeAnswer, wanted: Purge
) -> web.Response:
    """The dry run's preview, with Confirm and Cancel, or the purge's receipt."""
    assert answer.receipt is not None
    ctx = request.app[DASHBOARD]
    view = receipt_view(answer.receipt)
    return render(
        request,
        "purge.html",
        {
            "title": "Purge preview" if wanted.dry_run else "Purge receipt",
            "active": "domains",
            "domain": answer.domain,
            "purge": wanted,
            "receipt": view,
            "at": ctx.clock(),
        },
        session=session,
    )


def add_routes(app: web.Application) -> None:
    app.router.add_post("/domains/purge", preview)
    app.router.add_post("/domains/purge/confirm", confirm)
