"""The Overview (chart), Domains (with "Clear cache"), History and Nodes pages.

"Clear cache" calls ``proxy.api.clear_cache.audited_clear``, the API's own path, with the
admin as the caller: the same domain checks, the same purger, the same one audit record per
attempt (actor ``admin:<name>``), the same clear counter in /metrics.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from aiohttp import web
from multidict import MultiDict
from yarl import URL

from proxy.api.clear_cache import OUTCOMES, as_admin, audited_clear
from proxy.api.dashboard.activity import changed_at, with_changes
from proxy.api.dashboard.auth import action, see_other, signed_in
from proxy.api.dashboard.chart import build_chart
from proxy.api.dashboard.context import DASHBOARD, PREFIX, DashboardContext, Session
from proxy.api.dashboard.pages import PageError, render
from proxy.api.dashboard.peer_view import peer_nodes
from proxy.api.dashboard.receipt_view import HISTORY_KINDS, KIND_LABELS, history_row
from proxy.api.dashboard.tiers import process_tiers, tiers_view
from proxy.api.readiness import READINESS, ServerView
from proxy.core.domains import normalise_domain
from proxy.state.sqlite import MAX_AUDIT_TEXT
from proxy.store.base import DomainStats
from proxy.store.shared import SharedStats

log = logging.getLogger("proxy.dashboard")

DOMAINS = PREFIX + "/domains"
HISTORY = PREFIX + "/history"
PAGE_SIZE = 50
MAX_PAGE = 10_000  # the audit log keeps state.audit_max_rows; no page lies beyond


@signed_in
async def overview(request: web.Request, session: Session) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    chart = None
    if ctx.telemetry is not None:
        minutes = ctx.telemetry.timeline(ctx.clock(), 60)
        # Clears and purges from the audit log: they survive a restart (activity.py).
        times = await changed_at(ctx.state, minutes[0].start)
        chart = build_chart(with_changes(minutes, times))
    tiers = await tiers_view(ctx.telemetry, ctx.store, [d.name for d in ctx.config.domains])
    return render(
        request,
        "overview.html",
        {"title": "Overview", "active": "overview", "chart": chart, "tiers": tiers},
        session=session,
    )


@dataclass(frozen=True, slots=True)
class PurgeFill:
    """The Domains page's purge form (purge_form.py) as it was posted, to show it again with
    ``error``."""

    domain: str
    kind: str
    text: str  # the items, one per line
    soft: bool
    error: str


@dataclass(frozen=True, slots=True)
class DomainRow:
    name: str
    origins: tuple[str, ...]  # every origin server, backups last with " (backup)"
    entries: int | None
    bytes: int | None
    hits: int | None
    misses: int | None
    hit_ratio: float | None
    servers: tuple[ServerView, ...] = ()  # its origin servers (decision 0034)


@signed_in
async def domains_page(request: web.Request, session: Session) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    cleared = request.query.get("cleared")
    # Only a configured domain is echoed back, so the notice cannot be made to say anything.
    notice = f"Cache cleared for {cleared}." if cleared in ctx.config.by_name else None
    return await render_domains(request, session, notice=notice)


async def render_domains(
    request: web.Request,
    session: Session,
    *,
    notice: str | None = None,
    purge: PurgeFill | None = None,
    status: int = 200,
) -> web.Response:
    """The Domains page; ``purge``: a purge form to show again, open, with its error
    (proxy/api/dashboard/purge_form.py)."""
    ctx = request.app[DASHBOARD]
    readiness = request.config_dict.get(READINESS)
    rows = []
    for domain in ctx.config.domains:
        stats = await _domain_stats(ctx, domain.name)
        counts = ctx.telemetry.domain_counts(domain.name) if ctx.telemetry is not None else None
        rows.append(
            DomainRow(
                name=domain.name,
                origins=(*domain.origins, *(f"{b} (backup)" for b in domain.backup_origins)),
                entries=stats.entries if stats else None,
                bytes=stats.bytes if stats else None,
                hits=counts.hits if counts else None,
                misses=counts.misses if counts else None,
                hit_ratio=counts.hit_ratio if counts else None,
                servers=tuple(readiness.servers(domain)) if readiness is not None else (),
            )
        )
    return render(
        request,
        "domains.html",
        {
            "title": "Domains",
            "active": "domains",
            "rows": rows,
            "notice": notice,
            "purge": purge,
            "kinds": KIND_LABELS,
            "shared": _shared_tier(ctx),
        },
        session=session,
        status=status,
    )


async def _domain_stats(ctx: DashboardContext, domain: str) -> DomainStats | None:
    """A domain's entries and bytes in the memory tier (with workers, summed over them, not
    counting reports made before the page's own last clear of it: domain_figures.py)."""
    if ctx.fleet is not None:
        floored = ctx.clear_floors.domain_stats(ctx.fleet, domain)
        if floored is not None:
            return floored
    return await ctx.store.domain_stats(domain) if ctx.store is not None else None


