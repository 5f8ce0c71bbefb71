"""The Tokens page: list, create, regenerate, revoke.

A new or regenerated token is rendered straight into the answer to the POST that made it
(``Cache-Control: no-store``, like every dashboard page), in ``data-testid="new-token"``. It
is never put in a redirect, a URL, the session or a log, so it is shown exactly once: a
reload asks to resend the form, and resending makes yet another token. Only the token's
name is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from multidict import MultiDict

from proxy.api.dashboard.auth import action, see_other, signed_in
from proxy.api.dashboard.context import DASHBOARD, PREFIX, Session
from proxy.api.dashboard.pages import PageError, render
from proxy.config.model import Config
from proxy.core.auth.tokens import Scope, is_valid_token_name
from proxy.core.domains import InvalidDomain, normalise_domain
from proxy.errors import NotFoundError

log = logging.getLogger("proxy.dashboard")

TOKENS = PREFIX + "/tokens"
ALL_DOMAINS = "*"  # the scope checkbox for every domain
BAD_NAME = "A token name is 1 to 64 letters, digits, '.', '_' or '-'."


async def _page(
    request: web.Request,
    session: Session,
    *,
    status: int = 200,
    new_token: Mapping[str, str] | None = None,
    notice: str | None = None,
    error: str | None = None,
    form: Mapping[str, Any] | None = None,
) -> web.Response:
    ctx = request.app[DASHBOARD]
    return render(
        request,
        "tokens.html",
        {
            "title": "Tokens",
            "active": "tokens",
            "tokens": await ctx.state.list_tokens(),
            "domains": ctx.config.domains,
            "all_domains": ALL_DOMAINS,
            "new_token": new_token,
            "notice": notice,
            "error": error,
            "form": form or {"name": "", "scope": ()},
        },
        session=session,
        status=status,
    )


@signed_in
async def tokens_page(request: web.Request, session: Session) -> web.StreamResponse:
    revoked = request.query.get("revoked", "")
    # Only a token name is echoed back, so the notice cannot be made to say anything else.
    notice = f"Token “{revoked}” revoked." if is_valid_token_name(revoked) else None
    return await _page(request, session, notice=notice)


def parse_scope(values: Sequence[str], config: Config) -> Scope:
    """The scope the form's checkboxes ask for; ValueError with a message for people."""
    if not values:
        raise ValueError("Choose the domains the token may clear, or all domains.")
    if ALL_DOMAINS in values:
        if len(values) > 1:
            raise ValueError("Choose either all domains or some domains, not both.")
        return Scope.everything()
    domains = set()
    for value in values:
        try:
            domain = normalise_domain(value)
        except InvalidDomain:
            raise ValueError(f"“{value[:80]}” is not a domain name.") from None
        if domain not in config.by_name:
            raise ValueError(f"“{domain}” is not a domain of this CDN.")
        domains.add(domain)
    return Scope.only(domains)


@action
async def create_token(
    request: web.Request, session: Session, form: MultiDict[str]
) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    name = form.get("name", "").strip()
    values = form.getall("scope", [])
    entered = {"name": name[:64], "scope": tuple(values)}
    if not is_valid_token_name(name):
        return await _page(request, session, status=400, error=BAD_NAME, form=entered)
    try:
        scope = parse_scope(values, ctx.config)
    except ValueError as exc:
        return await _page(request, session, status=400, error=str(exc), form=entered)
    if any(token.name == name for token in await ctx.state.list_tokens()):
        error = f"A token named “{name}” already exists. Pick another name, or regenerate it."
        return await _page(request, session, status=409, error=error, form=entered)
    token = await ctx.state.create_token(name, scope, ctx.clock())
    log.info("dashboard: %s created token %r (%s)", session.admin, name, scope.describe())
    return await _page(request, session, new_token={"name": name, "value": token})


def _name(request: web.Request) -> str:
    name = request.match_info["name"]
    if not is_valid_token_name(name):
        raise PageError(404, "There is no token by that name.")
    return name


@contextmanager
def _named_token(request: web.Request) -> Iterator[str]:
    """The token the path names; a state that no longer has it is a 404 page."""
    name = _name(request)
    try:
        yield name
    except NotFoundError:
        raise PageError(404, f"There is no token named “{name}”.") from None


@action
async def regenerate_token(
    request: web.Request, session: Session, form: MultiDict[str]
) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    with _named_token(request) as name:
        token = await ctx.state.regenerate_token(name, ctx.clock())
    log.info("dashboard: %s regenerated token %r", session.admin, name)
    return await _page(request, session, new_token={"name": name, "value": token})


@action
async def revoke_token(
    request: web.Request, session: Session, form: MultiDict[str]
) -> web.StreamResponse:
    with _named_token(request) as name:
        await request.app[DASHBOARD].state.revoke_token(name)
    log.info("dashboard: %s revoked token %r", session.admin, name)
    return see_other(f"{TOKENS}?revoked={name}")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/tokens", tokens_page)
    app.router.add_post("/tokens", create_token)
    app.router.add_post("/tokens/{name}/regenerate", regenerate_token)
    app.router.add_post("/tokens/{name}/revoke", revoke_token)
