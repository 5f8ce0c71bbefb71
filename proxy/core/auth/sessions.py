"""Dashboard sessions and their CSRF tokens: the rules, with no I/O and no clock.

A session id is a random secret held only by the browser (in a cookie). The state database
keeps ``session_digest(id)``, so a copy of the database cannot be replayed as a cookie. A
session ends at whichever comes first:

- ``idle_timeout`` seconds after it was last used, or
- ``lifetime`` seconds after sign-in, however busy it has been.

The CSRF token of a session is derived from its id (an HMAC keyed by the id), so it needs no
storage of its own, differs per session, and reveals nothing about the id: a page that leaks
its CSRF token leaks no cookie. Forms carry it; ``csrf_matches`` compares in constant time.

Last-use times are written at most once per ``TOUCH_INTERVAL`` seconds, so browsing reads the
database but rarely writes it; idle expiry is therefore exact to within that interval.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
from dataclasses import dataclass

TOUCH_INTERVAL = 60.0
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)
_CSRF_PURPOSE = b"cdn-proxy dashboard csrf v1"


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    idle_timeout: float
    lifetime: float

    def __post_init__(self) -> None:
        if not (self.idle_timeout > 0 and self.lifetime > 0):
            raise ValueError("session timeouts must be greater than zero")


class SessionCheck(enum.Enum):
    VALID = "valid"
    IDLE = "idle"  # not used for idle_timeout seconds
    EXPIRED = "expired"  # older than lifetime


def check_session(
    policy: SessionPolicy, created_at: float, last_seen_at: float, now: float
) -> SessionCheck:
    """Whether a session may still be used at ``now``."""
    if now - created_at >= policy.lifetime:
        return SessionCheck.EXPIRED
    if now - last_seen_at >= policy.idle_timeout:
        return SessionCheck.IDLE
    return SessionCheck.VALID


def needs_touch(last_seen_at: float, now: float) -> bool:
    """Whether the session's last-use time is worth writing again."""
    return now - last_seen_at >= TOUCH_INTERVAL or now < last_seen_at


def expiry_cutoffs(policy: SessionPolicy, now: float) -> tuple[float, float]:
    """(last_seen_cutoff, created_cutoff): sessions at or below either cutoff are over."""
    return now - policy.idle_timeout, now - policy.lifetime


def is_session_id(value: str) -> bool:
    """Whether a cookie value has the shape of a session id (anything else is not looked up)."""
    return SESSION_ID.fullmatch(value) is not None


def session_digest(session_id: str) -> str:
    """The SHA-256 hex digest of a session id: what the state database stores."""
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


def csrf_token(session_id: str) -> str:
    """The CSRF token of the session (or sign-in form) whose secret is ``session_id``."""
    return hmac.new(session_id.encode("ascii"), _CSRF_PURPOSE, hashlib.sha256).hexdigest()


def csrf_matches(session_id: str, given: str | None) -> bool:
    """Whether a submitted form's token is the session's, compared in constant time."""
    if given is None:
        return False
    expected = csrf_token(session_id)
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))