def _shared_tier(ctx: DashboardContext) -> SharedStats | None:
    """The node's shared tier (disk), which keeps no count per domain: the page gives its
    whole figures beside the domains' memory-tier ones."""
    tier = ctx.telemetry.tier if ctx.telemetry is not None else None
    return tier.shared_stats() if tier is not None else None


@action
async def clear_domain(
    request: web.Request, session: Session, form: MultiDict[str]
) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    domain = form.get("domain", "")
    answer = await audited_clear(
        ctx.clear, client=request.remote, authorise=as_admin(session.admin, domain)
    )
    if not answer.cleared:
        raise PageError(answer.status, f"The cache was not cleared: {answer.detail}.")
    if ctx.fleet is not None and answer.domain is not None:
        await ctx.clear_floors.cleared(ctx.fleet, answer.domain)
    log.info(
        "dashboard: %s cleared %s (%d entries)",
        session.admin,
        answer.domain,
        answer.entries_dropped,
    )
    return see_other(str(URL(DOMAINS).with_query({"cleared": answer.domain or ""})))


@signed_in
async def history_page(request: web.Request, session: Session) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    domain = request.query.get("domain", "").strip()
    outcome = request.query.get("outcome", "")
    kind = request.query.get("kind", "")
    page_text = request.query.get("page", "1")
    if len(domain) > MAX_AUDIT_TEXT:
        raise PageError(400, f"A domain is at most {MAX_AUDIT_TEXT} characters.")
    with contextlib.suppress(ValueError):  # the log also holds names that were not host names
        domain = normalise_domain(domain) if domain else domain
    if outcome and outcome not in OUTCOMES:
        raise PageError(400, f"The outcome must be one of: {', '.join(OUTCOMES)}.")
    if kind and kind not in HISTORY_KINDS:
        raise PageError(400, f"The kind must be one of: {', '.join(HISTORY_KINDS)}.")
    if not (page_text.isascii() and page_text.isdigit() and 1 <= int(page_text) <= MAX_PAGE):
        raise PageError(400, f"The page must be a number from 1 to {MAX_PAGE}.")
    page = int(page_text)
    records = await ctx.state.list_audit(
        PAGE_SIZE + 1,
        (page - 1) * PAGE_SIZE,
        domain=domain or None,
        outcome=outcome or None,
        kind=kind or None,
    )
    filters = {
        key: value
        for key, value in (("domain", domain), ("outcome", outcome), ("kind", kind))
        if value
    }

    def link(to: int) -> str:
        return str(URL(HISTORY).with_query({**filters, "page": str(to)}))

    return render(
        request,
        "history.html",
        {
            "title": "History",
            "active": "history",
            "rows": [history_row(record) for record in records[:PAGE_SIZE]],
            "page": page,
            "newer": link(page - 1) if page > 1 else None,
            "older": link(page + 1) if len(records) > PAGE_SIZE else None,
            "domain": domain,
            "outcome": outcome,
            "outcomes": OUTCOMES,
            "kind": kind,
            "kinds": HISTORY_KINDS,
            "domains": ctx.config.domains,
        },
        session=session,
    )


@signed_in
async def nodes_page(request: web.Request, session: Session) -> web.StreamResponse:
    """Every edge process of the fleet (proxy/fleet/figures.py), or a word that there is
    none (one process serves the edge itself)."""
    ctx = request.app[DASHBOARD]
    processes = ctx.fleet.processes() if ctx.fleet is not None else None
    tiers = await tiers_view(ctx.telemetry, ctx.store, [d.name for d in ctx.config.domains])
    each = process_tiers(ctx.fleet) if ctx.fleet is not None else {}
    peers = peer_nodes(ctx.fleet.reports()) if ctx.fleet is not None else None
    return render(
        request,
        "nodes.html",
        {
            "title": "Nodes",
            "active": "nodes",
            "processes": processes,
            "tiers": tiers,
            "process_tiers": each,
            "peers": peers,
        },
        session=session,
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("", overview)
    app.router.add_get("/domains", domains_page)
    app.router.add_post("/domains/clear", clear_domain)
    app.router.add_get("/history", history_page)
    app.router.add_get("/nodes", nodes_page)
