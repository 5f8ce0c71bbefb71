"""Fixtures for the dashboard tests: the API app with its dashboard, and admin "alice"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.api.app import create_api_app
from proxy.fleet.figures import FleetFigures
from proxy.observe.telemetry import Telemetry
from proxy.state.admins import hash_password
from proxy.state.async_state import AsyncState
from proxy.store.base import LocalPurger, Purger
from proxy.store.memory import MemoryStore
from tests.api.support import START, AiohttpClient, FakeClock
from tests.dashboard.support import (
    ADMIN,
    CHEAP,
    PASSWORD,
    Dashboard,
    DashboardFactory,
    dashboard_config,
)


@pytest.fixture
async def make_dashboard(
    tmp_path: Path, aiohttp_client: AiohttpClient
) -> AsyncIterator[DashboardFactory]:
    """Start the API app with ``dashboard`` settings overridden; admin "alice" exists."""
    states: list[AsyncState] = []

    async def factory(
        purger: Purger | None = None, fleet: FleetFigures | None = None, **dashboard: Any
    ) -> Dashboard:
        config = dashboard_config(tmp_path, **dashboard)
        state = await AsyncState.open(config.api_role()[1].path)
        states.append(state)
        store = MemoryStore(max_bytes=config.edge_role()[1].max_bytes)
        clock = FakeClock()
        telemetry = Telemetry(store=store, domains=[d.name for d in config.domains], clock=clock)
        app = create_api_app(
            config=config,
            state=state,
            purger=purger or LocalPurger(store),
            clock=clock,
            telemetry=telemetry,
            store=store,
            password_hasher=CHEAP,
            fleet=fleet,
        )
        await state.admins.create(ADMIN, hash_password(CHEAP, PASSWORD), START)
        return Dashboard(
            client=await aiohttp_client(app),
            config=config,
            state=state,
            store=store,
            telemetry=telemetry,
            clock=clock,
        )

    yield factory
    for state in states:
        await state.close()


@pytest.fixture
async def dashboard(make_dashboard: DashboardFactory) -> Dashboard:
    return await make_dashboard()


@pytest.fixture
async def signed_in(dashboard: Dashboard) -> Dashboard:
    page = await dashboard.sign_in()
    assert page.status == 303, page.text
    return dashboard
