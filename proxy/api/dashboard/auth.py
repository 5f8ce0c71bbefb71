"""Signing in and out, sessions, and the CSRF check every state-changing form goes through.

- **Sign-in.** The form carries a CSRF token derived from a random secret in a short-lived
  ``cdnp_signin`` cookie, so another site cannot sign a browser in to an account of its
  choosing. Failed sign-ins count against the user name and the address
  (``proxy.core.auth.ratelimit``): past ``dashboard.signin_failures_allowed`` each further failure
  doubles the wait, and an attempt made while waiting is refused (429) without checking the
  password. An unknown user name costs one argon2 verification, like a known one.
- **Sessions.** A fresh random id on every sign-in (so no id chosen before sign-in survives
  it), sent as an HttpOnly, SameSite=Strict cookie scoped to /dashboard, Secure when
  ``dashboard.secure_cookie`` says the dashboard is reached over HTTPS. The database keeps
  only the id's SHA-256 and ends the session after ``session_idle_timeout`` idle or
  ``session_lifetime`` in all (``proxy.core.auth.sessions``). Signing out deletes it.
- **CSRF.** ``action`` handlers run only for a live session whose form carries the session's
  token; anything else is refused with 403 before the handler sees the form.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from multidict import MultiDict
from yarl import URL

from proxy.api.dashboard.context import (
    DASHBOARD,
    PREFIX,
    SESSION_COOKIE,
    SIGNIN_COOKIE,
    DashboardContext,
    Session,
)
from proxy.api.dashboard.pages import PageError, error_page, render
from proxy.core.auth.sessions import (
    SessionCheck,
    check_session,
    csrf_matches,
    csrf_token,
    expiry_cutoffs,
    is_session_id,
    needs_touch,
    session_digest,
)
from proxy.observe.log_floods import THROTTLED
from proxy.state.admins import MAX_PASSWORD_LENGTH, is_valid_admin_name, verify_password

log = logging.getLogger("proxy.dashboard")

SIGN_IN = PREFIX + "/sign-in"
MAX_FORM_BYTES = 16 * 1024
SIGNIN_COOKIE_AGE = 3600  # seconds a sign-in form stays usable
# The same answer for an unknown name and a wrong password, so neither is revealed.
WRONG_CREDENTIALS = "Wrong username or password."
# Where a sign-in may return to: dashboard pages only, so ?next= is never an open redirect.
RETURN_PAGES = frozenset(PREFIX + page for page in ("", "/tokens", "/domains", "/history"))

PageHandler = Callable[[web.Request, Session], Awaitable[web.StreamResponse]]
ActionHandler = Callable[[web.Request, Session, MultiDict[str]], Awaitable[web.StreamResponse]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_T = TypeVar("_T")


def see_other(location: str) -> web.Response:
    """303: after a form post, the browser GETs ``location`` (post/redirect/get)."""
    return web.Response(status=303, headers={"Location": location})


def _cookie(ctx: DashboardContext) -> dict[str, Any]:
    return {
        "path": PREFIX,
        "httponly": True,
        "samesite": "Strict",
        "secure": True if ctx.config.dashboard.secure_cookie else None,
    }


async def current_session(request: web.Request) -> tuple[Session | None, bool]:
    """The live session of this request, and whether it carried one that has now ended."""
    ctx = request.app[DASHBOARD]
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id is None:
        return None, False
    if not is_session_id(session_id):
        return None, True
    digest = session_digest(session_id)
    record = await ctx.state.admins.session(digest)
    if record is None:
        return None, True
    now = ctx.clock()
    if check_session(ctx.policy, record.created_at, record.last_seen_at, now) != (
        SessionCheck.VALID
    ):
        await ctx.state.admins.end_session(digest)
        return None, True
    if needs_touch(record.last_seen_at, now):
        await ctx.state.admins.touch_session(digest, now)
    return Session(
        id=session_id, digest=digest, admin=record.admin, csrf=csrf_token(session_id)
    ), False


def signed_in(handler: PageHandler) -> Handler:
    """A page for signed-in admins; anyone else is sent to the sign-in page."""

    @functools.wraps(handler)
    async def page(request: web.Request) -> web.StreamResponse:
        session, ended = await current_session(request)
        if session is None:
            query = {"next": request.path} if request.path in RETURN_PAGES else {}
            if ended:
                query["ended"] = "1"
            response = see_other(str(URL(SIGN_IN).with_query(query)))
            if ended:
                response.del_cookie(SESSION_COOKIE, **_cookie(request.app[DASHBOARD]))
            return response
        return await handler(request, session)

    return page


def action(handler: ActionHandler, *, max_form_bytes: int = MAX_FORM_BYTES) -> Handler:
    """A state-changing form post: needs a live session and that session's CSRF token.
    ``max_form_bytes``: a form's largest size (the purge form's is larger)."""

    @functools.wraps(handler)
    async def post(request: web.Request) -> web.StreamResponse:
        session, ended = await current_session(request)
        if session is None:
            response = error_page(
                request,
                403,
                "You are not signed in, or your session has ended. Nothing was changed: "
                "sign in and try again.",
            )
            if ended:
                response.del_cookie(SESSION_COOKIE, **_cookie(request.app[DASHBOARD]))
            return response
        form = await read_form(request, max_form_bytes)
        if not csrf_matches(session.id, form.get("csrf")):
            log.warning(
                "dashboard: %s %s by %s without a valid CSRF token, refused",
                request.method,
                request.path,
                session.admin,
            )
            raise PageError(
                403,
                "This form did not come from the dashboard page (its CSRF token is missing or "
                "wrong), so nothing was changed. Reload the page and try again.",
            )
        return await handler(request, session, form)

    return post


async def read_form(request: web.Request, max_bytes: int = MAX_FORM_BYTES) -> MultiDict[str]:
    """The text fields of a form post, bounded in size; 415 or 413 otherwise."""
    if request.content_type not in ("application/x-www-form-urlencoded", "multipart/form-data"):
        raise PageError(415, "Send this as an HTML form.")
    if request.content_length is not None and request.content_length > max_bytes:
        raise PageError(413, "The form is too large.")
    try:
        data = await request.post()
    except web.HTTPRequestEntityTooLarge:
        raise PageError(413, "The form is too large.") from None
    except ValueError:
        raise PageError(400, "The form could not be read.") from None
    return MultiDict((name, value) for name, value in data.items() if isinstance(value, str))


# -- sign in -----------------------------------------------------------------------------------


def _return_to(value: str | None) -> str:
    return value if value in RETURN_PAGES else PREFIX


async def sign_in_page(request: web.Request) -> web.StreamResponse:
    session, _ = await current_session(request)
    if session is not None:
        return see_other(_return_to(request.query.get("next")))
    notice = None
    if "ended" in request.query:
        notice = "Your session has ended. Sign in again."
    elif "signed_out" in request.query:
        notice = "You have signed out."
    return _sign_in_form(request, notice=notice)


def _sign_in_form(
    request: web.Request,
    *,
    status: int = 200,
    notice: str | None = None,
    error: str | None = None,
    username: str = "",
    next_page: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    ctx = request.app[DASHBOARD]
    secret = request.cookies.get(SIGNIN_COOKIE, "")
    if not is_session_id(secret):
        secret = secrets.token_urlsafe(32)
    response = render(
        request,
        "sign_in.html",
        {
            "title": "Sign in",
            "csrf": csrf_token(secret),
            "next": _return_to(next_page or request.query.get("next")),
            "notice": notice,
            "error": error,
            "username": username,
        },
        session=None,
        status=status,
        headers=headers,
    )
    response.set_cookie(SIGNIN_COOKIE, secret, max_age=SIGNIN_COOKIE_AGE, **_cookie(ctx))
    return response


async def sign_in(request: web.Request) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    form = await read_form(request)
    username = form.get("username", "")
    password = form.get("password", "")

    def refused(status: int, error: str, headers: dict[str, str] | None = None) -> web.Response:
        return _sign_in_form(
            request,
            status=status,
            error=error,
            username=username,
            next_page=form.get("next"),
            headers=headers,
        )

    if not csrf_matches(request.cookies.get(SIGNIN_COOKIE, ""), form.get("csrf")):
        return refused(403, "The sign-in form had expired (or cookies are blocked). Try again.")
    if not username or not password:
        return refused(400, "Enter your username and password.")
    now = ctx.clock()
    keys = _ThrottleKeys.of(request, username)
    wait = keys.retry_after(ctx, now)
    if wait is not None:
        error = f"Too many failed sign-ins. Try again in {wait} seconds."
        return refused(429, error, headers={"Retry-After": str(wait)})
    verified = await _counted_verify(ctx, keys, username, password, now)
    if verified is None:
        # Only a name that could be an admin's is logged: people type passwords there too.
        shown = repr(username) if keys.name else "an impossible name"
        log.info("dashboard: failed sign-in as %s from %s", shown, request.remote, extra=THROTTLED)
        return refused(403, WRONG_CREDENTIALS)
    session_id = await _start_session(ctx, username, password, verified, now)
    if session_id is None:  # the password changed, or the admin was removed, meanwhile
        return refused(403, WRONG_CREDENTIALS)
    log.info("dashboard: %s signed in from %s", username, request.remote)
    response = see_other(_return_to(form.get("next")))
    response.set_cookie(SESSION_COOKIE, session_id, **_cookie(ctx))
    response.del_cookie(SIGNIN_COOKIE, **_cookie(ctx))
    return response


@dataclass(frozen=True, slots=True)
class _ThrottleKeys:
    """What a sign-in's failures count against: its address, and its user name if that could
    be an admin's (any other name is not remembered, so junk cannot fill the table)."""

    address: str
    name: str | None

    @classmethod
    def of(cls, request: web.Request, username: str) -> _ThrottleKeys:
        name = "name:" + username if is_valid_admin_name(username) else None
        return cls(address="address:" + (request.remote or "unknown"), name=name)

    def retry_after(self, ctx: DashboardContext, now: float) -> int | None:
        waits = [ctx.failed_addresses.retry_after(self.address, now)]
        if self.name is not None:
            waits.append(ctx.failed_names.retry_after(self.name, now))
        return max((w for w in waits if w is not None), default=None)


