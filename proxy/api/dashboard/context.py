"""What every dashboard handler shares: the context in the app, and the signed-in session."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web
from argon2 import PasswordHasher

from proxy.api.clear_cache import PurgeContext
from proxy.api.dashboard.domain_figures import ClearFloors
from proxy.config.model import Config
from proxy.core.auth.ratelimit import FailureThrottle
from proxy.core.auth.sessions import SessionPolicy
from proxy.observe.telemetry import StoreFigures, Telemetry
from proxy.state.async_state import AsyncState

if TYPE_CHECKING:  # the fleet, with its Valkey client, only where a node has one
    from proxy.fleet.figures import FleetFigures

PREFIX = "/dashboard"
SESSION_COOKIE = "cdnp_session"
SIGNIN_COOKIE = "cdnp_signin"  # the sign-in form's own CSRF secret, before any session exists


class DummyHash:
    """A hash of a random password, with the hasher's parameters, made on first use (off the
    event loop: ``get`` runs where the verification runs). Two threads racing to make it
    make two equally good ones."""

    def __init__(self, hasher: PasswordHasher) -> None:
        self._hasher = hasher
        self._value: str | None = None

    def get(self) -> str:
        if self._value is None:
            self._value = self._hasher.hash(secrets.token_urlsafe(16))
        return self._value


@dataclass(frozen=True, slots=True)
class DashboardContext:
    """Everything the dashboard uses, kept in its app under DASHBOARD."""

    state: AsyncState
    store: StoreFigures | None  # None: the Domains page shows no entries or bytes
    telemetry: Telemetry | None  # None: no chart and no hit ratios
    fleet: FleetFigures | None  # None: one process serves the edge (the Nodes page says so)
    clear: PurgeContext  # the API's own clear path, shared
    clock: Callable[[], float]
    policy: SessionPolicy
    hasher: PasswordHasher
    dummy_hash: DummyHash  # verified against when the user name is unknown, to take as long
    failed_names: FailureThrottle
    failed_addresses: FailureThrottle
    hashing: asyncio.Semaphore  # argon2 takes 64 MiB a verification: a few at a time
    # With workers: the reports made before the page's own clears, not counted (B8).
    clear_floors: ClearFloors = field(default_factory=ClearFloors)

    @property
    def config(self) -> Config:
        """The config in force: the clear-cache API's, which a reload replaces."""
        return self.clear.config


DASHBOARD = web.AppKey("dashboard", DashboardContext)


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in admin. ``id`` is the cookie's secret; ``csrf`` goes in every form."""

    id: str
    digest: str
    admin: str
    csrf: str
