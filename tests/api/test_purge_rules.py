"""A URL purge names request-targets as clients send them, and covers the entry its target
maps to after the domain's key normalisation (issue 25 §1, decision 0033)."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.api.app import create_api_app
from proxy.config.model import parse_config
from proxy.core.auth.tokens import Scope
from proxy.state.async_state import AsyncState
from proxy.store.base import LocalPurger
from proxy.store.memory import MemoryStore
from tests.api.support import DOMAIN, START, AiohttpClient, FakeClock, stored_response


async def test_a_url_purge_is_mapped_through_the_key_normalisation(
    tmp_path: Path, aiohttp_client: AiohttpClient
) -> None:
    rules = [{"name": "utm", "query_ignore": ["utm_*"], "query_sort": True}]
    config = parse_config(
        {
            "edge": {"listen": "127.0.0.1:0"},
            "api": {"listen": "127.0.0.1:0"},
            "cache": {"max_bytes": "1MiB"},
            "state": {"path": "state.db"},
            "domains": [{"name": DOMAIN, "origin": "http://127.0.0.1:9", "rules": rules}],
        },
        base_dir=tmp_path,
    )
    state = await AsyncState.open(config.api_role()[1].path, audit_max_rows=100)
    try:
        store = MemoryStore(max_bytes=1024**2)
        app = create_api_app(
            config=config, state=state, purger=LocalPurger(store), clock=FakeClock()
        )
        client = await aiohttp_client(app)
        token = await state.create_token("deploy", Scope.everything(), START)
        for target in ("/p?a=1&b=2", "/q"):
            key = (await store.lookup(DOMAIN, target)).key
            assert await store.put(key, stored_response())
        response = await client.post(
            "/api/v1/cdn/purge",
            data=json.dumps({"domain": DOMAIN, "urls": ["/p?b=2&utm_source=x&a=1"]}),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        receipt = await response.json()
        assert response.status == 200, receipt
        assert receipt["entries"] == 1
        assert receipt["items"] == ["/p?b=2&utm_source=x&a=1", "/p?a=1&b=2"]
        assert not (await store.lookup(DOMAIN, "/p?a=1&b=2")).variants
        assert (await store.lookup(DOMAIN, "/q")).variants
    finally:
        await state.close()