async def _counted_verify(
    ctx: DashboardContext, keys: _ThrottleKeys, username: str, password: str, now: float
) -> str | None:
    """The admin's stored hash if ``password`` is right, or None, with the throttles told.

    Counted as a failure before the check and forgiven after a success, so that guesses
    sent in parallel cannot all be checked before the first one is counted."""
    ctx.failed_addresses.record_failure(keys.address, now)
    if keys.name is not None:
        ctx.failed_names.record_failure(keys.name, now)
    verified = await _verify(ctx, username if keys.name else None, password)
    if verified is not None:
        ctx.failed_addresses.record_success(keys.address)
        if keys.name is not None:
            ctx.failed_names.record_success(keys.name)
    return verified


async def _start_session(
    ctx: DashboardContext, username: str, password: str, verified: str, now: float
) -> str | None:
    """A new session's id for a verified admin, or None if the admin changed meanwhile."""
    rehashed = None
    if ctx.hasher.check_needs_rehash(verified):  # the hasher's parameters have moved on
        rehashed = await _hashing(ctx, ctx.hasher.hash, password)
    await ctx.state.admins.end_expired_sessions(*expiry_cutoffs(ctx.policy, now))
    session_id = secrets.token_urlsafe(32)
    started = await ctx.state.admins.start_session(
        session_digest(session_id), username, verified, now, rehashed=rehashed
    )
    return session_id if started else None


async def _hashing(ctx: DashboardContext, fn: Callable[..., _T], *args: Any) -> _T:
    """Run argon2 off the event loop and off the state thread, a few at a time."""
    async with ctx.hashing:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def _verify(ctx: DashboardContext, username: str | None, password: str) -> str | None:
    """The stored hash ``password`` matches, or None. Unknown names cost the same work."""
    if len(password) > MAX_PASSWORD_LENGTH:
        return None
    stored = await ctx.state.admins.password_hash(username) if username else None

    def verify() -> bool:
        return verify_password(ctx.hasher, stored or ctx.dummy_hash.get(), password)

    return stored if await _hashing(ctx, verify) and stored is not None else None


# -- sign out ----------------------------------------------------------------------------------


@action
async def sign_out(
    request: web.Request, session: Session, form: MultiDict[str]
) -> web.StreamResponse:
    ctx = request.app[DASHBOARD]
    await ctx.state.admins.end_session(session.digest)
    log.info("dashboard: %s signed out", session.admin)
    response = see_other(str(URL(SIGN_IN).with_query({"signed_out": "1"})))
    response.del_cookie(SESSION_COOKIE, **_cookie(ctx))
    return response
