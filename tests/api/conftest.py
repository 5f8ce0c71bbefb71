"""Fixtures for the control-plane tests: the real API app on a real listener, with a real
state database in tmp_path and a real MemoryStore holding one entry per domain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.api.app import create_api_app
from proxy.core.auth.tokens import Scope
from proxy.state.async_state import AsyncState
from proxy.store.base import LocalPurger, Purger
from proxy.store.memory import MemoryStore
from tests.api.support import (
    DOMAINS,
    OTHER,
    START,
    AiohttpClient,
    ApiFactory,
    ApiUnderTest,
    FakeClock,
    api_config,
)


@pytest.fixture
async def make_api(tmp_path: Path, aiohttp_client: AiohttpClient) -> AsyncIterator[ApiFactory]:
    """Start the API with ``api`` settings overridden; tokens "deploy" (all domains) and
    "scoped" (other.test only) exist, and every domain has one entry in the store."""
    states: list[AsyncState] = []

    async def factory(purger: Purger | None = None, **api: Any) -> ApiUnderTest:
        config = api_config(tmp_path, **api)
        state = await AsyncState.open(
            config.api_role()[1].path, audit_max_rows=config.api_role()[1].audit_max_rows
        )
        states.append(state)
        store = MemoryStore(max_bytes=config.edge_role()[1].max_bytes)
        clock = FakeClock()
        app = create_api_app(
            config=config, state=state, purger=purger or LocalPurger(store), clock=clock
        )
        api_under_test = ApiUnderTest(
            client=await aiohttp_client(app), config=config, state=state, store=store, clock=clock
        )
        api_under_test.tokens["deploy"] = await state.create_token(
            "deploy", Scope.everything(), START
        )
        api_under_test.tokens["scoped"] = await state.create_token(
            "scoped", Scope.only([OTHER]), START
        )
        for domain in DOMAINS:
            await api_under_test.put_entry(domain)
        return api_under_test

    yield factory
    for state in states:
        await state.close()


@pytest.fixture
async def api(make_api: ApiFactory) -> ApiUnderTest:
    return await make_api()
